"""The fleet view: every GPU of every host at once, one coloured square each, grouped by host or by
deployment, for fleets of hundreds of hosts (DeepSeek's 278 × 8 = 2,224 GPUs).

The colour is the metric the operator picks (VRAM, utilization, power, temperature, KV cache, NVLink,
PCIe, InfiniBand, XID / ECC alerts); a GPU that never reported it is "no data", never 0. Stale hosts (no
sample for `STALE_AFTER_S`) and disconnected ones are hatched and labelled with their last values.
Hover shows a GPU's numbers; a click opens the host (`host_opened`); a selection (Ctrl/Shift+click,
rubber band) filters the dashboard (`selection_changed`).

A refresh (once a second, only while the view is shown) reads the newest values into the per-GPU table
(`FleetTable`, numpy) and paints the one canvas; `refresh_durations_ms()` keeps how long each took
(update + paint), which `meshdeck bench fleet --console` reports. A refresh makes as few Qt calls as it
can (each costs milliseconds in a process of many busy threads: see the canvas): the canvas is painted
only when a colour, a host's state or the layout changed, and a label is set only when its text did.
"""

from __future__ import annotations

import html
import math
import time
from collections import deque

import numpy as np
from PySide6.QtCore import QEvent, QObject, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QShowEvent
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QScrollArea, QVBoxLayout, QWidget

from meshdeck.core.foreground import FOREGROUND
from meshdeck.core.plural import counted
from meshdeck.core.text import printable
from meshdeck.services.events import AgentEvent
from meshdeck.ui import color_scales
from meshdeck.ui.charts import units
from meshdeck.ui.context import ConsoleContext
from meshdeck.ui.views.dashboard.charts import Selection
from meshdeck.ui.views.fleet.canvas import HOST_DISCONNECTED, HOST_LIVE, HOST_STALE, FleetCanvas
from meshdeck.ui.views.fleet.groups import deployment_groups, host_groups, worker_placement
from meshdeck.ui.views.fleet.legend import FleetLegend
from meshdeck.ui.views.fleet.metrics import COLUMN, FLEET_METRICS, METRIC_BY_KEY, FleetColumns, FleetMetric
from meshdeck.ui.views.fleet.table import FleetTable

REFRESH_INTERVAL_MS = 1000
STALE_AFTER_S = 10.0  # ten missed 1 Hz samples
COLOR_BINS = 64
DURATIONS_KEPT = 600
LIVE_STATES = ("connected", "degraded")
GROUPINGS = (("host", "Host"), ("deployment", "Deployment"))


def scale_colors(metric: FleetMetric, bins: int = COLOR_BINS) -> list[QColor]:
    """The colours of `metric`'s scale, `bins` of them from low to high (ui/color_scales.py: thresholds for
    load, memory, temperature and alerts; viridis for the neutral quantities)."""
    return color_scales.bin_colors(metric.colors, bins)


def color_bins(metric: FleetMetric, values: np.ndarray, low: float, high: float, bins: int = COLOR_BINS) -> np.ndarray:
    """The colour bin of each value on `metric`'s scale over [low, high]; -1 where there is no value (NaN)."""
    return color_scales.value_bins(metric.colors, values, low, high, bins)


def _alert_counts(cell: FleetColumns) -> str:
    """What one GPU's alerts are made of: XID events, uncorrected ECC errors, and the corrected ones."""
    parts = (
        ("XID events", cell.xid),
        ("uncorrected ECC", cell.ecc("ecc_uncorrected_volatile")),
        ("corrected ECC", cell.ecc("ecc_corrected_volatile")),
    )
    return ", ".join(
        f"{name} {units.COUNT.format(float(value[0]))}" if math.isfinite(value[0]) else f"{name} no data"
        for name, value in parts
    )


def _text(value: object) -> str:
    """What a server sent, safe in a rich-text tooltip: one line, control characters escaped, markup inert."""
    return html.escape(printable(str(value), 200))


class FleetView(QWidget):
    host_opened = Signal(str)  # a cell was clicked: show this host
    selection_changed = Signal(object)  # a dashboard Selection (hosts None: nothing selected)

    def __init__(self, context: ConsoleContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("fleetView")
        self.context = context
        self.table = FleetTable(context.live, context.latest)
        self.colour_metric: FleetMetric = FLEET_METRICS[0]
        self.grouping = "host"
        self._durations: deque[float] = deque(maxlen=DURATIONS_KEPT)
        self._structure_drawn = -1
        self._groups_dirty = True
        self._hosts_dirty = True
        self._selected: set[tuple[str, int]] = set()
        self._values = np.empty(0)
        self.host_state = np.empty(0, dtype=np.int8)
        self.refreshes = 0
        self._labels: list[str] = []
        self._scaled_for: FleetMetric | None = None

        colors = scale_colors(self.colour_metric)
        self.metric_choice = QComboBox()
        self.metric_choice.setObjectName("fleetMetric")
        self.metric_choice.setAccessibleName("Colour by")
        for metric in FLEET_METRICS:
            self.metric_choice.addItem(metric.title, metric.key)
        self.metric_choice.currentIndexChanged.connect(lambda _i: self.set_metric(self.metric_choice.currentData()))
        self.group_choice = QComboBox()
        self.group_choice.setObjectName("fleetGrouping")
        self.group_choice.setAccessibleName("Group by")
        for key, title in GROUPINGS:
            self.group_choice.addItem(title, key)
        self.group_choice.currentIndexChanged.connect(lambda _i: self.set_grouping(self.group_choice.currentData()))
        self.clear_button = QPushButton("Clear selection")
        self.clear_button.setObjectName("fleetClearSelection")
        self.clear_button.setToolTip("Show every host in the dashboard again")
        self.clear_button.clicked.connect(self.clear_selection)
        self._status_text = "no hosts yet"
        self.status = QLabel(self._status_text)
        self.status.setObjectName("fleetStatus")
        self.legend = FleetLegend(colors)
        self.canvas = FleetCanvas(colors)
        self.canvas.describe = self.describe_cell
        self.canvas.cell_clicked.connect(self._cell_clicked)
        self.canvas.selection_changed.connect(self._canvas_selection_changed)
        self.scroll_area = QScrollArea()
        self.scroll_area.setObjectName("fleetScroll")
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setWidget(self.canvas)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll_area.viewport().installEventFilter(self)

        bar = QHBoxLayout()
        bar.addWidget(QLabel("Colour by"))
        bar.addWidget(self.metric_choice)
        bar.addWidget(QLabel("Group by"))
        bar.addWidget(self.group_choice)
        bar.addWidget(self.clear_button)
        bar.addWidget(self.status, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.legend)
        layout.addWidget(self.scroll_area, 1)

        assert context.hosts is not None and context.deployments is not None
        context.hosts.changed.connect(self._hosts_changed)
        context.deployments.changed.connect(self._deployments_changed)
        context.bridge.agent_event.connect(self._on_agent_event)
        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_INTERVAL_MS)
        self.timer.timeout.connect(self._on_timer)
        self.timer.start()

    # ------------------------------------------------------------------ inputs

    def set_metric(self, key: str) -> None:
        self.colour_metric = METRIC_BY_KEY[key]
        index = self.metric_choice.findData(key)
        if self.metric_choice.currentIndex() != index:
            self.metric_choice.setCurrentIndex(index)
        if self.isVisible():
            self.refresh()

    def set_grouping(self, key: str) -> None:
        if key not in dict(GROUPINGS):
            raise ValueError(f"grouping {key!r} is not one of {', '.join(dict(GROUPINGS))}")
        self.grouping = key
        index = self.group_choice.findData(key)
        if self.group_choice.currentIndex() != index:
            self.group_choice.setCurrentIndex(index)
        self._groups_dirty = True
        if self.isVisible():
            self.refresh()

    def _hosts_changed(self, _host: str) -> None:
        self._hosts_dirty = True

    def _deployments_changed(self, _deployment: str) -> None:
        """Which GPUs each engine uses (the KV-cache column) may have moved; the groups follow deployments
        only when grouped by them (a re-layout at 278 hosts is the slowest thing a refresh can do)."""
        assert self.context.deployments is not None
        self.table.set_worker_gpus(worker_placement(self.context.deployments.snapshots.values()))
        if self.grouping == "deployment":
            self._groups_dirty = True

    def _on_agent_event(self, event: AgentEvent) -> None:
        """XID alerts, counted per GPU (the agent sends `{"kind": "xid", "gpu": i, "xid": n}`)."""
        data = event.data
        if event.event != "alert" or data.get("kind") != "xid":
            return
        gpu = data.get("gpu")
        if isinstance(gpu, int) and not isinstance(gpu, bool) and 0 <= gpu < 4096:
            self.table.record_xid(event.host, gpu)

    def save_settings(self, settings: QSettings) -> None:
        settings.setValue("fleet/metric", self.colour_metric.key)
        settings.setValue("fleet/grouping", self.grouping)

    def restore_settings(self, settings: QSettings) -> None:
        metric = settings.value("fleet/metric")
        if metric in METRIC_BY_KEY:
            self.set_metric(str(metric))
        grouping = settings.value("fleet/grouping")
        if grouping in dict(GROUPINGS):
            self.set_grouping(str(grouping))

    # ------------------------------------------------------------------ refreshing

    def refresh_durations_ms(self) -> list[float]:
        """How long the last refreshes took (reading the new values and painting), oldest first."""
        return list(self._durations)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.refresh()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.scroll_area.viewport() and event.type() == QEvent.Type.Resize:
            self.canvas.set_viewport_height(
                self.scroll_area.viewport().height()
            )  # cells shrink to fit before it scrolls
        return super().eventFilter(watched, event)

    def _on_timer(self) -> None:
        if self.isVisible():
            self.refresh()

    def refresh(self) -> None:
        """Read what is new and repaint now (a hidden view does nothing: it refreshes when shown). The
        pump and the writer step aside meanwhile (core/foreground.py)."""
        if not self.isVisible():
            return
        started = time.perf_counter()
        self.refreshes += 1
        with FOREGROUND.hold():
            if self._hosts_dirty:
                self._hosts_dirty = False
                assert self.context.hosts is not None
                hosts = self.context.hosts.hosts
                self.table.set_hosts(
                    hosts,
                    {
                        name: [gpu.index for gpu in view.inventory.gpus]
                        for name, view in hosts.items()
                        if view.inventory
                    },
                )
            restructured = self.table.update() or self._groups_dirty or self._structure_drawn != self.table.structure
            if restructured:
                self._restructure()
            if self._recolor() or restructured:
                self.canvas.repaint()
        self._durations.append(1000 * (time.perf_counter() - started))

    def _restructure(self) -> None:
        self._groups_dirty = False
        self._labels = []
        self._structure_drawn = self.table.structure
        table = self.table
        if self.grouping == "deployment":
            assert self.context.deployments is not None
            groups = deployment_groups(table, self.context.deployments.snapshots.values())
        else:
            groups = host_groups(table)
        self.canvas.set_structure(groups, table.cell_host, list(table.hosts))
        chosen = [
            i for i in range(table.cells) if (table.hosts[table.cell_host[i]], int(table.cell_gpu[i])) in self._selected
        ]
        selected = np.zeros(table.cells, dtype=bool)
        selected[chosen] = True
        self.canvas.selected = selected

    def _recolor(self) -> bool:
        """The colours, legend and status line from the newest values; True when the cells' colours or a
        host's state changed (the canvas needs a paint)."""
        table = self.table
        self._values = self.colour_metric.values(table.columns())
        low, high = self.colour_metric.scale(self._values)
        metric = self.colour_metric
        rescaled = metric is not self._scaled_for and self.canvas.set_scale(scale_colors(metric))
        self._scaled_for = metric  # colours are made when the metric changes, not per refresh
        bins = color_bins(metric, self._values, low, high, len(self.canvas.colors))
        labels, self.host_state = self._host_states()
        changed = self.canvas.set_colors(bins, self.host_state, labels) or rescaled
        unit = metric.unit
        high_text = ("≥ " if metric.or_more else "") + unit.format(high)
        self.legend.set_scale(
            metric.title,
            unit.format(low),
            high_text,
            metric.legend_note,
            self.canvas.colors,
            [(at, unit.format(value)) for at, value in color_scales.band_edges(metric.colors)],
        )
        reporting = int(np.isfinite(self._values).sum())
        stale = int((self.host_state == HOST_STALE).sum())
        gone = int((self.host_state == HOST_DISCONNECTED).sum())
        text = f"{counted(table.cells, 'GPU')} on {counted(len(table.hosts), 'host')}"
        text += f"; {reporting:,} report {metric.title}" if reporting != table.cells else ""
        text += f"; {stale} stale" if stale else ""
        text += f"; {gone} disconnected" if gone else ""
        chosen = self.canvas.selected
        if chosen.any():
            hosts = len(set(table.cell_host[chosen].tolist()))
            text += f"; selected: {counted(hosts, 'host')}, {counted(int(chosen.sum()), 'GPU')}"
        if text != self._status_text:
            self._status_text = text
            self.status.setText(text)
        return changed

    def _host_states(self) -> tuple[list[str], np.ndarray]:
        """Each host's label (its name, escaped) and state: live, stale (connected, but no sample for
        STALE_AFTER_S) or disconnected (any state but connected / degraded)."""
        assert self.context.hosts is not None
        models = self.context.hosts.hosts
        now = time.time()
        ages = now - self.table.host_time
        states = np.full(len(self.table.hosts), HOST_LIVE, dtype=np.int8)
        for h, host in enumerate(self.table.hosts):
            model = models.get(host)
            state = model.state if model is not None else "connected"  # samples without a state event: a test feed
            if state not in LIVE_STATES:
                states[h] = HOST_DISCONNECTED
            elif ages[h] > STALE_AFTER_S:
                states[h] = HOST_STALE
        if len(self._labels) != len(self.table.hosts):
            self._labels = [printable(host, 60) for host in self.table.hosts]
        return self._labels, states

    # ------------------------------------------------------------------ cells

    def describe_cell(self, cell: int) -> str:
        """The tooltip of one GPU: host, index, name, every value with its unit, the host's state.
        Rich text; everything from a server is escaped."""
        table = self.table
        if not 0 <= cell < table.cells:
            return ""
        host = table.hosts[int(table.cell_host[cell])]
        gpu = int(table.cell_gpu[cell])
        assert self.context.hosts is not None
        model = self.context.hosts.hosts.get(host)
        name = ""
        if model is not None and model.inventory is not None:
            name = next((g.name or "" for g in model.inventory.gpus if g.index == gpu), "")
        raw = table.raw[cell]
        columns = table.columns()
        lines = [f"<b>{_text(host)}</b> · GPU {gpu}" + (f" · {_text(name)}" if name else "")]
        for metric in FLEET_METRICS:
            value = float(metric.values(columns.cell(cell))[0])
            shown = metric.unit.format(value) if math.isfinite(value) else "no data"
            if metric.key == "vram" and math.isfinite(value):
                shown += (
                    f" ({units.format_bytes(float(raw[COLUMN['memory_used_bytes']]))}"
                    f" of {units.format_bytes(float(raw[COLUMN['memory_total_bytes']]))})"
                )
            elif metric.key == "xid" and math.isfinite(value):
                shown += f" ({_alert_counts(columns.cell(cell))})"
            current = " ◀" if metric is self.colour_metric else ""
            lines.append(f"{html.escape(metric.title)}: {shown}{current}")
        h = int(table.cell_host[cell])
        state = int(self.host_state[h]) if h < self.host_state.shape[0] else HOST_LIVE
        age = time.time() - float(table.host_time[h])
        if state == HOST_DISCONNECTED and model is not None:
            reason = f": {_text(model.reason)}" if model.reason else ""
            lines.append(f"<b>host {_text(model.state)}{reason}</b> — the values are its last ones")
        elif state == HOST_STALE:
            lines.append(f"<b>stale: last sample {units.format_duration(age)} ago</b>")
        elif math.isfinite(age):
            lines.append(f"last sample {age:.0f} s ago")
        lines.append(
            "click: open the host (Topology; Dashboard shows it) · Ctrl+click: add or remove it · drag: pick GPUs"
        )
        return "<br>".join(lines)

    def _cell_clicked(self, cell: int) -> None:
        """A plain click: the host becomes the selection (the dashboard shows it) and is opened."""
        host = int(self.table.cell_host[cell])
        self.canvas.select_cells(np.flatnonzero(self.table.cell_host == host), add=False)
        self.host_opened.emit(self.table.hosts[host])

    # ------------------------------------------------------------------ selection

    def selection(self) -> Selection:
        """The hosts and GPU indices selected, as the dashboard filters (hosts None: nothing selected).
        GPUs None when every GPU of each selected host is selected."""
        table, chosen = self.table, self.canvas.selected
        if not chosen.any():
            return Selection()
        hosts = sorted(set(table.cell_host[chosen].tolist()))
        whole = all(chosen[table.host_first[h] : table.host_first[h + 1]].all() for h in hosts)
        gpus = None if whole else frozenset(table.cell_gpu[chosen].tolist())
        return Selection(hosts=frozenset(table.hosts[h] for h in hosts), gpus=gpus)

    def clear_selection(self) -> None:
        self.canvas.select_cells([], add=False)

    def _canvas_selection_changed(self) -> None:
        table, chosen = self.table, self.canvas.selected
        self._selected = {(table.hosts[table.cell_host[i]], int(table.cell_gpu[i])) for i in np.flatnonzero(chosen)}
        self.selection_changed.emit(self.selection())
        if self.isVisible():
            self._recolor()
