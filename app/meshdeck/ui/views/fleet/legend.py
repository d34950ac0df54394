"""The fleet view's key: the colour scale with its unit and end values, and what "no data", "stale /
disconnected" and "selected" look like, drawn the way the canvas draws them."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from meshdeck.ui.views.fleet.canvas import STALE_COLOR

BAR_WIDTH = 220
SWATCH = 12


class FleetLegend(QWidget):
    def __init__(self, colors: Sequence[QColor], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("fleetLegend")
        self.colors = list(colors)
        self.title = ""
        self.low_text = ""
        self.high_text = ""
        self.note = ""
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumHeight(self.fontMetrics().height() * 2 + 8)

    def set_scale(self, title: str, low_text: str, high_text: str, note: str = "") -> None:
        if (title, low_text, high_text, note) != (self.title, self.low_text, self.high_text, self.note):
            self.title, self.low_text, self.high_text, self.note = title, low_text, high_text, note
            self.setToolTip(f"{title}: {low_text} … {high_text}" + (f" ({note})" if note else ""))
            self.update()

    def sizeHint(self) -> QSize:
        return QSize(900, self.fontMetrics().height() * 2 + 8)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        palette = self.palette()
        text = palette.color(QPalette.ColorRole.Text)
        metrics = painter.fontMetrics()
        line = metrics.height()
        painter.setPen(text)
        x = 4
        painter.drawText(x, metrics.ascent() + 2, self.title)
        x += metrics.horizontalAdvance(self.title) + 10
        painter.drawText(x, metrics.ascent() + 2, self.low_text)
        x += metrics.horizontalAdvance(self.low_text) + 6
        step = BAR_WIDTH / len(self.colors)
        painter.setPen(Qt.PenStyle.NoPen)
        for i, colour in enumerate(self.colors):
            painter.fillRect(QRect(int(x + i * step), 3, int(step) + 1, line - 2), colour)
        x += BAR_WIDTH + 6
        painter.setPen(text)
        painter.drawText(x, metrics.ascent() + 2, self.high_text)
        x += metrics.horizontalAdvance(self.high_text) + 24
        y = 3
        # no data: a dotted outline, as on the canvas
        painter.setPen(QPen(palette.color(QPalette.ColorRole.Mid), 1, Qt.PenStyle.DotLine))
        painter.drawRect(x, y, SWATCH - 1, SWATCH - 1)
        painter.setPen(text)
        painter.drawText(x + SWATCH + 4, metrics.ascent() + 2, "no data")
        x += SWATCH + 4 + metrics.horizontalAdvance("no data") + 18
        warn = QColor(STALE_COLOR)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QBrush(text, Qt.BrushStyle.BDiagPattern))
        painter.drawRect(x, y, SWATCH, SWATCH)
        painter.setPen(QPen(warn, 1, Qt.PenStyle.DashLine))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawRect(x, y, SWATCH, SWATCH)
        painter.setPen(warn)
        stale = "stale / disconnected (last values)"
        painter.drawText(x + SWATCH + 4, metrics.ascent() + 2, stale)
        x += SWATCH + 4 + metrics.horizontalAdvance(stale) + 18
        painter.setPen(QPen(palette.color(QPalette.ColorRole.Highlight), 2))
        painter.drawRect(x + 1, y + 1, SWATCH - 2, SWATCH - 2)
        painter.setPen(text)
        painter.drawText(x + SWATCH + 4, metrics.ascent() + 2, "selected (filters Dashboard)")
        if self.note:
            painter.drawText(4, line + metrics.ascent() + 4, self.note)
        painter.end()
