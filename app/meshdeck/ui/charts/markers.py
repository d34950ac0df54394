"""Vertical markers on a time chart: events at a time, as Grafana's annotations (a deployment started or ended).

Each marker is a dashed line in its colour with its label near the top, on the side of the line where the
plot has room: left of a line in the right half of the range (the newest events, on a live chart), right of
one in the left half. Labels of markers close in time are stacked at `LABEL_LEVELS` heights so that they do
not write over each other (a deployment launched, failed and launched again within a minute).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from meshdeck.core.text import printable
from meshdeck.services.deployment_marks import DeploymentMark
from meshdeck.ui import theme

LABEL_LEVELS = (0.97, 0.85, 0.73, 0.61)  # where along the line (bottom 0, top 1) the labels go, in turn
NAME_SHOWN = 28  # characters of a deployment's name on its marker


@dataclass(frozen=True)
class Marker:
    """A vertical line at `ts` (Unix seconds) named `label` (plain text, already escaped), in `color`."""

    ts: float
    label: str
    color: str


def deployment_marker(mark: DeploymentMark) -> Marker:
    """A deployment's start ("▶ name", green) or end ("■ name stopped", its final state's colour)."""
    name = printable(mark.name, NAME_SHOWN)
    if mark.event == "started":
        return Marker(mark.ts, f"▶ {name}", theme.STATE_COLORS["running"])
    color = theme.STATE_COLORS.get(mark.state, theme.STATE_COLORS["stopped"])
    return Marker(mark.ts, f"■ {name} {mark.state}", color)


class MarkerLines:
    """The markers of one plot: replaced when they change, their labels placed when the range moves."""

    def __init__(self, plot_item: pg.PlotItem) -> None:
        self.plot_item = plot_item
        self.markers: list[Marker] = []
        self._lines: list[pg.InfiniteLine] = []

    def set(self, markers: Sequence[Marker], x_range: tuple[float, float] | None) -> None:
        """Show exactly these markers (nothing done when they are those shown)."""
        markers = sorted(markers, key=lambda marker: marker.ts)
        if markers == self.markers:
            return
        for line in self._lines:
            self.plot_item.removeItem(line)
        self.markers, self._lines = markers, []
        for index, marker in enumerate(self.markers):
            line = pg.InfiniteLine(
                pos=marker.ts,
                angle=90,
                pen=pg.mkPen(QColor(marker.color), width=1, style=Qt.PenStyle.DashLine),
                movable=False,
                label=marker.label,
                labelOpts={
                    "position": LABEL_LEVELS[index % len(LABEL_LEVELS)],
                    "color": marker.color,
                    "anchors": [(0, 0), (0, 0)],
                },
            )
            self.plot_item.addItem(line, ignoreBounds=True)
            self._lines.append(line)
        self.place_labels(x_range)

    def place_labels(self, x_range: tuple[float, float] | None) -> None:
        if x_range is None:
            return
        middle = (x_range[0] + x_range[1]) / 2
        for marker, line in zip(self.markers, self._lines, strict=True):
            anchors = [(1, 0), (1, 0)] if marker.ts > middle else [(0, 0), (0, 0)]
            if line.label.anchors != anchors:
                line.label.anchors = anchors
                line.label.updatePosition()
