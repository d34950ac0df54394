"""A one-line label that fits the room it gets: cut with "…" when narrower than its text, the whole text
in its tooltip. A plain QLabel asks for its full text width as its minimum, so in a status bar beside
other widgets a long message (a list of failed hosts, a job's step) pushed its neighbours over each other."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent, QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QStyleOption, QWidget

MINIMUM_CHARACTERS = 12  # the least it shrinks to: enough to see what the message is about


class ElidedLabel(QLabel):
    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)  # down to minimumSizeHint
        self.setText(text)

    def setText(self, text: str) -> None:
        super().setText(text)
        self._update_tooltip()

    def minimumSizeHint(self) -> QSize:
        metrics = self.fontMetrics()
        width = min(metrics.horizontalAdvance(self.text()), metrics.averageCharWidth() * MINIMUM_CHARACTERS)
        return QSize(width, super().minimumSizeHint().height())

    def is_elided(self) -> bool:
        return self.fontMetrics().horizontalAdvance(self.text()) > self.contentsRect().width()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._update_tooltip()

    def _update_tooltip(self) -> None:
        self.setToolTip(self.text() if self.is_elided() else "")

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        option = QStyleOption()
        option.initFrom(self)
        rect = self.contentsRect()
        shown = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, rect.width())
        self.style().drawItemText(
            painter,
            rect,
            int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
            option.palette,
            self.isEnabled(),
            shown,
            self.foregroundRole(),
        )
        painter.end()
