"""The live dashboard: VRAM (with the plan's line), KV cache, links, utilization, power, temperature,
requests and tokens/s, for the hosts and GPUs the operator picks.

Samples are ingested into `LiveMetrics` as they arrive (cheap); the charts are redrawn by a timer
at most twice a second (or as often as the refresh choice says), only while the view is visible, not
paused, and something new came in. While paused the charts hold still and can be panned and zoomed; data
keeps arriving underneath. The time keys (charts/navigation.py: + / − zoom, ← / → shift) hold a range of
the past until Home (or a window chosen) goes back to live.

Every chart has a legend table (last / min / max, click to hide a curve) and the crosshair is shared by all
of them. Deployments' starts and stops are vertical markers on every chart of the hosts they ran on; a chart
with nothing to draw says why (a CPU host's agent reports no GPU).
"""

from __future__ import annotations

import contextlib
import html
import math
import time
from collections import deque
from collections.abc import Iterable, Mapping

import numpy as np

from meshdeck.core.errors import InputError
from meshdeck.core.foreground import FOREGROUND
from meshdeck.core.plural import counted
from meshdeck.core.samples import Device, SeriesKey
from meshdeck.core.text import printable
from meshdeck.services.deployments.model import DeploymentSnapshot
from meshdeck.ui.charts.chart_parts import clock_text
from meshdeck.ui.charts.crosshair import CrosshairGroup
from meshdeck.ui.charts.live_metrics import COARSE_BUCKET_S, COARSE_CAPACITY, LiveMetrics
from meshdeck.ui.charts.navigation import SHORTCUT_HINT, TimeKeys, install_time_keys, shifted, zoomed
from meshdeck.ui.charts.time_chart import DataSource
from meshdeck.ui.charts.units import format_bytes
from meshdeck.ui.views.dashboard.annotations import DeploymentTimeline, empty_chart_text
from meshdeck.ui.views.dashboard.charts import (
    DASHBOARD_CHARTS,
    ChartDefinition,
    Selection,
    dashboard_metrics,
    format_gpu_filter,
    parse_gpu_filter,
)
from meshdeck.ui.views.dashboard.fleet_scale import FleetScaleCharts
from meshdeck.ui.widgets.tables import chart_grid

__all__ = ["WINDOWS", "DashboardView", "dashboard_metrics"]
from PySide6.QtCore import QCoreApplication, QEvent, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

WINDOWS: tuple[tuple[str, float], ...] = (("5 min", 300.0), ("1 h", 3600.0), ("24 h", 86400.0))
# The refresh choice: "auto" redraws as often as the window is worth (min_redraw_interval_s), the others at most
# once per that many seconds. Kept in the settings (dashboard/refresh_s; 0 is auto).
REFRESH_CHOICES: tuple[tuple[str, float], ...] = (
    ("auto", 0.0),
    ("1 s", 1.0),
    ("2 s", 2.0),
    ("5 s", 5.0),
    ("10 s", 10.0),
)
REFRESH_INTERVAL_MS = 500  # at most two redraws a second
REFRESH_TIMES_KEPT = 4096  # refresh durations kept for `refresh_durations_ms` (about half an hour of redraws)
MAX_SPAN_S = COARSE_BUCKET_S * COARSE_CAPACITY  # the longest range the rings hold (24 h and a bit)


def min_redraw_interval_s(window_s: float) -> float:
    """How often a window is worth redrawing: 0.5 s at 5 min, 1 s at 1 h, 5 s at 24 h.

    On a 1 h chart 1 s is a fifth of a pixel; redrawing faster shows nothing new."""
    return min(5.0, max(REFRESH_INTERVAL_MS / 1000, window_s / 3600))


class DashboardView(QWidget):
    """Live charts fed from a `LiveMetrics`; `refresh()` redraws (the timer calls it)."""

    refreshed = Signal(int)  # points handed to the charts in this refresh

    def __init__(self, metrics: LiveMetrics, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("dashboardView")
        self.metrics = metrics
        self.window_s = WINDOWS[0][1]
        self.selection = Selection()
        self.paused = False
        self._drawn_generation = -1
        self._last_refresh = 0.0
        self._built_for: tuple[int, Selection] | None = None
        self._planned_memory: dict[tuple[str, int], float] = {}
        self._deployment_of_host: dict[str, str] = {}
        self.fleet_scale = FleetScaleCharts()  # charts of too many curves draw medians, bands and outliers
        self.aggregated: set[str] = set()  # the charts that do now
        self._refresh_ms: deque[float] = deque(maxlen=REFRESH_TIMES_KEPT)
        self.held_range: tuple[float, float] | None = None  # a range of the past the time keys chose; None: live
        self.refresh_s = 0.0  # the refresh choice (0: auto)
        self.timeline = DeploymentTimeline()

        self.host_filter = QComboBox()
        self.host_filter.setObjectName("hostFilter")
        self.host_filter.setAccessibleName("Host filter")
        self.host_filter.addItem("All hosts", None)
        self.host_filter.currentIndexChanged.connect(self._selection_changed)
        self.gpu_filter = QLineEdit()
        self.gpu_filter.setObjectName("gpuFilter")
        self.gpu_filter.setPlaceholderText("GPUs: all, or e.g. 0-3,6")
        self.gpu_filter.setClearButtonEnabled(True)
        self.gpu_filter.setAccessibleName("GPU filter")
        self.gpu_filter.editingFinished.connect(self._selection_changed)
        self.window_choice = QComboBox()
        self.window_choice.setObjectName("windowChoice")
        self.window_choice.setAccessibleName("Time window")
        for label, seconds in WINDOWS:
            self.window_choice.addItem(label, seconds)
        self.window_choice.setToolTip(f"How much of the past the charts show, live. {SHORTCUT_HINT}")
        self.window_choice.currentIndexChanged.connect(self._window_changed)
        self.refresh_choice = QComboBox()
        self.refresh_choice.setObjectName("refreshChoice")
        self.refresh_choice.setAccessibleName("Refresh interval")
        self.refresh_choice.setToolTip(
            "How often the charts are redrawn: auto follows the window (0.5 s at 5 min, 5 s at 24 h)"
        )
        for label, seconds in REFRESH_CHOICES:
            self.refresh_choice.addItem(label, seconds)
        self.refresh_choice.currentIndexChanged.connect(self._refresh_choice_changed)
        self.pause_button = QPushButton("Pause")
        self.pause_button.setObjectName("pauseButton")
        self.pause_button.setCheckable(True)
        self.pause_button.setToolTip("Hold the charts still to pan and zoom (Ctrl+Shift+P); data keeps arriving")
        self.pause_button.toggled.connect(self.set_paused)
        # Not Ctrl+P (every desktop's Print) nor Space (it presses the focused button): see Help > Keyboard shortcuts
        pause = QShortcut(QKeySequence("Ctrl+Shift+P"), self, self.pause_button.toggle)
        pause.setWhatsThis("Pause or resume the charts (data keeps arriving)")
        self.simulated_badge = QLabel("SIMULATED data")
        self.simulated_badge.setObjectName("simulatedBadge")
        self.simulated_badge.setToolTip("These hosts run meshdeck-agent --simulate: the GPUs and vLLM are stand-ins")
        self.simulated_badge.setVisible(False)
        self.status = QLabel("waiting for samples…")
        self.status.setObjectName("dashboardStatus")
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # never widens the bar

        bar = QHBoxLayout()
        bar.addWidget(QLabel("Hosts"))
        bar.addWidget(self.host_filter)
        bar.addWidget(self.gpu_filter, 1)
        bar.addWidget(QLabel("Window"))
        bar.addWidget(self.window_choice)
        bar.addWidget(QLabel("Refresh"))
        bar.addWidget(self.refresh_choice)
        bar.addWidget(self.pause_button)
        bar.addWidget(self.simulated_badge)
        bar.addWidget(self.status, 1)

        scroll, self.charts = chart_grid(DASHBOARD_CHARTS, "chart_")
        self._definitions: dict[str, ChartDefinition] = {d.name: d for d in DASHBOARD_CHARTS}
        self.crosshair = CrosshairGroup()  # hover one chart: every chart shows that time
        for chart in self.charts.values():
            chart.join(self.crosshair)
        self._time_keys = install_time_keys(self, TimeKeys(self.zoom, self.shift, self.go_live))

        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(scroll, 1)

        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_INTERVAL_MS)
        self.timer.timeout.connect(self._on_timer)
        self.timer.start()

    # ------------------------------------------------------------------ inputs

    def set_planned_memory(self, planned: Mapping[tuple[str, int], float]) -> None:
        """Per (host, GPU index) memory the plan expects in use, in bytes: drawn over the VRAM chart."""
        if dict(planned) == self._planned_memory:
            return
        self._planned_memory = dict(planned)
        self._built_for = None  # lines depend on the selection: rebuild on the next refresh
        self._drawn_generation = -1

    def set_deployment_of_host(self, deployments: Mapping[str, str]) -> None:
        """host -> the running deployment on it: the groups of fleet-scale charts over many hosts."""
        if dict(deployments) != self._deployment_of_host:
            self._deployment_of_host = dict(deployments)
            self._built_for = None
            self._drawn_generation = -1

    def set_deployments(self, snapshots: Iterable[DeploymentSnapshot]) -> None:
        """The deployments the console knows: each one's start, and its end once it ended, is a marker on the
        charts of its hosts."""
        if self.timeline.update(snapshots):
            self._drawn_generation = -1

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        self.pause_button.setText("Resume" if paused else "Pause")
        if self.pause_button.isChecked() != paused:
            self.pause_button.setChecked(paused)
        for chart in self.charts.values():
            chart.set_interactive(paused)
        if not paused:
            self._drawn_generation = -1

    def set_window(self, seconds: float) -> None:
        index = self.window_choice.findData(seconds)
        if index < 0:
            raise InputError("window", f"{seconds} s is not one of {', '.join(label for label, _ in WINDOWS)}")
        self.window_choice.setCurrentIndex(index)

    def _window_changed(self) -> None:
        self.window_s = float(self.window_choice.currentData())
        self.held_range = None  # a window chosen is live
        self._drawn_generation = -1

    def _refresh_choice_changed(self) -> None:
        self.refresh_s = float(self.refresh_choice.currentData())

    def set_refresh_interval(self, seconds: float) -> None:
        """Redraw at most once per `seconds` (0: auto, as the window is worth); one of REFRESH_CHOICES."""
        index = self.refresh_choice.findData(seconds)
        if index < 0:
            choices = ", ".join(label for label, _ in REFRESH_CHOICES)
            raise InputError("refresh interval", f"{seconds} s is not one of {choices}")
        self.refresh_choice.setCurrentIndex(index)

    def redraw_interval_s(self) -> float:
        """How long a redraw waits after the last one: the window's own pace, or the refresh choice if slower."""
        return max(min_redraw_interval_s(self.window_s), self.refresh_s)

    # ------------------------------------------------------------------ time keys

    def shown_range(self) -> tuple[float, float] | None:
        """The range the charts show now: the held one, or the live window's (None before any sample)."""
        if self.held_range is not None:
            return self.held_range
        end = self.metrics.latest_time()
        if not math.isfinite(end):
            return None
        step = self.window_s / 60
        x_end = math.ceil(end / step) * step
        return x_end - self.window_s, x_end

    def zoom(self, factor: float) -> None:
        """+ / −: the range shown, `factor` times as long around its middle; it is held (not live) since."""
        shown = self.shown_range()
        if shown is not None:
            self._hold(zoomed(*shown, factor, max_span=MAX_SPAN_S))

    def shift(self, fraction: float) -> None:
        """← / →: the range shown moved by `fraction` of its span, never past the newest sample's step."""
        shown = self.shown_range()
        if shown is not None:
            live_end = self.metrics.latest_time()
            self._hold(shifted(*shown, fraction, latest=max(live_end, shown[1]) if fraction > 0 else None))

    def go_live(self) -> None:
        """Home: back to the live window (and out of pause)."""
        self.held_range = None
        if self.paused:
            self.set_paused(False)
        self._drawn_generation = -1
        if self.isVisible():
            self.refresh()

    def _hold(self, shown: tuple[float, float]) -> None:
        self.held_range = shown
        self._drawn_generation = -1
        self.refresh()

    def show_selection(self, selection: Selection) -> None:
        """Show the hosts and GPUs picked elsewhere (the fleet view); `hosts` None shows all hosts again.

        The pick is an entry of the host filter ("3 hosts selected in Fleet"), so it can be left and
        chosen again like any host."""
        index = next(
            (i for i in range(1, self.host_filter.count()) if isinstance(self.host_filter.itemData(i), frozenset)), -1
        )
        self.host_filter.blockSignals(True)
        if selection.hosts is None:
            if index >= 0:
                self.host_filter.removeItem(index)
            self.host_filter.setCurrentIndex(0)
            self.gpu_filter.setText("")
        else:
            hosts = sorted(selection.hosts)
            label = (
                f"{hosts[0]} (selected in Fleet)"
                if len(hosts) == 1
                else f"{counted(len(hosts), 'host')} selected in Fleet"
            )
            if index < 0:
                index = 1
                self.host_filter.insertItem(index, label, selection.hosts)
            else:
                self.host_filter.setItemText(index, label)
                self.host_filter.setItemData(index, selection.hosts)
            shown = html.escape(printable(", ".join(hosts[:40]), 2000)) + (" …" if len(hosts) > 40 else "")
            self.host_filter.setItemData(index, shown, Qt.ItemDataRole.ToolTipRole)
            self.host_filter.setCurrentIndex(index)
            self.gpu_filter.setText(format_gpu_filter(selection.gpus))
        self.host_filter.blockSignals(False)
        self._selection_changed()

    def _selection_changed(self) -> None:
        host = self.host_filter.currentData()
        try:
            gpus = parse_gpu_filter(self.gpu_filter.text())
        except InputError as exc:
            self.gpu_filter.setProperty("invalid", True)
            self.gpu_filter.setToolTip(str(exc))
            self._restyle(self.gpu_filter)
            return
        self.gpu_filter.setProperty("invalid", False)
        self.gpu_filter.setToolTip("GPU indices to show, e.g. 0-3,6; empty for all")
        self._restyle(self.gpu_filter)
        hosts = host if isinstance(host, frozenset) else None if host is None else frozenset({host})
        self.selection = Selection(hosts=hosts, gpus=gpus)
        self._drawn_generation = -1

    @staticmethod
    def _restyle(widget: QWidget) -> None:
        widget.style().unpolish(widget)
        widget.style().polish(widget)

    def save_settings(self, settings: QSettings) -> None:
        settings.setValue("dashboard/window_s", self.window_s)
        settings.setValue("dashboard/gpus", self.gpu_filter.text())
        settings.setValue("dashboard/refresh_s", self.refresh_s)

    def restore_settings(self, settings: QSettings) -> None:
        window = settings.value("dashboard/window_s")
        if window is not None:
            with contextlib.suppress(InputError, TypeError, ValueError):  # from another version: keep the default
                self.set_window(float(window))
        refresh = settings.value("dashboard/refresh_s")
        if refresh is not None:
            with contextlib.suppress(InputError, TypeError, ValueError):
                self.set_refresh_interval(float(refresh))
        self.gpu_filter.setText(str(settings.value("dashboard/gpus", "") or ""))
        self._selection_changed()

    # ------------------------------------------------------------------ drawing

    def _on_timer(self) -> None:
        """Redraw when due, shown, live (not paused, no range held) and something new came in."""
        due = time.monotonic() - self._last_refresh >= self.redraw_interval_s() - 0.05
        live = not self.paused and self.held_range is None
        if due and live and self.isVisible() and self.metrics.generation != self._drawn_generation:
            self.refresh()

    def _sync_hosts(self) -> None:
        known = {self.host_filter.itemData(i) for i in range(1, self.host_filter.count())}
        for host in self.metrics.hosts:
            if host not in known:
                self.host_filter.addItem(host, host)

    def _rebuild_curves(self) -> None:
        hosts = self.metrics.hosts
        chosen = {
            name: (
                self._definitions[name],
                self._definitions[name].curves(self.metrics.series_ids, hosts, self.selection),
            )
            for name in self.charts
        }
        self.aggregated = self.fleet_scale.plan(chosen, self._deployment_of_host)
        shown = [host for host in hosts if self.selection.shows_host(host) and self.metrics.series_ids(host)]
        for name, chart in self.charts.items():
            if name not in self.aggregated:  # aggregated charts get their curves with their data
                chart.set_curves(chosen[name][1])
                chart.set_bands([])
                chart.set_title_suffix("")
            kind = self._definitions[name].device_kind
            without = [host for host in shown if not self.metrics.devices(host, kind)] if not chosen[name][1] else []
            chart.set_overlay_text(empty_chart_text(kind, without))
        lines = sorted(
            {
                planned
                for (host, gpu), planned in self._planned_memory.items()
                if self.selection.shows_host(host) and self.selection.shows_gpu(gpu)
            }
        )
        self.charts["vram"].set_reference_lines([(value, f"plan {format_bytes(value)}") for value in lines])
        self._built_for = (self.metrics.version, self.selection)

    def _largest_gpu_memory(self) -> float:
        """The biggest total memory of the GPUs shown: the VRAM chart's y axis reaches it."""
        totals = [
            self.metrics.latest(host, Device.gpu(index), "memory_total_bytes")
            for host in self.metrics.hosts
            if self.selection.shows_host(host)
            for index in self.metrics.gpu_indices(host)
            if self.selection.shows_gpu(index)
        ]
        finite = [t for t in totals if math.isfinite(t)]
        return max(finite, default=0.0)

    def _label_data_kind(self) -> None:
        """SIMULATED when a host shown is simulated; REAL when only real hosts are shown beside simulated ones
        (the demo with --real-vllm); no badge when every host is real."""
        shown = [h for h in self.metrics.hosts if self.selection.shows_host(h)]
        simulated_shown = any(self.metrics.is_simulated(h) for h in shown)
        mixed = any(self.metrics.is_simulated(h) for h in self.metrics.hosts)
        self.simulated_badge.setText("SIMULATED data" if simulated_shown else "REAL data")
        self.simulated_badge.setToolTip(
            "These hosts run meshdeck-agent --simulate: the GPUs and vLLM are stand-ins"
            if simulated_shown
            else "The hosts shown are real agents: their vLLM and /metrics are real (the others are simulated)"
        )
        self.simulated_badge.setVisible(simulated_shown or (mixed and bool(shown)))

    def _draw_charts(self, source: DataSource, x_start: float, x_end: float) -> int:
        """Hand every chart its data: its own curves, or (fleet scale) its aggregates."""
        if self.aggregated:
            self.fleet_scale.update(
                lambda host, keys, since: self.metrics.between(host, keys, since, x_end), x_end - x_start, x_end
            )
        return sum(
            self.fleet_scale.draw(name, chart, x_start, x_end)
            if name in self.aggregated
            else chart.update_data(source, x_start, x_end)
            for name, chart in self.charts.items()
        )

    def _draw_markers(self, x_start: float) -> None:
        """The deployment markers from the range's start on (one after its end shows when the range moves to
        it), on the charts of the hosts shown."""
        markers = [
            marker
            for marker, hosts in self.timeline.markers
            if x_start <= marker.ts and (not hosts or any(self.selection.shows_host(h) for h in hosts))
        ]
        for chart in self.charts.values():
            chart.set_markers(markers)

    def refresh_durations_ms(self) -> list[float]:
        """How long each recent `refresh()` took, update and paint, in milliseconds, oldest first (the last
        REFRESH_TIMES_KEPT; `meshdeck bench fleet --console` reads them)."""
        return list(self._refresh_ms)

    def refresh(self) -> int:
        """Redraw every chart from the rings now and paint them. Returns the number of points handed to
        pyqtgraph. Its duration is kept (`refresh_durations_ms`). The pump and the writer step aside
        meanwhile (core/foreground.py)."""
        started = time.perf_counter()
        with FOREGROUND.hold():
            points = self._update_charts()
            if self.isVisible():
                self._paint_now()
        self._refresh_ms.append((time.perf_counter() - started) * 1e3)
        return points

    def _paint_now(self) -> None:
        """Paint the charts now instead of at the next expose: each chart's scene first takes in its items'
        changes (a queued call it would run next anyway), then one synchronous repaint clears what is dirty,
        so the paint the event loop would do is not done twice."""
        for chart in self.charts.values():
            QCoreApplication.sendPostedEvents(chart.plot_widget.scene(), QEvent.Type.MetaCall)
        self.repaint()

    def _update_charts(self) -> int:
        self._sync_hosts()
        if self._built_for != (self.metrics.version, self.selection):
            self._rebuild_curves()
        end = self.metrics.latest_time()
        if not math.isfinite(end):
            return 0
        # The right edge advances in steps of 1/60 of the window (5 s at 5 min, 1 min at 1 h), so
        # the axes are redrawn once a step instead of every refresh; the newest data is never cut.
        shown = self.shown_range()
        assert shown is not None
        x_start, x_end = shown
        held = self.held_range is not None

        def source(host: str, series_ids: list[SeriesKey]) -> tuple[np.ndarray, np.ndarray]:
            if held:
                return self.metrics.between(host, series_ids, x_start, x_end)
            return self.metrics.window(host, series_ids, self.window_s, x_end)

        self.charts["vram"].set_y_floor(self._largest_gpu_memory())
        points = self._draw_charts(source, x_start, x_end)
        self._draw_markers(x_start)
        self._drawn_generation = self.metrics.generation
        self._last_refresh = time.monotonic()
        age = time.time() - end
        if held:
            self.status.setText(f"showing {clock_text(x_start)} – {clock_text(x_end)} · Home: back to live")
        else:
            self.status.setText(f"last sample {age:.0f} s ago" if age >= 2 else "live")
        self._label_data_kind()
        self.refreshed.emit(points)
        return points
