"""The fleet view: one cell per GPU of every host, coloured by the metric picked, stale hosts marked,
hover text escaped, a click opens the host, a selection filters the dashboard, nothing done while hidden.

Samples reach the view as they reach the console: wire samples decoded and flattened by the sample
gate's code, posted to the bridge as SamplesReceived."""

from __future__ import annotations

import copy
import math
import time

import numpy as np
import pytest
from gui_helpers import connect_hosts, shown
from meshdeck.core.foreground import FOREGROUND
from meshdeck.remote.events import AgentEvent, HostStateChanged, SamplesReceived
from meshdeck.services.deployments.events import DeploymentChanged
from meshdeck.services.deployments.model import DeploymentSnapshot, PlannedNumbers, WorkerSnapshot
from meshdeck.services.synthetic_samples import sample_batch
from meshdeck.ui.app import open_host
from meshdeck.ui.main_window import MainWindow, ViewEntry
from meshdeck.ui.views.dashboard.view import DashboardView
from meshdeck.ui.views.fleet.canvas import HOST_DISCONNECTED, HOST_LIVE, HOST_STALE
from meshdeck.ui.views.fleet.view import STALE_AFTER_S, FleetView
from meshdeck.ui.views.hosts.view import HostsView
from meshdeck.ui.views.topology import TopologyView
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QToolTip, QWidget
from wire_samples import wire_sample


def _post(context, host: str, ts: float, *, gpus: int = 8, workers: int = 0, kv: float | None = None, **gpu_values):
    """One sample of `host` at `ts` through the bridge (connecting it first, as its supervisor would);
    `gpu_values` override every GPU's metrics."""
    if host not in context.hosts.hosts:
        context.bridge.post(HostStateChanged(host, "connected"))
    sample = wire_sample(1, ts, gpus=gpus, nvlinks=1, nics=1, workers=workers)
    for gpu in sample["gpus"]:
        gpu.update(gpu_values)
    if kv is not None:
        for worker in sample["workers"]:
            worker["metrics"]["kv_cache_usage_perc"] = kv
    context.bridge.post(SamplesReceived(host, sample_batch([sample])))
    context.bridge.drain()


@pytest.fixture
def fleet(qtbot, console_context):
    view = FleetView(console_context)
    shown(qtbot, view, 1200, 800)
    return view


def _pixel(view: FleetView, cell: int) -> QColor:
    x, y, w, h = view.canvas.layout_.cell_rects[cell]
    return view.canvas.grab().toImage().pixelColor(int(x + w // 2), int(y + h // 2))


def _center(view: FleetView, cell: int) -> QPoint:
    x, y, w, h = view.canvas.layout_.cell_rects[cell]
    return QPoint(int(x + w // 2), int(y + h // 2))


def test_every_gpu_of_every_host_is_one_cell_painted_by_one_widget(fleet) -> None:
    context, now = fleet.context, time.time()
    for h in range(5):
        _post(context, f"node-{h}", now)
    _post(context, "small", now, gpus=4)
    fleet.refresh()
    assert fleet.table.cells == 5 * 8 + 4
    assert fleet.table.hosts == ["node-0", "node-1", "node-2", "node-3", "node-4", "small"]
    rects = fleet.canvas.layout_.cell_rects
    assert (rects[:, 2] > 0).all()  # every GPU placed
    assert len({(int(x), int(y)) for x, y, _, _ in rects}) == 44  # no two cells on one spot
    # no widget per cell: the canvas has only its rubber band
    assert [type(w).__name__ for w in fleet.canvas.findChildren(QWidget)] == ["QRubberBand"]
    assert "44 GPUs on 6 hosts" in fleet.status.text()


def test_the_colour_follows_the_chosen_metric(fleet) -> None:
    context, now = fleet.context, time.time()
    _post(context, "busy", now, utilization_pct=95.0, temperature_c=30.0)
    _post(context, "idle", now, utilization_pct=5.0, temperature_c=90.0)
    fleet.set_metric("utilization")
    busy, idle = fleet.table.cell_of("busy", 0), fleet.table.cell_of("idle", 0)
    colors = fleet.canvas.colors
    assert fleet.canvas.bins[busy] > fleet.canvas.bins[idle]
    assert _pixel(fleet, busy) == colors[fleet.canvas.bins[busy]]
    assert _pixel(fleet, idle) == colors[fleet.canvas.bins[idle]]
    assert fleet.legend.low_text == "0 %" and fleet.legend.high_text == "100 %"

    fleet.set_metric("temperature")  # the other way round
    assert fleet.canvas.bins[busy] < fleet.canvas.bins[idle]
    assert _pixel(fleet, idle) == colors[fleet.canvas.bins[idle]]
    assert fleet.legend.title == "Temperature" and fleet.legend.high_text.endswith("°C")


def test_a_metric_no_host_reports_is_no_data_never_zero(fleet) -> None:
    context, now = fleet.context, time.time()
    _post(context, "no-vllm", now)  # no worker: no KV-cache series at all
    _post(context, "idle-vllm", now, workers=1, kv=0.0)  # an engine whose KV cache is empty: 0 is data
    fleet.set_metric("kv_cache")
    silent, empty = fleet.table.cell_of("no-vllm", 3), fleet.table.cell_of("idle-vllm", 3)
    assert fleet.canvas.bins[silent] == -1 and fleet.canvas.bins[empty] == 0
    background = fleet.canvas.palette().color(fleet.canvas.backgroundRole().Base)
    assert _pixel(fleet, silent) == background  # an outline, not the scale's lowest colour
    assert _pixel(fleet, empty) == fleet.canvas.colors[0]
    assert "KV-cache usage (vLLM): no data" in fleet.describe_cell(silent)
    assert "KV-cache usage (vLLM): 0.0 %" in fleet.describe_cell(empty)
    assert "8 report KV-cache usage" in fleet.status.text()


def test_stale_and_disconnected_hosts_are_hatched_and_labelled(fleet, simulated_inventory, qtbot) -> None:
    context, now = fleet.context, time.time()
    connect_hosts(
        qtbot, context, {"fresh": simulated_inventory, "quiet": simulated_inventory, "gone": simulated_inventory}
    )
    _post(context, "fresh", now)
    _post(context, "quiet", now - 3 * STALE_AFTER_S)
    _post(context, "gone", now)
    context.bridge.post(HostStateChanged("gone", "disconnected", "connection reset; retrying in 5 s"))
    context.bridge.drain()
    fleet.refresh()
    hosts = fleet.table.hosts
    states = {host: int(fleet.host_state[h]) for h, host in enumerate(hosts)}
    assert states == {"fresh": HOST_LIVE, "quiet": HOST_STALE, "gone": HOST_DISCONNECTED}
    assert fleet.canvas.host_labels == hosts
    assert "1 stale; 1 disconnected" in fleet.status.text()
    tip = fleet.describe_cell(fleet.table.cell_of("gone", 0))
    assert "host disconnected: connection reset; retrying in 5 s" in tip and "last ones" in tip
    assert "stale: last sample 30 s ago" in fleet.describe_cell(fleet.table.cell_of("quiet", 0))
    # hatched: the stale block has pixels of the text colour between its cells' colours
    quiet = fleet.table.cell_of("quiet", 0)
    fresh = fleet.table.cell_of("fresh", 0)
    assert _hatch_pixels(fleet, quiet) > 0 and _hatch_pixels(fleet, fresh) == 0


def _hatch_pixels(view: FleetView, cell: int) -> int:
    """Pixels of the text colour (the hatch) inside a cell."""
    x, y, w, h = (int(v) for v in view.canvas.layout_.cell_rects[cell])
    image = view.canvas.grab().toImage()
    text = view.canvas.palette().color(view.canvas.foregroundRole().Text)
    return sum(image.pixelColor(x + i, y + j) == text for i in range(w) for j in range(h))


def test_hover_names_the_gpu_with_units_and_escapes_what_the_server_sent(
    fleet, simulated_inventory, qtbot, monkeypatch
) -> None:
    hostile = copy.deepcopy(simulated_inventory)
    hostile["gpus"][2]["name"] = "<img src=x onerror=alert(1)>\x1b[31mH200"
    context = fleet.context
    connect_hosts(qtbot, context, {"lab<b>": hostile})
    _post(context, "lab<b>", time.time(), memory_used_bytes=70 * 2**30, memory_total_bytes=140 * 2**30, power_w=512.0)
    fleet.set_metric("vram")
    cell = fleet.table.cell_of("lab<b>", 2)
    shown: list[str] = []
    monkeypatch.setattr(QToolTip, "showText", lambda _pos, text, *_args: shown.append(text))
    qtbot.mouseMove(fleet.canvas, _center(fleet, cell))
    qtbot.waitUntil(lambda: bool(shown), timeout=5000)
    tip = shown[-1]
    assert tip.startswith("<b>lab&lt;b&gt;</b> · GPU 2 · &lt;img src=x onerror=alert(1)&gt;\\x1b[31mH200")
    assert "\x1b" not in tip and "<img" not in tip
    assert "VRAM used: 50 % (70.0 GiB of 140.0 GiB) ◀" in tip
    assert "Power: 512 W" in tip


def test_a_click_opens_the_host_and_the_dashboard_shows_it(qtbot, console_context, simulated_inventory) -> None:
    context = console_context
    dashboard = DashboardView(context.live)
    fleet = FleetView(context)
    fleet.selection_changed.connect(dashboard.show_selection)
    window = MainWindow(
        context,
        [
            ViewEntry("hosts", "Hosts", HostsView(context)),
            ViewEntry("topology", "Topology", TopologyView(context)),
            ViewEntry("dashboard", "Dashboard", dashboard),
            ViewEntry("fleet", "Fleet", fleet),
        ],
    )
    qtbot.addWidget(window)
    fleet.host_opened.connect(lambda host: open_host(window, host))
    window.show()
    connect_hosts(qtbot, context, {"alpha": simulated_inventory, "beta": simulated_inventory})
    _post(context, "alpha", time.time())
    _post(context, "beta", time.time())
    window.show_view("fleet")
    qtbot.waitExposed(fleet)
    fleet.refresh()
    qtbot.mouseClick(fleet.canvas, Qt.MouseButton.LeftButton, pos=_center(fleet, fleet.table.cell_of("beta", 5)))
    assert window.current_view_key() == "topology"
    assert window.view_of(TopologyView).host.currentText() == "beta"
    assert window.view_of(HostsView).selected() == "beta"
    assert dashboard.selection.hosts == frozenset({"beta"}) and dashboard.selection.gpus is None
    assert dashboard.host_filter.currentText() == "beta (selected in Fleet)"


def test_ctrl_click_and_rubber_band_select_what_the_dashboard_shows(qtbot, fleet) -> None:
    context, now = fleet.context, time.time()
    dashboard = DashboardView(context.live)
    qtbot.addWidget(dashboard)
    fleet.selection_changed.connect(dashboard.show_selection)
    for host in ("a", "b", "c"):
        _post(context, host, now)
    fleet.refresh()
    ctrl = Qt.KeyboardModifier.ControlModifier
    for host in ("a", "c"):
        qtbot.mouseClick(fleet.canvas, Qt.MouseButton.LeftButton, ctrl, _center(fleet, fleet.table.cell_of(host, 1)))
    assert dashboard.selection.hosts == frozenset({"a", "c"}) and dashboard.selection.gpus is None
    assert dashboard.host_filter.currentText() == "2 hosts selected in Fleet"
    qtbot.mouseClick(fleet.canvas, Qt.MouseButton.LeftButton, ctrl, _center(fleet, fleet.table.cell_of("a", 1)))
    assert dashboard.selection.hosts == frozenset({"c"})

    # a rubber band over GPUs 0-1 of host b: those GPUs only
    first, last = fleet.table.cell_of("b", 0), fleet.table.cell_of("b", 1)
    start, end = _center(fleet, first), _center(fleet, last)
    qtbot.mousePress(fleet.canvas, Qt.MouseButton.LeftButton, pos=start)
    qtbot.mouseMove(fleet.canvas, end)
    qtbot.mouseRelease(fleet.canvas, Qt.MouseButton.LeftButton, pos=end)
    assert dashboard.selection.hosts == frozenset({"b"}) and dashboard.selection.gpus == frozenset({0, 1})
    assert dashboard.gpu_filter.text() == "0-1"

    fleet.clear_selection()
    assert dashboard.selection.hosts is None and dashboard.host_filter.currentText() == "All hosts"


def test_xid_alerts_are_counted_per_gpu(fleet) -> None:
    context, now = fleet.context, time.time()
    _post(context, "node", now)
    for _ in range(3):
        context.bridge.post(AgentEvent("node", "alert", {"kind": "xid", "gpu": 6, "xid": 79}))
    context.bridge.post(AgentEvent("node", "alert", {"kind": "xid", "gpu": "6; rm", "xid": 79}))  # refused
    context.bridge.drain()
    fleet.set_metric("xid")
    xid = fleet.table.columns().xid
    assert xid[fleet.table.cell_of("node", 6)] == 3 and xid[fleet.table.cell_of("node", 0)] == 0
    assert fleet.canvas.bins[fleet.table.cell_of("node", 6)] > fleet.canvas.bins[fleet.table.cell_of("node", 0)]


def _post_ecc(context, host: str, ts: float, counts: dict[int, tuple[int | None, int | None]]) -> None:
    """One sample of `host` whose GPUs report (uncorrected, corrected) volatile ECC counts: 0 unless named in
    `counts`; None is what NVML's NOT_SUPPORTED (a GPU without ECC) puts on the wire."""
    if host not in context.hosts.hosts:
        context.bridge.post(HostStateChanged(host, "connected"))
    sample = wire_sample(1, ts, gpus=8, nvlinks=1, nics=1, workers=0)
    for gpu in sample["gpus"]:
        uncorrected, corrected = counts.get(gpu["index"], (0, 0))
        gpu.update(ecc_uncorrected_volatile=uncorrected, ecc_corrected_volatile=corrected)
    context.bridge.post(SamplesReceived(host, sample_batch([sample])))
    context.bridge.drain()


def test_a_gpu_with_an_uncorrected_ecc_error_is_coloured_alerting_and_its_hover_names_it(
    fleet, simulated_inventory, qtbot, monkeypatch
) -> None:
    context, now = fleet.context, time.time()
    connect_hosts(qtbot, context, {"silent": simulated_inventory})  # connected, no sample yet
    _post_ecc(context, "node", now, {3: (1, 5)})
    _post_ecc(context, "no-ecc", now, dict.fromkeys(range(8), (None, None)))
    for _ in range(20):  # many XIDs on another GPU must not make one ECC error look healthy
        context.bridge.post(AgentEvent("node", "alert", {"kind": "xid", "gpu": 6, "xid": 13}))
    context.bridge.drain()
    fleet.set_metric("xid")
    table, canvas = fleet.table, fleet.canvas
    failing, healthy, chatty = (table.cell_of("node", g) for g in (3, 0, 6))
    top = len(canvas.colors) - 1
    assert canvas.bins[failing] == top and canvas.bins[chatty] == top and canvas.bins[healthy] == 0
    assert _pixel(fleet, failing) == canvas.colors[top] and _pixel(fleet, healthy) == canvas.colors[0]
    assert fleet.legend.title == "XID / ECC alerts"
    assert (fleet.legend.low_text, fleet.legend.high_text) == ("0", "≥ 1")
    # a GPU without ECC: its XIDs are still watched (0), its ECC counts are no data, never 0
    no_ecc = table.cell_of("no-ecc", 2)
    assert canvas.bins[no_ecc] == 0
    assert "XID / ECC alerts: 0 (XID events 0, uncorrected ECC no data, corrected ECC no data)" in (
        fleet.describe_cell(no_ecc)
    )
    assert canvas.bins[table.cell_of("silent", 0)] == -1  # nothing reported: an outline
    shown: list[str] = []
    monkeypatch.setattr(QToolTip, "showText", lambda _pos, text, *_args: shown.append(text))
    qtbot.mouseMove(fleet.canvas, _center(fleet, failing))
    qtbot.waitUntil(lambda: bool(shown), timeout=5000)
    assert "XID / ECC alerts: 1 (XID events 0, uncorrected ECC 1, corrected ECC 5) ◀" in shown[-1]


def test_a_newer_ecc_count_replaces_the_shown_one_and_a_stale_host_keeps_its_last(fleet) -> None:
    context, now = fleet.context, time.time()
    _post_ecc(context, "node", now - 2, {})
    fleet.set_metric("xid")
    cell = fleet.table.cell_of("node", 5)
    assert fleet.canvas.bins[cell] == 0
    _post_ecc(context, "node", now - 1, {5: (2, 0)})
    fleet.refresh()
    assert fleet.canvas.bins[cell] == len(fleet.canvas.colors) - 1
    assert "uncorrected ECC 2" in fleet.describe_cell(cell)
    _post_ecc(context, "node", now, {5: (None, None)})  # NVML stopped answering: no data, not the old 2
    fleet.refresh()
    assert "uncorrected ECC no data" in fleet.describe_cell(cell) and fleet.canvas.bins[cell] == 0


def test_grouped_by_deployment_each_running_deployment_has_its_gpus(fleet) -> None:
    context, now = fleet.context, time.time()
    for host in ("n1", "n2", "n3"):
        _post(context, host, now, workers=1, kv=0.5)
    worker = WorkerSnapshot("vllm-node0", "n2", "w0", 0, "running")  # the worker id its samples carry
    planned = PlannedNumbers({}, 100 * 2**30, tuple(("n2", g) for g in range(4)))
    snapshot = DeploymentSnapshot("ds32-1", "ds32", "vllm", "running", "", (worker,), now, planned=planned)
    context.bridge.post(DeploymentChanged(snapshot))
    context.bridge.drain()
    fleet.set_grouping("deployment")
    groups = fleet.canvas.groups
    assert [g.title for g in groups] == [
        "ds32 (vllm, running): 4 GPUs on 1 hosts",
        "not in a running deployment: 20 GPUs on 3 hosts",
    ]
    deployed = [fleet.table.cell_of("n2", g) for g in range(4)]
    assert groups[0].blocks[0].cells == tuple(deployed)
    # the engine's KV-cache usage shows on the GPUs its plan placed it on, not on the host's others
    kv = fleet.table.columns().kv_cache
    assert kv[deployed[0]] == pytest.approx(0.5) and math.isnan(kv[fleet.table.cell_of("n2", 6)])


def test_a_hidden_fleet_view_does_not_refresh(qtbot, fleet) -> None:
    _post(fleet.context, "node", time.time())
    fleet.hide()
    before = (fleet.refreshes, len(fleet.refresh_durations_ms()), fleet.canvas.paints)
    fleet._on_timer()
    fleet.refresh()
    assert (fleet.refreshes, len(fleet.refresh_durations_ms()), fleet.canvas.paints) == before
    fleet.show()
    qtbot.waitUntil(lambda: fleet.refreshes > before[0], timeout=5000)
    durations = fleet.refresh_durations_ms()
    assert len(durations) > before[1] and all(d > 0 for d in durations)
    assert np.isfinite(fleet.table.raw).any()


def test_a_refresh_holds_the_foreground_gate_while_it_reads_and_paints(fleet, monkeypatch) -> None:
    """The sample pump and the writer step aside meanwhile (core/foreground.py)."""
    _post(fleet.context, "node", time.time())
    held: list[tuple[str, bool]] = []
    update, paint = fleet.table.update, fleet.canvas.paintEvent

    def watched_update() -> bool:
        held.append(("update", FOREGROUND.held))
        return update()

    def watched_paint(event) -> None:  # type: ignore[no-untyped-def]
        held.append(("paint", FOREGROUND.held))
        paint(event)

    monkeypatch.setattr(fleet.table, "update", watched_update)
    monkeypatch.setattr(fleet.canvas, "paintEvent", watched_paint)
    fleet.refresh()
    assert ("update", True) in held and ("paint", True) in held
    assert not FOREGROUND.held


def _cell_pixels(view: FleetView, cell: int) -> tuple[list[int], list[int], int]:
    """A cell as painted (read back from the widget), as ARGB values: (its outermost ring of pixels, the
    ring inside it, its centre)."""
    x, y, w, h = (int(v) for v in view.canvas.layout_.cell_rects[cell])
    image = view.canvas.grab().toImage()
    outer = [image.pixel(x + i, y + j) for i in range(w) for j in range(h) if min(i, j, w - 1 - i, h - 1 - j) == 0]
    inner = [image.pixel(x + i, y + j) for i in range(w) for j in range(h) if min(i, j, w - 1 - i, h - 1 - j) == 1]
    return outer, inner, image.pixel(x + w // 2, y + h // 2)


def test_the_painted_pixels_show_each_cells_bin_no_data_as_an_outline_and_the_selection_as_a_frame(fleet) -> None:
    context, now = fleet.context, time.time()
    _post(context, "busy", now, workers=1, kv=0.9)
    _post(context, "calm", now, workers=1, kv=0.1)
    _post(context, "no-vllm", now)  # no engine: KV-cache usage is no data
    fleet.set_metric("kv_cache")
    canvas = fleet.canvas
    palette = canvas.palette()
    base, mid, highlight = (
        palette.color(role).rgba()
        for role in (palette.ColorRole.Base, palette.ColorRole.Mid, palette.ColorRole.Highlight)
    )
    colors = [color.rgba() for color in canvas.colors]
    busy, calm, silent = (fleet.table.cell_of(host, 3) for host in ("busy", "calm", "no-vllm"))
    assert canvas.bins[busy] > canvas.bins[calm] >= 0
    for cell in (busy, calm):  # filled to its edge with its bin's colour
        outer, inner, centre = _cell_pixels(fleet, cell)
        assert centre == colors[canvas.bins[cell]]
        assert set(outer) | set(inner) == {centre}

    # the colour follows the bin when the value changes
    _post(context, "calm", now + 1, workers=1, kv=0.9)
    fleet.refresh()
    assert _cell_pixels(fleet, calm)[2] == colors[canvas.bins[calm]] == colors[canvas.bins[busy]]

    # no data: a dotted outline around the background, no colour of the scale anywhere in the cell
    outer, inner, centre = _cell_pixels(fleet, silent)
    assert centre == base and set(inner) == {base}
    assert set(outer) == {base, mid} and outer.count(mid) >= len(outer) // 4
    assert not set(outer + inner) & set(colors)

    # selected: a frame of the highlight colour inside the cell's edge, the cell's colour (or none) inside it
    canvas.select_cells([busy, silent], add=False)
    for cell, fill in ((busy, colors[canvas.bins[busy]]), (silent, base)):
        outer, inner, centre = _cell_pixels(fleet, cell)
        assert set(inner) == {highlight} and outer.count(highlight) >= len(outer) * 3 // 4 and centre == fill
    outer, inner, centre = _cell_pixels(fleet, calm)  # not selected: no frame
    assert highlight not in outer + inner


def test_a_host_going_stale_redraws_its_block_only_and_the_layer_matches_a_whole_render(
    fleet, simulated_inventory, qtbot
) -> None:
    context, now = fleet.context, time.time()
    names = [f"node-{i:02d}" for i in range(8)]
    connect_hosts(qtbot, context, dict.fromkeys(names, simulated_inventory))
    for name in names:
        _post(context, name, now)
    fleet.refresh()
    canvas = fleet.canvas
    canvas.grab()  # paints: the layer is drawn whole once
    renders = canvas.hosts_layer_renders
    context.bridge.post(HostStateChanged("node-05", "disconnected", "connection reset"))
    context.bridge.drain()
    fleet.refresh()
    states = dict(zip(fleet.table.hosts, fleet.host_state.tolist(), strict=True))
    assert states["node-05"] == HOST_DISCONNECTED
    incremental = canvas.grab().toImage()
    assert canvas.hosts_layer_renders == renders  # one host of eight changed: its block only
    canvas._hosts_layer = None  # the same state drawn whole
    whole = canvas.grab().toImage()
    assert canvas.hosts_layer_renders == renders + 1
    assert incremental == whole
