"""The fleet view's key: the colour scale with its unit, end values and thresholds (a threshold scale's bands
sit side by side, each threshold written at its edge), and what "no data", "stale / disconnected" and
"selected" look like, drawn the way the canvas draws them."""

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
        self.edges: list[tuple[float, str]] = []  # (where on the bar 0..1, the threshold's text)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumHeight(self.fontMetrics().height() * 3 + 8)  # the bar, the thresholds, the note

    def set_scale(
        self,
        title: str,
        low_text: str,
        high_text: str,
        note: str = "",
        colors: Sequence[QColor] | None = None,
        edges: Sequence[tuple[float, str]] = (),
    ) -> None:
        """The scale shown: its title, end values, note, colours (None: keep them) and threshold edges."""
        recolored = colors is not None and colors is not self.colors
        if recolored and colors is not None:
            self.colors = list(colors) if not isinstance(colors, list) else colors
        state = (title, low_text, high_text, note, list(edges))
        if recolored or state != (self.title, self.low_text, self.high_text, self.note, self.edges):
            self.title, self.low_text, self.high_text, self.note, self.edges = state
            marks = ", ".join(text for _, text in self.edges)
            self.setToolTip(
                f"{title}: {low_text} … {high_text}"
                + (f"; thresholds at {marks}" if marks else "")
                + (f" ({note})" if note else "")
            )
            self.update()

    def sizeHint(self) -> QSize:
        return QSize(900, self.fontMetrics().height() * 3 + 8)

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
        for at, mark in self.edges:  # each threshold: a tick on the bar, its value under it
            tick = int(x + at * BAR_WIDTH)
            painter.setPen(QPen(palette.color(QPalette.ColorRole.Base), 1))
            painter.drawLine(tick, 3, tick, line)
            painter.setPen(text)
            painter.drawText(tick - metrics.horizontalAdvance(mark) // 2, line + metrics.ascent() + 3, mark)
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
        if self.note:  # under the threshold values when there are some
            lines = 2 if self.edges else 1
            painter.drawText(4, lines * line + metrics.ascent() + 4, self.note)
        painter.end()
