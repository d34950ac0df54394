"""The console window: a navigation list of views, the current view, and a status bar.

Keyboard: Ctrl+1..9 opens a view, Ctrl+PgDown / Ctrl+PgUp steps through them, the list itself
follows the arrow keys; the menu bar (ui/menus.py) holds them with Quit (Ctrl+Q) and the shortcuts
help (? or F1). Closing asks first while deployments run (ui/quitting.py). Window geometry, splitter
and the last view are kept in QSettings. The status bar shows how many hosts are connected, says
"SIMULATED" when any host is a simulated agent, and carries the running jobs with a Cancel button.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from PySide6.QtCore import QByteArray, Qt, QTimer
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QProgressBar,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QStyle,
    QWidget,
)

from meshdeck import __version__
from meshdeck.core.plural import counted
from meshdeck.services.writer_claim import history_status
from meshdeck.ui.context import ConsoleContext
from meshdeck.ui.jobs import Job
from meshdeck.ui.menus import build_menu_bar
from meshdeck.ui.quitting import close_dialogs, confirm_quit
from meshdeck.ui.widgets.elided_label import ElidedLabel

View = TypeVar("View", bound=QWidget)
HISTORY_STATUS_MS = 5000  # how often the status bar looks at who records the history


@dataclass(frozen=True)
class ViewEntry:
    key: str  # stable: settings, screenshots (`<key>.png`), tests
    title: str
    widget: QWidget


class JobsIndicator(QWidget):
    """The newest running job: its message, a progress bar and Cancel."""

    def __init__(self, context: ConsoleContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._jobs: list[Job] = []
        self.label = ElidedLabel()  # a long job name or step is cut, not pushed over its neighbours
        self.bar = QProgressBar()
        self.bar.setMaximumWidth(160)
        self.bar.setTextVisible(False)
        self.cancel = QPushButton("Cancel")
        self.cancel.setObjectName("cancelJob")
        self.cancel.clicked.connect(self._cancel)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.label)
        layout.addWidget(self.bar)
        layout.addWidget(self.cancel)
        context.jobs.job_started.connect(self._started)
        context.jobs.job_ended.connect(self._ended)
        self._refresh()

    def _started(self, job: Job) -> None:
        self._jobs.append(job)
        job.progressed.connect(lambda fraction, message, job=job: self._progress(job, fraction, message))
        self.label.setText(job.name)
        self.bar.setRange(0, 0)
        self._refresh()

    def _progress(self, job: Job, fraction: float, message: str) -> None:
        if self._jobs and self._jobs[-1] is job:
            self.label.setText(f"{job.name}: {message}" if message else job.name)
            if fraction < 0:
                self.bar.setRange(0, 0)
            else:
                self.bar.setRange(0, 100)
                self.bar.setValue(round(100 * fraction))

    def _ended(self, job: Job) -> None:
        if job in self._jobs:
            self._jobs.remove(job)
        if self._jobs:
            self.label.setText(self._jobs[-1].name)
        self._refresh()

    def _cancel(self) -> None:
        if self._jobs:
            self._jobs[-1].cancel()
            self.label.setText(f"{self._jobs[-1].name}: cancelling…")

    def _refresh(self) -> None:
        self.setVisible(bool(self._jobs))


class MainWindow(QMainWindow):
    def __init__(self, context: ConsoleContext, views: Sequence[ViewEntry], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.context = context
        self.views = list(views)
        self.setObjectName("mainWindow")
        self.setWindowTitle("meshdeck" + (" — demo cluster (simulated)" if context.simulated else ""))
        self.navigation = QListWidget()
        self.navigation.setObjectName("navigation")
        self.navigation.setAccessibleName("Views")
        self.navigation.setMaximumWidth(200)
        self.stack = QStackedWidget()
        for index, entry in enumerate(self.views):
            item = QListWidgetItem(entry.title)
            item.setData(Qt.ItemDataRole.UserRole, entry.key)
            if index < 9:
                item.setToolTip(f"Ctrl+{index + 1}")  # the View menu's shortcut
            self.navigation.addItem(item)
            entry.widget.setObjectName(entry.widget.objectName() or f"{entry.key}View")
            self.stack.addWidget(entry.widget)
        self._fit_navigation()
        self.navigation.currentRowChanged.connect(self.stack.setCurrentIndex)
        self.splitter = QSplitter()
        self.splitter.addWidget(self.navigation)
        self.splitter.addWidget(self.stack)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setCollapsible(0, False)  # the views' list keeps the width of its titles
        self.setCentralWidget(self.splitter)

        self.hosts_summary = ElidedLabel()  # "failed: …" can name hundreds of hosts: cut, whole in the tooltip
        self.hosts_summary.setObjectName("hostsSummary")
        self.simulated_badge = QLabel("SIMULATED")
        self.simulated_badge.setObjectName("simulatedBadge")
        self.simulated_badge.setToolTip("At least one host is a simulated agent (meshdeck-agent --simulate)")
        self.jobs_indicator = JobsIndicator(context)
        status = self.statusBar()
        status.addWidget(self.hosts_summary, 1)
        status.addPermanentWidget(self.jobs_indicator)
        status.addPermanentWidget(self.simulated_badge)
        self.history_status = QLabel()  # who stores the samples: this console, `meshdeck record`, or nobody
        self.history_status.setObjectName("historyStatus")
        status.addPermanentWidget(self.history_status)
        self._history_timer = QTimer(self)
        self._history_timer.timeout.connect(self.update_history_status)
        self._history_timer.start(HISTORY_STATUS_MS)
        self.update_history_status()
        status.addPermanentWidget(QLabel(f"meshdeck {__version__}"))
        assert context.hosts is not None
        context.hosts.changed.connect(self._update_summary)
        self._update_summary()
        self.quitting = False  # set once the window is on its way out: no more questions
        build_menu_bar(self)
        self._restore()

    # ------------------------------------------------------------------ navigation

    def _fit_navigation(self) -> None:
        """The views' list is never narrower than its longest title (at 1280 px the splitter squeezed it
        to "Topolog"), nor needlessly wide."""
        nav = self.navigation
        width = (
            nav.sizeHintForColumn(0)
            + 2 * nav.frameWidth()
            + nav.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent)
        )
        nav.setMinimumWidth(width)
        nav.setMaximumWidth(max(200, width))

    def fit_to_screen(self, width: int, height: int) -> None:
        """`width` × `height`, or the screen's available size where that is smaller (a 1280 × 800 laptop)."""
        screen = self.screen()
        if screen is not None:
            available = screen.availableGeometry()
            width, height = min(width, available.width()), min(height, available.height())
        self.resize(width, height)

    def view_keys(self) -> list[str]:
        return [entry.key for entry in self.views]

    def view_of(self, kind: type[View]) -> View:
        """The view of class `kind` (each view class is in the window once), typed as that class."""
        for entry in self.views:
            if isinstance(entry.widget, kind):
                return entry.widget
        raise LookupError(f"no {kind.__name__} in this window")

    def show_view(self, key: str) -> QWidget:
        index = self.view_keys().index(key)
        self.show_view_at(index)
        return self.views[index].widget

    def show_view_at(self, index: int) -> None:
        if 0 <= index < len(self.views):
            self.navigation.setCurrentRow(index)

    def current_view_key(self) -> str:
        return self.views[self.stack.currentIndex()].key

    def step_view(self, delta: int) -> None:
        self.show_view_at((self.stack.currentIndex() + delta) % len(self.views))

    # ------------------------------------------------------------------ status

    def update_history_status(self) -> None:
        db = self.context.db
        self.history_status.setVisible(db is not None)
        if db is not None:
            state = history_status(db.path)  # two lock-file probes: no database read
            self.history_status.setText(state.text())
            self.history_status.setToolTip(state.detail())

    def _update_summary(self, _host: str = "") -> None:
        assert self.context.hosts is not None
        hosts = self.context.hosts.hosts
        connected = sum(1 for h in hosts.values() if h.state in ("connected", "degraded"))
        failed = [h.name for h in hosts.values() if h.state == "failed"]
        text = f"{connected} of {counted(len(hosts), 'host')} connected" if hosts else "no hosts yet: add one in Hosts"
        if failed:
            text += f"; failed: {', '.join(failed)}"
        self.hosts_summary.setText(text)
        self.simulated_badge.setVisible(self.context.simulated or any(h.simulated for h in hosts.values()))

    # ------------------------------------------------------------------ settings

    def _restore(self) -> None:
        settings = self.context.settings
        geometry = settings.value("window/geometry")
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.restoreGeometry(geometry)
        else:
            self.fit_to_screen(1500, 950)
        splitter = settings.value("window/splitter")
        if isinstance(splitter, QByteArray) and not splitter.isEmpty():
            self.splitter.restoreState(splitter)
        else:
            self.splitter.setSizes([170, 1330])
        for entry in self.views:
            restore = getattr(entry.widget, "restore_settings", None)
            if callable(restore):
                restore(settings)
        last = settings.value("window/view", "")
        self.show_view_at(self.view_keys().index(last) if last in self.view_keys() else 0)

    def save_settings(self) -> None:
        settings = self.context.settings
        settings.setValue("window/geometry", self.saveGeometry())
        settings.setValue("window/splitter", self.splitter.saveState())
        settings.setValue("window/view", self.current_view_key())
        for entry in self.views:
            save = getattr(entry.widget, "save_settings", None)
            if callable(save):
                save(settings)
        settings.sync()

    # ------------------------------------------------------------------ quitting

    def request_quit(self) -> None:
        """File > Quit (Ctrl+Q): quit, asking first while deployments run."""
        if confirm_quit(self):
            self.quit_now()

    def quit_now(self) -> None:
        """Close without a question (a signal, --quit-after, an answered question)."""
        self.quitting = True
        close_dialogs(self)
        self.close()

    def closeEvent(self, event: QCloseEvent) -> None:
        # The window's close button asks like Quit; a close() from code (tests, --quit-after) does not.
        if event.spontaneous() and not self.quitting and not confirm_quit(self):
            event.ignore()
            return
        self.quitting = True
        self.save_settings()
        super().closeEvent(event)
