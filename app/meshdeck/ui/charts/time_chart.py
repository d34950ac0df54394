"""One time-series chart: many curves over a shared time axis, a cursor readout with units.

Kept cheap for the dashboard's refresh of up to 64 GPUs: all curves live in a `MultiCurveItem`
(peak downsampling to the view width and clip-to-view, batched per host), no antialiasing. The
part of the curves that no longer changes is cached as a pixmap (Qt's device-coordinate cache);
each refresh draws only the newest few points until the view moves or the tail grows long.
Transmit / receive pairs are drawn mirrored (RX below zero) on one chart; the axis and the
readout show magnitudes.

Under the plot, a legend table (legend_table.py) names every curve with its last, minimum and maximum value
over the window (chart_stats.py: from the settled part once and the tail each refresh); a click hides or shows
a curve. The crosshair is shared with the other charts of the view (crosshair.py). Vertical markers show
events (a deployment started or stopped); an overlay says why a chart is empty; the title is cut to fit
with the whole of it in its tooltip; the time axis names its zone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QPointF, Qt
from PySide6.QtGui import QColor, QPen
from PySide6.QtWidgets import QGraphicsItem, QLabel, QSizePolicy, QVBoxLayout, QWidget

from meshdeck.core.samples import Device, SeriesKey
from meshdeck.ui import theme
from meshdeck.ui.charts import chart_stats
from meshdeck.ui.charts.band import Band, BandItem
from meshdeck.ui.charts.chart_parts import clock_text, time_axis_label
from meshdeck.ui.charts.crosshair import CrosshairGroup
from meshdeck.ui.charts.legend_table import LegendRow, LegendTable
from meshdeck.ui.charts.markers import Marker, MarkerLines
from meshdeck.ui.charts.multi_curve import CurveBatch, MultiCurveItem
from meshdeck.ui.charts.units import Unit, nice_ceiling
from meshdeck.ui.widgets.elided_label import ElidedLabel

TAIL_POINTS = 64  # newest points per curve redrawn each refresh before the cached part is redone

# (host, [(device, metric), ...]) -> (times (n,), raw values (k, n))
DataSource = Callable[[str, list[SeriesKey]], tuple[np.ndarray, np.ndarray]]  # (host, series) -> (x, y)
CurveKey = tuple[str, Device, str]  # (host, device, metric)
# A min–max band: x, low, high (raw units), colour, mirrored, and the curve it belongs to (hidden with it).
BandSpec = tuple[np.ndarray, np.ndarray, np.ndarray, str, bool, "CurveKey | None"]


@dataclass(frozen=True)
class CurveSpec:
    """One curve: `key` is (host, device, metric) of its series; `label` names it (host and device, and what it
    counts when a device has two curves); `note` is said after it in parentheses (e.g. "outlier")."""

    key: CurveKey
    label: str
    color: str
    mirrored: bool = False  # receive direction: drawn below zero
    dashed: bool = False
    note: str = ""


class MagnitudeAxis(pg.AxisItem):
    """A y axis that writes |value|, for charts with transmit above and receive below zero."""

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        return [text.lstrip("-−") for text in super().tickStrings(values, scale, spacing)]


class TimeChart(QWidget):
    """A titled chart of curves against wall-clock time, with its legend table under it."""

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
        item.setLabel("bottom", time_axis_label())
        for name in ("left", "bottom"):  # grid lines at major ticks only
            item.getAxis(name).setStyle(maxTickLevel=0 if name == "left" else 1)
        self._y_floor_raw = 0.0
        self.title_label = ElidedLabel(title)  # cut with … when the chart is narrower, whole in its tooltip
        self.title_label.setObjectName("chartTitle")
        bold = self.title_label.font()
        bold.setBold(True)
        self.title_label.setFont(bold)
        self._specs: list[CurveSpec] = []
        self._pen_keys: dict[tuple[str, bool], int] = {}
        self._batch_specs: list[list[CurveSpec]] = []
        self._batch_rows: list[np.ndarray] = []  # each batch row's position in `_specs`
        self._factors = np.empty(0)  # per curve: raw -> axis units (negative: mirrored)
        self._hidden: set[CurveKey] = set()
        # Curves up to `_settled_until` are drawn once and cached as a pixmap; only the newest
        # points (the tail) are redrawn on each refresh. See update_data.
        self._settled = MultiCurveItem()
        self._settled.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self._tail = MultiCurveItem()
        self._bands = BandItem()  # min–max of a group of series (fleet-scale charts), under the curves
        self._bands.setZValue(-1)
        self._band_specs: list[BandSpec] = []
        item.addItem(self._bands)
        item.addItem(self._settled)
        item.addItem(self._tail)
        self._batches: list[CurveBatch] = []
        self._settled_until = math.nan
        self._settled_range: tuple[float, float] | None = None
        self._settled_bounds: list[tuple[np.ndarray, np.ndarray]] = []  # per batch: its rows' min, max so far
        self._x_range: tuple[float, float] | None = None
        # per curve, in axis units over the window: lowest, highest, newest; and the newest in raw units
        self._low = self._high = self._last = self._last_raw = np.empty(0)
        self._reference_lines: list[pg.InfiniteLine] = []
        self._marker_lines = MarkerLines(item)
        self._cursor = pg.InfiniteLine(angle=90, movable=False)
        self._cursor.setVisible(False)
        self._cursor_time: float | None = None
        item.addItem(self._cursor, ignoreBounds=True)
        self.crosshair = CrosshairGroup()
        self.crosshair.add(self)
        self.legend = LegendTable(unit.format, self)
        self.legend.toggled.connect(self._legend_clicked)
        self.overlay = QLabel(self.plot_widget)  # why the chart is empty, over its middle
        self.overlay.setObjectName("chartOverlay")
        self.overlay.setTextFormat(Qt.TextFormat.PlainText)
        self.overlay.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.overlay.setWordWrap(True)
        self.overlay.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.overlay.setVisible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.title_label)
        layout.addWidget(self.plot_widget)
        layout.addWidget(self.legend)
        self.plot_widget.installEventFilter(self)
        self.plot_widget.viewport().installEventFilter(self)
        self._mouse_proxy = pg.SignalProxy(self.plot_widget.scene().sigMouseMoved, rateLimit=30, slot=self._on_mouse)
        self.apply_palette()

    @property
    def plot_item(self) -> pg.PlotItem:
        return self.plot_widget.getPlotItem()

    # ------------------------------------------------------------------ curves

    def set_title_suffix(self, suffix: str) -> None:
        self.title_label.setText(f"{self.title}{suffix}")

    @property
    def title_text(self) -> str:
        """The whole title (the label shows it cut to fit)."""
        return self.title_label.text()

    def display_label(self, spec: CurveSpec) -> str:
        """How the legend and the readout name a curve: its label, TX / RX on a mirrored chart, its note."""
        direction = " RX" if spec.mirrored else (" TX" if self.mirrored else "")
        return f"{spec.label}{direction}" + (f" ({spec.note})" if spec.note else "")

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
        self._batches, self._batch_specs, self._batch_rows = [], [], []
        self._settled_until = math.nan
        self._factors = np.array([-self.unit.scale if s.mirrored else self.unit.scale for s in specs], dtype=np.float64)
        nan = np.full(len(specs), np.nan)
        self._low, self._high, self._last, self._last_raw = nan, nan.copy(), nan.copy(), nan.copy()
        self.legend.set_rows(
            [LegendRow(self.display_label(spec), spec.color, spec.dashed) for spec in specs], self._hidden_rows()
        )

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
        by_host: dict[str, list[int]] = {}
        for position, spec in enumerate(self._specs):
            by_host.setdefault(spec.key[0], []).append(position)
        batches, batch_specs, batch_rows, points = [], [], [], 0
        for host, positions in by_host.items():
            specs = [self._specs[p] for p in positions]
            x, raw = source(host, [(spec.key[1], spec.key[2]) for spec in specs])
            rows = np.asarray(positions, dtype=np.intp)
            ys = raw * self._factors[rows].astype(raw.dtype)[:, None]
            pen_keys = tuple(self._pen_keys[(s.color, s.dashed)] for s in specs)
            # x is a view into a ring that keeps being written: copy it, the settled part is kept.
            batches.append(CurveBatch(x.copy(), ys, pen_keys))
            batch_specs.append(specs)
            batch_rows.append(rows)
            points += ys.size
        self._batches = batches
        self._batch_specs = batch_specs
        self._batch_rows = batch_rows
        if self._x_range != (x_start, x_end):
            self._x_range = (x_start, x_end)
            self._marker_lines.place_labels(self._x_range)
        self._split_settled_and_tail((x_start, x_end))
        self._update_legend_values(x_end)
        if not self._interactive and math.isfinite(x_start) and math.isfinite(x_end) and x_end > x_start:
            if self.plot_item.getViewBox().viewRange()[0] != [x_start, x_end]:
                self.plot_item.setXRange(x_start, x_end, padding=0)
            self._fit_y(x_start, x_end)
        return points

    def _split_settled_and_tail(self, x_range: tuple[float, float]) -> None:
        """Hand all data to the cached `settled` item when the view moved or the tail grew long;
        otherwise only the points after `_settled_until` (plus the one before, to join) to `tail`.
        The legend's min / max follow the same split: the settled part's are kept, the tail's folded in."""
        x_start, x_end = x_range
        latest = max((float(b.x[-1]) for b in self._batches if b.x.size), default=math.nan)
        tail_points = max(
            (b.x.size - int(np.searchsorted(b.x, self._settled_until, side="right")) for b in self._batches),
            default=0,
        )
        if self._settled_range != x_range or not (self._settled_until <= latest) or tail_points > TAIL_POINTS:
            self._settled.set_batches(self._shown_rows(self._batches))
            self._tail.set_batches([])
            self._settled_until = latest
            self._settled_range = x_range
            self._settled_bounds = [chart_stats.row_bounds(b, x_start, x_end) for b in self._batches]
            bounds = self._settled_bounds
        else:
            tail = []
            for batch in self._batches:
                first = max(int(np.searchsorted(batch.x, self._settled_until, side="left")) - 1, 0)
                tail.append(CurveBatch(batch.x[first:], batch.ys[:, first:], batch.pen_keys))
            self._tail.set_batches(self._shown_rows(tail))
            bounds = []
            for batch, (low, high) in zip(self._batches, self._settled_bounds, strict=True):
                tail_low, tail_high = chart_stats.row_bounds(batch, self._settled_until, x_end, after=True)
                bounds.append((np.fmin(low, tail_low), np.fmax(high, tail_high)))
        size = len(self._specs)
        self._low = chart_stats.scatter([low for low, _ in bounds], self._batch_rows, size)
        self._high = chart_stats.scatter([high for _, high in bounds], self._batch_rows, size)

    def _shown_rows(self, batches: Sequence[CurveBatch]) -> list[CurveBatch]:
        """`batches` without the rows of hidden curves (the batches as they are when none is hidden)."""
        if not self._hidden:
            return list(batches)
        shown = []
        for batch, specs in zip(batches, self._batch_specs, strict=True):
            keep = np.array([spec.key not in self._hidden for spec in specs], dtype=bool)
            if keep.all():
                shown.append(batch)
            elif keep.any():
                pens = tuple(pen for pen, kept in zip(batch.pen_keys, keep.tolist(), strict=True) if kept)
                shown.append(CurveBatch(batch.x, batch.ys[keep], pens))
        return shown

    def _update_legend_values(self, x_end: float) -> None:
        size = len(self._specs)
        self._last = chart_stats.scatter(
            [chart_stats.last_values(b, x_end) for b in self._batches], self._batch_rows, size
        )
        self._last_raw = chart_stats.to_raw(self._last, self._factors)
        low, high = chart_stats.raw_bounds(self._low, self._high, self._factors)
        shown = self._last_raw if self._cursor_time is None else self._values_at(self._cursor_time)
        self.legend.model_.set_values(shown, low, high)

    def legend_values(self, key: CurveKey) -> tuple[float, float, float]:
        """(last, min, max) of one curve over the window, in raw units, as its legend row shows them."""
        row = next(i for i, spec in enumerate(self._specs) if spec.key == key)
        low, high = chart_stats.raw_bounds(
            self._low[row : row + 1], self._high[row : row + 1], self._factors[row : row + 1]
        )
        return float(self._last_raw[row]), float(low[0]), float(high[0])

    # ------------------------------------------------------------------ hiding curves

    def _hidden_rows(self) -> set[int]:
        return {row for row, spec in enumerate(self._specs) if spec.key in self._hidden}

    @property
    def hidden_curves(self) -> set[CurveKey]:
        return {spec.key for spec in self._specs if spec.key in self._hidden}

    def set_curve_hidden(self, key: CurveKey, hidden: bool) -> None:
        """Hide or show one curve (and its band); the y range fits the curves shown."""
        if hidden:
            self._hidden.add(key)
        else:
            self._hidden.discard(key)
        self._visibility_changed()

    def show_only(self, key: CurveKey) -> None:
        """Show only this curve; when it is the only one shown already, show them all again."""
        keys = {spec.key for spec in self._specs}
        others = keys - {key}
        if key not in self._hidden and others <= self._hidden:
            self._hidden -= keys
        else:
            self._hidden = (self._hidden - {key}) | others
        self._visibility_changed()

    def _legend_clicked(self, row: int, only: bool) -> None:
        if not 0 <= row < len(self._specs):
            return
        key = self._specs[row].key
        if only:
            self.show_only(key)
        else:
            self.set_curve_hidden(key, key not in self._hidden)

    def _visibility_changed(self) -> None:
        self.legend.model_.set_hidden(self._hidden_rows())
        self._apply_bands()
        self._settled_range = None  # drawn again without (or with) the curve
        if self._x_range is not None and self._batches:
            self._split_settled_and_tail(self._x_range)
            self._y_range = None
            if not self._interactive:
                self._fit_y(*self._x_range)

    # ------------------------------------------------------------------ bands, lines, markers

    def set_bands(self, bands: Sequence[BandSpec]) -> None:
        """Min–max bands (x, low, high in raw units, colour, mirrored, the curve they go with) under the curves;
        a band is hidden with its curve."""
        self._band_specs = list(bands)
        self._apply_bands()

    def _apply_bands(self) -> None:
        scaled = []
        for x, low, high, color, mirrored, key in self._band_specs:
            if key is not None and key in self._hidden:
                continue
            factor = -self.unit.scale if mirrored else self.unit.scale
            a, b = low * factor, high * factor
            scaled.append(Band(x, np.fmin(a, b), np.fmax(a, b), color))
        self._bands.set_bands(scaled)

    @property
    def bands(self) -> list[Band]:
        return self._bands.bands

    @property
    def legend_labels(self) -> list[str]:
        """The legend's rows, in the curves' order."""
        return self.legend.labels()

    def _fit_y(self, x_start: float, x_end: float) -> None:
        """Zero-based y range rounded up to a nice number, symmetric when RX is mirrored below zero.

        Zero-based so a chart never exaggerates a small change; rounded so the range (and the
        axis, which pyqtgraph then redraws) changes only when the data crosses a step. The curves'
        bounds are the legend's (hidden curves left out)."""
        shown = np.array([spec.key not in self._hidden for spec in self._specs], dtype=bool)
        lows, highs = self._low[shown], self._high[shown]
        found = []
        if np.isfinite(lows).any() and np.isfinite(highs).any():
            found.append((float(np.nanmin(lows)), float(np.nanmax(highs))))
        bands = self._bands.y_bounds(x_start, x_end)
        if bands:
            found.append(bands)
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

    def set_markers(self, markers: Sequence[Marker]) -> None:
        """Vertical dashed lines at events' times, each labelled at the top (nothing done when unchanged)."""
        self._marker_lines.set(markers, self._x_range)

    @property
    def markers(self) -> list[Marker]:
        return list(self._marker_lines.markers)

    def set_overlay_text(self, text: str) -> None:
        """A sentence over the plot's middle saying why it is empty ("" : none)."""
        if text != self.overlay.text():
            self.overlay.setText(text)
        self.overlay.setVisible(bool(text))
        self._place_overlay()

    def _place_overlay(self) -> None:
        self.overlay.setGeometry(self.plot_widget.rect().adjusted(40, 20, -20, -40))

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

    def join(self, group: CrosshairGroup) -> None:
        """Share `group`'s crosshair (the other charts of the view)."""
        self.crosshair = group
        group.add(self)

    def _raw(self, spec: CurveSpec, value: float) -> float:
        return value / (-self.unit.scale if spec.mirrored else self.unit.scale)

    def _direction(self, spec: CurveSpec) -> str:
        return " RX" if spec.mirrored else (" TX" if self.mirrored else "")

    def readout_at(self, x: float, y: float) -> str:
        """The curve nearest to (x, y) in the view, with its value at x and its unit (hidden curves skipped)."""
        best: tuple[float, CurveSpec, float, float] | None = None
        for batch, specs in zip(self._batches, self._batch_specs, strict=True):
            if batch.x.size == 0:
                continue
            index = int(np.clip(np.searchsorted(batch.x, x), 0, batch.x.size - 1))
            if index > 0 and abs(batch.x[index - 1] - x) < abs(batch.x[index] - x):
                index -= 1
            column = batch.ys[:, index].astype(np.float64)
            distance = np.abs(column - y)
            usable = np.isfinite(distance) & np.array([s.key not in self._hidden for s in specs], dtype=bool)
            if not usable.any():
                continue
            row = int(np.argmin(np.where(usable, distance, np.inf)))
            if best is None or distance[row] < best[0]:
                best = (float(distance[row]), specs[row], float(batch.x[index]), float(column[row]))
        if best is None:
            return " "
        _, spec, at, value = best
        return f"{clock_text(at)}  {self.display_label(spec)}: {self.unit.format(self._raw(spec, value))}"

    def _values_at(self, x: float) -> np.ndarray:
        """Every curve's value (raw units) at the sample nearest to `x`, in the curves' order."""
        values = chart_stats.scatter(
            [chart_stats.values_at(b, x) for b in self._batches], self._batch_rows, len(self._specs)
        )
        return chart_stats.to_raw(values, self._factors)

    def readout_highest(self, x: float) -> str:
        """At time `x`: the shown curve with the largest value (magnitude, on a mirrored chart), and its value."""
        values = self._values_at(x)
        shown = np.array([spec.key not in self._hidden for spec in self._specs], dtype=bool)
        magnitude = np.where(shown & np.isfinite(values), np.abs(values), -np.inf)
        if not magnitude.size or not np.isfinite(magnitude).any():
            return f"{clock_text(x)}"
        row = int(np.argmax(magnitude))
        spec = self._specs[row]
        return f"{clock_text(x)}  highest: {self.display_label(spec)}: {self.unit.format(float(values[row]))}"

    def show_cursor(self, x: float, y: float | None) -> None:
        """The shared crosshair at time `x`: the line, the readout (nearest curve to `y` when the pointer is
        over this chart, else the highest) and the legend's values at that time."""
        self._cursor.setPos(x)
        self._cursor.setVisible(True)
        self._cursor_time = x
        self.legend.model_.set_readout(self.readout_at(x, y) if y is not None else self.readout_highest(x))
        self.legend.model_.set_at(f"at {clock_text(x)}", self._values_at(x))

    def hide_cursor(self) -> None:
        self._cursor.setVisible(False)
        self._cursor_time = None
        self.legend.model_.set_readout("")
        self.legend.model_.set_at("", self._last_raw)

    @property
    def readout(self) -> str:
        """What the crosshair reads on this chart now (the legend's first header), "" when it is elsewhere."""
        return self.legend.model_.readout

    def _on_mouse(self, event: tuple[QPointF]) -> None:
        position = event[0]
        if not self.plot_item.sceneBoundingRect().contains(position):
            self.crosshair.left()
            return
        point = self.plot_item.getViewBox().mapSceneToView(position)
        self.crosshair.moved(self, point.x(), point.y())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.plot_widget.viewport() and event.type() == QEvent.Type.Leave:
            self.crosshair.left()
        elif watched is self.plot_widget and event.type() == QEvent.Type.Resize:
            self._place_overlay()
        return super().eventFilter(watched, event)

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
        cursor_pen = QPen(foreground)
        cursor_pen.setStyle(Qt.PenStyle.DotLine)
        cursor_pen.setCosmetic(True)
        self._cursor.setPen(cursor_pen)
