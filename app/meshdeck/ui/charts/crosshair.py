"""A crosshair shared by the charts of one view, as Grafana's shared crosshair: the pointer over one chart puts
a vertical line at the same time on every chart of the group, each chart's readout says that time and a value,
and each legend's "last" column shows every curve's value at it. Leaving the chart clears them all.

The chart under the pointer names the curve nearest to it; the others name their highest curve at that time.
"""

from __future__ import annotations

from typing import Protocol


class Crosshaired(Protocol):
    """What a chart of a group does: show the shared time (`y` only on the chart under the pointer)."""

    def show_cursor(self, x: float, y: float | None) -> None: ...

    def hide_cursor(self) -> None: ...


class CrosshairGroup:
    """The charts that share one crosshair (a chart alone is a group of one)."""

    def __init__(self) -> None:
        self.charts: list[Crosshaired] = []
        self.time: float | None = None  # where the crosshair is, None: nowhere

    def add(self, chart: Crosshaired) -> None:
        if chart not in self.charts:
            self.charts.append(chart)

    def moved(self, source: Crosshaired, x: float, y: float) -> None:
        self.time = x
        for chart in self.charts:
            chart.show_cursor(x, y if chart is source else None)

    def left(self) -> None:
        if self.time is None:
            return
        self.time = None
        for chart in self.charts:
            chart.hide_cursor()
