"""The live dashboard: VRAM (with the plan's line), KV cache, links, utilization, power, temperature,
requests and tokens/s, for the hosts and GPUs the operator picks.

Samples are ingested into `LiveMetrics` as they arrive (cheap); the charts are redrawn by a timer
at most twice a second, only while the view is visible, not paused, and something new came in.
While paused the charts hold still and can be panned and zoomed; data keeps arriving underneath.
"""

from __future__ import annotations

import contextlib
import html
import math
import time
from collections import deque
from collections.abc import Mapping

import numpy as np

from meshdeck.core.errors import InputError
from meshdeck.core.foreground import FOREGROUND
from meshdeck.core.samples import Device, SeriesKey
from meshdeck.core.text import printable
from meshdeck.ui.charts.live_metrics import LiveMetrics
from meshdeck.ui.charts.time_chart import DataSource
from meshdeck.ui.charts.units import format_bytes
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
    QVBoxLayout,
    QWidget,
)

WINDOWS: tuple[tuple[str, float], ...] = (("5 min", 300.0), ("1 h", 3600.0), ("24 h", 86400.0))
REFRESH_INTERVAL_MS = 500  # at most two redraws a second
REFRESH_TIMES_KEPT = 4096  # refresh durations kept for `refresh_durations_ms` (about half an hour of redraws)


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
        self.window_choice.currentIndexChanged.connect(self._window_changed)
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

        bar = QHBoxLayout()
        bar.addWidget(QLabel("Hosts"))
        bar.addWidget(self.host_filter)
        bar.addWidget(self.gpu_filter, 1)
        bar.addWidget(QLabel("Window"))
        bar.addWidget(self.window_choice)
        bar.addWidget(self.pause_button)
        bar.addWidget(self.simulated_badge)
        bar.addWidget(self.status, 1)

        scroll, self.charts = chart_grid(DASHBOARD_CHARTS, "chart_")
        self._definitions: dict[str, ChartDefinition] = {d.name: d for d in DASHBOARD_CHARTS}

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
        self._drawn_generation = -1

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
            label = f"{hosts[0]} (selected in Fleet)" if len(hosts) == 1 else f"{len(hosts)} hosts selected in Fleet"
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

    def restore_settings(self, settings: QSettings) -> None:
        window = settings.value("dashboard/window_s")
        if window is not None:
            with contextlib.suppress(InputError, TypeError, ValueError):  # from another version: keep the default
                self.set_window(float(window))
        self.gpu_filter.setText(str(settings.value("dashboard/gpus", "") or ""))
        self._selection_changed()

    # ------------------------------------------------------------------ drawing

    def _on_timer(self) -> None:
        due = time.monotonic() - self._last_refresh >= min_redraw_interval_s(self.window_s) - 0.05
        if due and self.isVisible() and not self.paused and self.metrics.generation != self._drawn_generation:
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
        for name, chart in self.charts.items():
            if name not in self.aggregated:  # aggregated charts get their curves with their data
                chart.set_curves(chosen[name][1])
                chart.set_bands([])
                chart.set_legend([])
                chart.set_title_suffix("")
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
                lambda host, keys, since: self.metrics.window(host, keys, x_end - since, x_end), self.window_s, x_end
            )
        return sum(
            self.fleet_scale.draw(name, chart, x_start, x_end)
            if name in self.aggregated
            else chart.update_data(source, x_start, x_end)
            for name, chart in self.charts.items()
        )

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
        step = self.window_s / 60
        x_end = math.ceil(end / step) * step
        x_start = x_end - self.window_s

        def source(host: str, series_ids: list[SeriesKey]) -> tuple[np.ndarray, np.ndarray]:
            return self.metrics.window(host, series_ids, self.window_s, x_end)

        self.charts["vram"].set_y_floor(self._largest_gpu_memory())
        points = self._draw_charts(source, x_start, x_end)
        self._drawn_generation = self.metrics.generation
        self._last_refresh = time.monotonic()
        age = time.time() - end
        self.status.setText(f"last sample {age:.0f} s ago" if age >= 2 else "live")
        self._label_data_kind()
        self.refreshed.emit(points)
        return points
