"""The throughput–interactivity chart: output tokens/s per GPU against tokens/s per user, one point per layout.

The chart InferenceMAX and aiconfigurator draw: up and right is better, and the Pareto front (no point beats
another on both axes) is the line an operator chooses along. Aggregated layouts and prefill/decode-
disaggregated plans are marked apart (circle / triangle); a layout whose speed is the roofline's is drawn
hollow, so a measured point and an estimated one never look alike. A TPOT target is a vertical line at
1000 / TPOT tokens/s per user (points left of it miss). Hovering a point names it; clicking one emits its key.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt, Signal
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from meshdeck.core.serving import ServingEstimate, pareto_front
from meshdeck.core.text import printable
from meshdeck.ui import theme

AGGREGATED_COLOR = theme.SERIES_COLORS[0]
DISAGGREGATED_COLOR = theme.SERIES_COLORS[1]
FRONT_COLOR = theme.SERIES_COLORS[2]
SLA_COLOR = theme.SERIES_COLORS[5]
HOVER_RADIUS_PX = 12.0


@dataclass(frozen=True)
class FrontPoint:
    """One layout on the chart: what selecting it selects (`key`), its label and its serving estimate."""

    key: Any
    label: str
    serving: ServingEstimate
    disaggregated: bool = False
    note: str = ""  # said after the numbers when hovered (what an "N×" label means)

    @property
    def x(self) -> float:
        return self.serving.tokens_per_s_per_user

    @property
    def y(self) -> float:
        return self.serving.output_tokens_per_s_per_gpu


class ServingFrontChart(QWidget):
    point_clicked = Signal(object)  # FrontPoint.key

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("servingFront")
        self.points: list[FrontPoint] = []
        self.front: list[FrontPoint] = []
        self.plot = pg.PlotWidget()
        self.plot.setObjectName("servingFrontPlot")
        self.plot.setMenuEnabled(False)
        self.plot.showGrid(x=True, y=True, alpha=0.2)
        self.plot.setLabel("bottom", "tokens/s per user (1000 / TPOT)")
        self.plot.setLabel("left", "output tokens/s per GPU")
        self.legend = self.plot.addLegend(offset=(-10, 10))
        self.scatter: list[pg.ScatterPlotItem] = []
        self.front_curve = pg.PlotDataItem(pen=pg.mkPen(FRONT_COLOR, width=2), name="Pareto front")
        self.plot.addItem(self.front_curve)
        self.sla_line: pg.InfiniteLine | None = None
        self.selected = pg.ScatterPlotItem(size=18, pen=pg.mkPen(theme.SERIES_COLORS[3], width=2), brush=None)
        self.plot.addItem(self.selected)
        self.readout = QLabel("Plan to see every layout's speed against its interactivity.")
        self.readout.setObjectName("servingFrontReadout")
        self.readout.setTextFormat(Qt.TextFormat.RichText)
        self.readout.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.readout)
        self.plot.scene().sigMouseMoved.connect(self._hover)
        self.plot.scene().sigMouseClicked.connect(self._click)
        self.apply_palette()

    def apply_palette(self) -> None:
        """The system's light or dark palette, as every chart of the console takes it (theme.py)."""
        background, foreground = theme.chart_background(), theme.chart_foreground()
        self.plot.setBackground(background)
        for name in ("left", "bottom"):
            axis = self.plot.getPlotItem().getAxis(name)
            axis.setPen(foreground)
            axis.setTextPen(foreground)
        self.legend.setLabelTextColor(foreground)

    def set_points(self, points: list[FrontPoint], *, tpot_target_ms: float | None = None) -> None:
        """Draw the plan: every point, the front, and the TPOT target (if any)."""
        self.points = [p for p in points if p.x > 0 and p.y > 0]
        for item in self.scatter:
            self.plot.removeItem(item)
        self.scatter.clear()
        self.legend.clear()
        groups = (
            ("aggregated (measured kernels)", False, True, "o", AGGREGATED_COLOR),
            ("aggregated (roofline)", False, False, "o", AGGREGATED_COLOR),
            ("disaggregated (measured kernels)", True, True, "t", DISAGGREGATED_COLOR),
            ("disaggregated (roofline)", True, False, "t", DISAGGREGATED_COLOR),
        )
        for name, disaggregated, measured, symbol, color in groups:
            chosen = [
                p for p in self.points if p.disaggregated == disaggregated and p.serving.source.measured == measured
            ]
            if not chosen:
                continue
            brush = pg.mkBrush(color) if measured else pg.mkBrush(0, 0, 0, 0)  # hollow: an estimate, not measured
            item = pg.ScatterPlotItem(
                x=[p.x for p in chosen],
                y=[p.y for p in chosen],
                symbol=symbol,
                size=10,
                pen=pg.mkPen(color, width=1.5),
                brush=brush,
                name=name,
            )
            self.plot.addItem(item)
            self.scatter.append(item)
        indices = pareto_front([(p.x, p.y) for p in self.points])
        self.front = [self.points[i] for i in indices]
        self.front_curve.setData([p.x for p in self.front], [p.y for p in self.front])
        self.legend.addItem(self.front_curve, "Pareto front")
        if self.sla_line is not None:
            self.plot.removeItem(self.sla_line)
            self.sla_line = None
        if tpot_target_ms:
            self.sla_line = pg.InfiniteLine(
                pos=1000.0 / tpot_target_ms,
                angle=90,
                pen=pg.mkPen(SLA_COLOR, width=1.5, style=Qt.PenStyle.DashLine),
                label=f"TPOT ≤ {tpot_target_ms:g} ms",
                labelOpts={"position": 0.9, "color": SLA_COLOR},
            )
            self.plot.addItem(self.sla_line)
        self.selected.setData([], [])
        self.plot.enableAutoRange()
        self.readout.setText(
            f"{len(self.points)} layouts; {len(self.front)} on the front. Hover a point for its layout; click to select it."
            if self.points
            else "No layout has a serving estimate."
        )

    def select(self, key: Any) -> None:
        """Ring the point of `key` (the table's selection)."""
        chosen = [p for p in self.points if p.key == key]
        self.selected.setData([p.x for p in chosen], [p.y for p in chosen])

    def nearest(self, scene_position: QPointF) -> FrontPoint | None:
        """The point under the mouse (within HOVER_RADIUS_PX), by screen distance."""
        view = self.plot.getPlotItem().vb
        best, best_distance = None, HOVER_RADIUS_PX
        for point in self.points:
            position = view.mapViewToScene(QPointF(point.x, point.y))
            distance = ((position.x() - scene_position.x()) ** 2 + (position.y() - scene_position.y()) ** 2) ** 0.5
            if distance <= best_distance:
                best, best_distance = point, distance
        return best

    def describe(self, point: FrontPoint) -> str:
        s = point.serving
        kind = "disaggregated" if point.disaggregated else "aggregated"
        source = "measured kernels" if s.source.measured else "roofline estimate"
        sla = (
            ""
            if s.sla is None
            else (" · meets the SLA" if s.sla.meets else f" · misses the SLA by {s.sla.worst_miss:.0%}")
        )
        return (
            f"<b>{html.escape(printable(point.label))}</b> ({kind}, {source}): "
            f"{s.output_tokens_per_s_per_gpu:,.0f} tok/s per GPU, {s.tokens_per_s_per_user:,.1f} tok/s per user "
            f"(TPOT {s.tpot_ms:,.1f} ms, TTFT {s.ttft_ms:,.0f} ms) at {s.concurrency:,} in flight{sla}"
            + (f"<br>{html.escape(printable(point.note), quote=False)}" if point.note else "")
        )

    def _hover(self, scene_position: QPointF) -> None:
        point = self.nearest(scene_position)
        if point is not None:
            self.readout.setText(self.describe(point))

    def _click(self, event: Any) -> None:
        point = self.nearest(event.scenePos())
        if point is not None:
            self.select(point.key)
            self.readout.setText(self.describe(point))
            self.point_clicked.emit(point.key)
