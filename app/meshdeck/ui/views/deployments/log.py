"""The log tab of the deployments view: a part's log with search and Follow, watched through the registry.

`LogPanel` shows the text (escaped by the registry): a tail, then new text appended; search highlights
every match; Follow keeps the view at the newest line. `WatchedLog` asks the registry to watch the log the
tab shows while it is seen (`DeployService.watch_log`: its new text arrives as DeploymentLogLines through
the bridge), reads it once when Follow is off, and ends the watch when the tab, the view or the part
changes — a log nobody sees is never read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor, QTextDocument
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from meshdeck.core.errors import InputError
from meshdeck.services.deployments.events import DeploymentLogLines
from meshdeck.ui.context import ConsoleContext

log = logging.getLogger(__name__)
LOG_LINES = 400  # the tail a watch starts with


class LogPanel(QWidget):
    """A worker's log tail. Search highlights every match; Follow keeps the view at the newest line."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.worker = QComboBox()
        self.worker.setObjectName("logWorker")
        self.search = QLineEdit()
        self.search.setObjectName("logSearch")
        self.search.setPlaceholderText("search the log (Return: next match)")
        self.search.textChanged.connect(self.highlight)
        self.search.returnPressed.connect(self.find_next)
        self.follow = QCheckBox("Follow")
        self.follow.setObjectName("logFollow")
        self.follow.setChecked(True)
        self.matches = QLabel()
        self.text = QPlainTextEdit()
        self.text.setObjectName("logText")
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text.setMaximumBlockCount(5000)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Worker"))
        bar.addWidget(self.worker)
        bar.addWidget(self.search, 1)
        bar.addWidget(self.matches)
        bar.addWidget(self.follow)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.text, 1)

    def set_workers(self, commands: list[str]) -> None:
        current = self.worker.currentText()
        if commands != [self.worker.itemText(i) for i in range(self.worker.count())]:
            self.worker.clear()
            self.worker.addItems(commands)
            if current in commands:
                self.worker.setCurrentText(current)

    def append_text(self, text: str) -> None:
        """More of the log, after what is shown (the oldest lines go past `maximumBlockCount`)."""
        bar = self.text.verticalScrollBar()
        position = bar.value()
        cursor = QTextCursor(self.text.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text)
        bar.setValue(bar.maximum() if self.follow.isChecked() else position)
        if self.search.text():
            self.highlight()

    def set_text(self, text: str) -> None:
        if text == self.text.toPlainText():
            return
        bar = self.text.verticalScrollBar()
        position = bar.value()
        self.text.setPlainText(text)
        if self.follow.isChecked():
            self.text.moveCursor(QTextCursor.MoveOperation.End)
            bar.setValue(bar.maximum())
        else:
            bar.setValue(position)
        self.highlight()

    def highlight(self) -> int:
        """Mark every occurrence of the search text; returns how many there are."""
        needle = self.search.text()
        selections: list[QTextEdit.ExtraSelection] = []
        if needle:
            fmt = QTextCharFormat()
            fmt.setBackground(QColor("#F9E79F"))
            fmt.setForeground(QColor("#000000"))
            cursor = self.text.document().find(needle, 0)
            while not cursor.isNull() and len(selections) < 10000:
                selection = QTextEdit.ExtraSelection()
                selection.cursor = cursor
                selection.format = fmt
                selections.append(selection)
                cursor = self.text.document().find(needle, cursor)
        self.text.setExtraSelections(selections)
        self.matches.setText(f"{len(selections)} match(es)" if needle else "")
        return len(selections)

    def find_next(self) -> bool:
        found = self.text.find(self.search.text())
        if not found:  # wrap around
            self.text.moveCursor(QTextCursor.MoveOperation.Start)
            found = self.text.find(self.search.text(), QTextDocument.FindFlag(0))
        if found:
            self.follow.setChecked(False)
        return found


class WatchedLog:
    """Keeps the registry watching the log `panel` shows while `seen()` names one: (deployment, command)."""

    def __init__(self, context: ConsoleContext, panel: LogPanel, seen: Callable[[], tuple[str, str] | None]) -> None:
        self.context = context
        self.panel = panel
        self._seen = seen
        self.shown: tuple[str, str] | None = None  # (deployment, command) the panel shows
        self._unwatch: Callable[[], None] | None = None  # ends the registry's watch of it
        context.bridge.deployment_log.connect(self._lines)
        panel.follow.toggled.connect(lambda _on: self.update())
        panel.worker.currentTextChanged.connect(lambda _text: self.update())

    def update(self) -> None:
        """Watch the log seen now (Follow: as it grows; else read once). Another log, or none, ends the
        watch; turning Follow off keeps what is shown."""
        wanted = self._seen()
        follow = self.panel.follow.isChecked()
        if wanted != self.shown:
            self._end()
            if wanted is not None:
                self.panel.set_text("")
                self._watch(wanted, follow)
            self.shown = wanted
        elif wanted is not None and follow and self._unwatch is None:
            self._watch(wanted, follow=True)
        elif not follow:
            self._end()

    def _watch(self, wanted: tuple[str, str], follow: bool) -> None:
        deploy = self.context.deploy
        if deploy is None:
            return
        try:
            unwatch = deploy.watch_log(*wanted, LOG_LINES, follow=follow)
        except (KeyError, InputError) as exc:  # not (or no longer) a part the registry knows
            log.debug("no log to watch for %s: %s", wanted, exc)
            return
        self._unwatch = unwatch if follow else None

    def _end(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None

    def _lines(self, event: DeploymentLogLines) -> None:
        if (event.deployment_id, event.command) != self.shown:
            return
        if event.reset:
            self.panel.set_text(event.text)
        else:
            self.panel.append_text(event.text)
