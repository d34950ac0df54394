"""One time-series chart: many curves over a shared time axis, a cursor readout with units.

Kept cheap for the dashboard's refresh of up to 64 GPUs: all curves live in a `MultiCurveItem`
(peak downsampling to the view width and clip-to-view, batched per host), no antialiasing. The
part of the curves that no longer changes is cached as a pixmap (Qt's device-coordinate cache);
each refresh draws only the newest few points until the view moves or the tail grows long.
Transmit / receive pairs are drawn mirrored (RX below zero) on one chart; the axis and the
readout show magnitudes.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QPen
from PySide6.QtWidgets import QGraphicsItem, QLabel, QSizePolicy, QVBoxLayout, QWidget

from meshdeck.core.samples import Device, SeriesKey
from meshdeck.core.text import printable
from meshdeck.ui import theme
from meshdeck.ui.charts.band import Band, BandItem
from meshdeck.ui.charts.multi_curve import CurveBatch, MultiCurveItem, y_bounds
from meshdeck.ui.charts.units import Unit, nice_ceiling

TAIL_POINTS = 64  # newest points per curve redrawn each refresh before the cached part is redone

# (host, [(device, metric), ...]) -> (times (n,), raw values (k, n))
DataSource = Callable[[str, list[SeriesKey]], tuple[np.ndarray, np.ndarray]]  # (host, series) -> (x, y)
CurveKey = tuple[str, Device, str]  # (host, device, metric)


@dataclass(frozen=True)
class CurveSpec:
    """One curve: `key` is (host, device, metric) of its series; `label` names it in the readout."""

    key: CurveKey
    label: str
    color: str
    mirrored: bool = False  # receive direction: drawn below zero
    dashed: bool = False


class MagnitudeAxis(pg.AxisItem):
    """A y axis that writes |value|, for charts with transmit above and receive below zero."""

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        return [text.lstrip("-−") for text in super().tickStrings(values, scale, spacing)]


class TimeChart(QWidget):
    """A titled chart of curves against wall-clock time, with a readout line under it."""

    def __init__(self, title: str, unit: Unit, mirrored: bool = False, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = title
        self.unit = unit
        self.mirrored = mirrored
        axis_items = {"bottom": pg.DateAxisItem(orientation="bottom")}
        if mirrored:
            axis_items["left"] = MagnitudeAxis(orientation="left")
        self.plot_widget = pg.PlotWidget(axisItems=axis_items)
        self.plot_widget.setMinimumHeight(160)
        self.plot_widget.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.plot_widget.setAccessibleName(title)
        item = self.plot_item
        item.showGrid(x=True, y=True, alpha=1.0)  # opaque, pre-blended colour: see apply_palette
        item.hideButtons()
        item.setMenuEnabled(False)
        item.getViewBox().setMouseEnabled(x=False, y=False)
        item.disableAutoRange()  # ranges are set from the data in update_data: see _fit_y
        self._interactive = False
        self._y_range: tuple[float, float] | None = None
        direction = "↑ TX  ↓ RX" if mirrored else None
        if unit.si_prefix:  # pyqtgraph writes e.g. "(GB/s)" and scales the tick labels to match
            item.setLabel("left", direction, units=unit.axis_label)
        else:
            item.setLabel("left", f"{unit.axis_label}  ({direction})" if mirrored else unit.axis_label)
            item.getAxis("left").enableAutoSIPrefix(False)
        for name in ("left", "bottom"):  # grid lines at major ticks only
            item.getAxis(name).setStyle(maxTickLevel=0 if name == "left" else 1)
        self._y_floor_raw = 0.0
        self._title_text = title
        self._specs: list[CurveSpec] = []
        self._pen_keys: dict[tuple[str, bool], int] = {}
        self._batch_specs: list[list[CurveSpec]] = []
        # Curves up to `_settled_until` are drawn once and cached as a pixmap; only the newest
        # points (the tail) are redrawn on each refresh. See update_data.
        self._settled = MultiCurveItem()
        self._settled.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self._tail = MultiCurveItem()
        self._bands = BandItem()  # min–max of a group of series (fleet-scale charts), under the curves
        self._bands.setZValue(-1)
        item.addItem(self._bands)
        item.addItem(self._settled)
        item.addItem(self._tail)
        self._legend_entries: list[tuple[str, str, bool]] = []
        self._batches: list[CurveBatch] = []
        self._settled_until = math.nan
        self._settled_range: tuple[float, float] | None = None
        self._reference_lines: list[pg.InfiniteLine] = []
        self._cursor = pg.InfiniteLine(angle=90, movable=False)
        self._cursor.setVisible(False)
        item.addItem(self._cursor, ignoreBounds=True)
        self.readout = QLabel(" ", self)
        self.readout.setObjectName("chartReadout")
        self.readout.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.plot_widget)
        layout.addWidget(self.readout)
        self.legend = QLabel(self)
        self.legend.setObjectName("chartLegend")
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setWordWrap(True)
        self.legend.setVisible(False)
        layout.addWidget(self.legend)
        self._mouse_proxy = pg.SignalProxy(self.plot_widget.scene().sigMouseMoved, rateLimit=30, slot=self._on_mouse)
        self.set_title_suffix("")
        self.apply_palette()

    @property
    def plot_item(self) -> pg.PlotItem:
        return self.plot_widget.getPlotItem()

    # ------------------------------------------------------------------ curves

    def set_title_suffix(self, suffix: str) -> None:
        self.plot_item.setTitle(f"{self._title_text}{suffix}", size="10pt")

    def set_curves(self, specs: Sequence[CurveSpec]) -> None:
        """Show exactly these curves; their data comes with the next `update_data`."""
        specs = list(specs)
        if specs == self._specs:
            return
        self._specs = specs
        self._pen_keys = {}
        pens: dict[int, QPen] = {}
        for spec in specs:
            style = (spec.color, spec.dashed)
            if style not in self._pen_keys:
                key = len(self._pen_keys)
                self._pen_keys[style] = key
                pen = pg.mkPen(QColor(spec.color), width=1)
                if spec.dashed:
                    pen.setStyle(Qt.PenStyle.DashLine)
                pens[key] = pen
        for curves in (self._settled, self._tail):
            curves.set_pens(pens)
            curves.set_batches([])
        self._batches, self._batch_specs = [], []
        self._settled_until = math.nan

    @property
    def curve_specs(self) -> list[CurveSpec]:
        return list(self._specs)

    def curve_data(self, key: CurveKey) -> tuple[np.ndarray, np.ndarray]:
        """One curve's data as last set, in axis units (scaled, RX negative)."""
        for batch, specs in zip(self._batches, self._batch_specs, strict=True):
            for row, spec in enumerate(specs):
                if spec.key == key:
                    return batch.x, batch.ys[row]
        raise KeyError(key)

    def update_data(self, source: DataSource, x_start: float, x_end: float) -> int:
        """Pull every host's (times, raw values) from `source`, scale to axis units, set the x range.

        Returns the number of points handed to the chart (before downsampling and clipping)."""
        by_host: dict[str, list[CurveSpec]] = {}
        for spec in self._specs:
            by_host.setdefault(spec.key[0], []).append(spec)
        batches, batch_specs, points = [], [], 0
        for host, specs in by_host.items():
            x, raw = source(host, [(spec.key[1], spec.key[2]) for spec in specs])
            factors = np.array([-self.unit.scale if s.mirrored else self.unit.scale for s in specs], dtype=raw.dtype)
            ys = raw * factors[:, None]
            pen_keys = tuple(self._pen_keys[(s.color, s.dashed)] for s in specs)
            # x is a view into a ring that keeps being written: copy it, the settled part is kept.
            batches.append(CurveBatch(x.copy(), ys, pen_keys))
            batch_specs.append(specs)
            points += ys.size
        self._batches = batches
        self._batch_specs = batch_specs
        self._split_settled_and_tail((x_start, x_end))
        if not self._interactive and math.isfinite(x_start) and math.isfinite(x_end) and x_end > x_start:
            if self.plot_item.getViewBox().viewRange()[0] != [x_start, x_end]:
                self.plot_item.setXRange(x_start, x_end, padding=0)
            self._fit_y(x_start, x_end)
        return points

    def _split_settled_and_tail(self, x_range: tuple[float, float]) -> None:
        """Hand all data to the cached `settled` item when the view moved or the tail grew long;
        otherwise only the points after `_settled_until` (plus the one before, to join) to `tail`."""
        latest = max((float(b.x[-1]) for b in self._batches if b.x.size), default=math.nan)
        tail_points = max(
            (b.x.size - int(np.searchsorted(b.x, self._settled_until, side="right")) for b in self._batches),
            default=0,
        )
        if self._settled_range != x_range or not (self._settled_until <= latest) or tail_points > TAIL_POINTS:
            self._settled.set_batches(self._batches)
            self._tail.set_batches([])
            self._settled_until = latest
            self._settled_range = x_range
            return
        tail = []
        for batch in self._batches:
            first = max(int(np.searchsorted(batch.x, self._settled_until, side="left")) - 1, 0)
            tail.append(CurveBatch(batch.x[first:], batch.ys[:, first:], batch.pen_keys))
        self._tail.set_batches(tail)

    def set_bands(self, bands: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, str, bool]]) -> None:
        """Min–max bands (x, low, high in raw units, colour, mirrored) drawn under the curves."""
        scaled = []
        for x, low, high, color, mirrored in bands:
            factor = -self.unit.scale if mirrored else self.unit.scale
            a, b = low * factor, high * factor
            scaled.append(Band(x, np.fmin(a, b), np.fmax(a, b), color))
        self._bands.set_bands(scaled)

    @property
    def bands(self) -> list[Band]:
        return self._bands.bands

    def set_legend(self, entries: Sequence[tuple[str, str, bool]]) -> None:
        """A legend of (label, colour, dashed) under the chart, where it hides no data; empty: none (the
        readout names the curve under the cursor)."""
        entries = list(entries)
        if entries == self._legend_entries:
            return
        self._legend_entries = entries
        parts = [
            f'<span style="color:{html.escape(color)}">{"┅" if dashed else "■"}</span>&nbsp;{html.escape(printable(label, 120))}'
            for label, color, dashed in entries
        ]
        self.legend.setText(" &nbsp; ".join(parts))
        self.legend.setVisible(bool(entries))

    @property
    def legend_labels(self) -> list[str]:
        return [label for label, _, _ in self._legend_entries]

    def _fit_y(self, x_start: float, x_end: float) -> None:
        """Zero-based y range rounded up to a nice number, symmetric when RX is mirrored below zero.

        Zero-based so a chart never exaggerates a small change; rounded so the range (and the
        axis, which pyqtgraph then redraws) changes only when the data crosses a step."""
        found = [b for b in (y_bounds(self._batches, x_start, x_end), self._bands.y_bounds(x_start, x_end)) if b]
        low, high = (min(b[0] for b in found), max(b[1] for b in found)) if found else (0.0, 0.0)
        high = max([high, *(line.value() for line in self._reference_lines)])
        magnitude = max(abs(low), abs(high))
        floor = max(self.unit.axis_floor, self._y_floor_raw * self.unit.scale)
        top = nice_ceiling(magnitude * 1.04) if magnitude > floor else floor  # 100 % stays 100 %
        wanted = (-top if self.mirrored or low < 0 else 0.0, top)
        if wanted != self._y_range:
            self._y_range = wanted
            self.plot_item.setYRange(*wanted, padding=0)

    def set_reference_lines(self, lines: Sequence[tuple[float, str]]) -> None:
        """Horizontal dashed lines at raw values (e.g. the plan's per-GPU memory), labelled."""
        for line in self._reference_lines:
            self.plot_item.removeItem(line)
        self._reference_lines = []
        pen = pg.mkPen(theme.chart_foreground(), width=1, style=Qt.PenStyle.DashLine)
        for raw, label in lines:
            line = pg.InfiniteLine(
                pos=raw * self.unit.scale,
                angle=0,
                pen=pen,
                movable=False,
                label=label,
                labelOpts={"position": 0.02, "color": theme.chart_foreground(), "anchors": [(0, 0), (0, 0)]},
            )
            self.plot_item.addItem(line)
            self._reference_lines.append(line)

    @property
    def reference_values(self) -> list[float]:
        """Reference lines in raw units (what was passed to set_reference_lines)."""
        return [line.value() / self.unit.scale for line in self._reference_lines]

    def set_y_floor(self, raw: float) -> None:
        """The y axis reaches at least `raw` (wire units), e.g. the GPUs' total memory on the VRAM chart."""
        if raw != self._y_floor_raw:
            self._y_floor_raw = raw
            self._y_range = None

    def set_interactive(self, enabled: bool) -> None:
        """Pan and zoom with the mouse (while paused); live charts follow the newest data instead."""
        self._interactive = enabled
        self.plot_item.getViewBox().setMouseEnabled(x=enabled, y=enabled)
        if not enabled:
            self._y_range = None  # re-fit on the next update

    # ------------------------------------------------------------------ cursor readout

    def readout_at(self, x: float, y: float) -> str:
        """The curve nearest to (x, y) in the view, with its value at x and its unit."""
        best: tuple[float, CurveSpec, float, float] | None = None
        for batch, specs in zip(self._batches, self._batch_specs, strict=True):
            if batch.x.size == 0:
                continue
            index = int(np.clip(np.searchsorted(batch.x, x), 0, batch.x.size - 1))
            if index > 0 and abs(batch.x[index - 1] - x) < abs(batch.x[index] - x):
                index -= 1
            column = batch.ys[:, index].astype(np.float64)
            distance = np.abs(column - y)
            if not np.isfinite(distance).any():
                continue
            row = int(np.nanargmin(np.where(np.isfinite(distance), distance, np.inf)))
            if best is None or distance[row] < best[0]:
                best = (float(distance[row]), specs[row], float(batch.x[index]), float(column[row]))
        if best is None:
            return " "
        _, spec, at, value = best
        raw = value / (-self.unit.scale if spec.mirrored else self.unit.scale)
        direction = " RX" if spec.mirrored else (" TX" if self.mirrored else "")
        try:
            when = datetime.fromtimestamp(at).strftime("%H:%M:%S")
        except (OverflowError, OSError, ValueError):  # a stored time no calendar can show (history of old rows)
            when = f"out of range (ts {at:g})"
        return f"{when}  {spec.label}{direction}: {self.unit.format(raw)}"

    def _on_mouse(self, event: tuple[QPointF]) -> None:
        position = event[0]
        view = self.plot_item.getViewBox()
        if not self.plot_item.sceneBoundingRect().contains(position):
            self._cursor.setVisible(False)
            return
        point = view.mapSceneToView(position)
        self._cursor.setPos(point.x())
        self._cursor.setVisible(True)
        self.readout.setText(self.readout_at(point.x(), point.y()))

    # ------------------------------------------------------------------ theme

    def apply_palette(self) -> None:
        background = theme.chart_background()
        foreground = theme.chart_foreground()
        self.plot_widget.setBackground(background)
        # Grid lines in a colour blended here, drawn opaque: translucent grid lines cost ~8x more
        # to paint (measured 12 ms vs 1.5 ms per chart offscreen).
        grid = QColor(
            round(0.85 * background.red() + 0.15 * foreground.red()),
            round(0.85 * background.green() + 0.15 * foreground.green()),
            round(0.85 * background.blue() + 0.15 * foreground.blue()),
        )
        for name in ("left", "bottom"):
            axis = self.plot_item.getAxis(name)
            axis.setPen(foreground)
            axis.setTextPen(foreground)
            axis.setStyle(tickAlpha=255)
            axis.setTickPen(pg.mkPen(grid))
        self.plot_item.titleLabel.setText(self.plot_item.titleLabel.text, color=foreground)
        cursor_pen = QPen(foreground)
        cursor_pen.setStyle(Qt.PenStyle.DotLine)
        cursor_pen.setCosmetic(True)
        self._cursor.setPen(cursor_pen)
