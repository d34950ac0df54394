"""Deployments: profile -> pre-flight -> launch -> stop, on the demo cluster's two real (simulated-GPU) agents."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from meshdeck.core.plan_request import PlanRequest
from meshdeck.core.planner import plan
from meshdeck.services import profiles as profile_service
from meshdeck.services.catalog import load_gpu_catalog, load_model
from meshdeck.services.cluster import cluster_from_inventories
from meshdeck.services.demo import DEMO_HOSTS, DemoCluster, choose_demo_layout, demo_vllm_profile
from meshdeck.services.deployments.events import DeploymentChanged
from meshdeck.services.deployments.model import DeploymentSnapshot, WorkerSnapshot
from meshdeck.services.deployments.registry import DeployService
from meshdeck.services.inventory import fetch_inventory
from meshdeck.services.plan_profiles import profile_mappings
from meshdeck.ui.views.deployments.panels import PlannedPanel
from meshdeck.ui.views.deployments.status import NOTHING_SELECTED, status_line
from meshdeck.ui.views.deployments.view import DeploymentsView
from meshdeck_agent.wire_inventory import Inventory


@pytest.fixture
def demo_context(console_context, caplog):
    demo = DemoCluster.start(interval_s=0.5)
    console_context.fleet, console_context.db, console_context.simulated = demo.fleet, demo.db, True
    console_context.on_shutdown.append(demo.shutdown)
    console_context.use_deploy(DeployService(demo.fleet))
    console_context.on_shutdown.append(demo.fleet.subscribe(console_context.bridge.post))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(demo.fleet.status(h).state != "connected" for h in DEMO_HOSTS):
        time.sleep(0.2)
    assert all(demo.fleet.status(h).state == "connected" for h in DEMO_HOSTS)
    yield console_context
    console_context.shutdown()  # the demo's shutdown must also end what its agents were running
    leftovers = [
        p.pid for p in psutil.process_iter(["cmdline"]) if str(demo.folder) in " ".join(p.info["cmdline"] or [])
    ]
    assert leftovers == [], "the demo left processes running"
    assert not [r for r in caplog.records if "leftover" in r.getMessage()], "stopping needed the last-resort sweep"


def _demo_profile(context) -> str:
    inventories = {h: fetch_inventory(context.fleet, h, 30) for h in DEMO_HOSTS}
    cluster = cluster_from_inventories(inventories, list(DEMO_HOSTS), load_gpu_catalog()).cluster
    result = plan(PlanRequest(model=load_model("deepseek-v3.2"), cluster=cluster, max_model_len=32768))
    layout = choose_demo_layout(result, 2)
    mapping = profile_mappings(layout, result, list(DEMO_HOSTS), "x", "deepseek-ai/DeepSeek-V3.2")[0]
    profile = demo_vllm_profile(mapping)
    profile_service.save_profile(context.db, profile)
    return profile.name


def test_the_demo_launch_predicts_on_the_catalog_h200_the_planner_view_used(simulated_inventory) -> None:
    """What the simulated vLLM fakes and the planned-vs-measured table compares against is the planner's
    row for the chosen layout, planned on H200-SXM-141GB (not a GPU known by its memory alone)."""
    from meshdeck.services.deployments.targets import planned_startup
    from meshdeck.services.vllm_release import vllm_release_for_hosts

    inventories = dict.fromkeys(DEMO_HOSTS, Inventory.from_wire(simulated_inventory))
    cluster = cluster_from_inventories(inventories, list(DEMO_HOSTS), load_gpu_catalog()).cluster
    assert cluster.gpu.name == "H200-SXM-141GB" and not cluster.gpu.assumed
    release = vllm_release_for_hosts(inventories, list(DEMO_HOSTS))  # the agents' stand-in: vLLM 0.11's accounting
    result = plan(PlanRequest(model=load_model("deepseek-v3.2"), cluster=cluster, vllm_version=release))
    layout = choose_demo_layout(result, len(DEMO_HOSTS))
    mapping = profile_mappings(layout, result, list(DEMO_HOSTS), "x", "deepseek-ai/DeepSeek-V3.2")[0]

    planned, note = planned_startup(demo_vllm_profile(mapping), inventories)

    assert planned is not None, note
    planner_row = (
        layout.weights_bytes_per_gpu,
        layout.kv_cache_bytes_per_gpu,
        layout.kv_tokens_per_replica,
        layout.max_concurrency,
    )
    assert (planned.weights_bytes, planned.kv_cache_bytes, planned.kv_tokens, planned.max_concurrency) == (planner_row)
    unnamed = {**simulated_inventory, "gpus": [{**g, "name": "Mystery X1"} for g in simulated_inventory["gpus"]]}
    by_memory_alone, _ = planned_startup(
        demo_vllm_profile(mapping), dict.fromkeys(DEMO_HOSTS, Inventory.from_wire(unnamed))
    )
    assert by_memory_alone is not None and by_memory_alone.kv_cache_bytes != planned.kv_cache_bytes  # it tells


@pytest.mark.slow
def test_preflight_launch_and_stop_the_demo_deployment(qtbot, demo_context) -> None:
    name = _demo_profile(demo_context)
    view = DeploymentsView(demo_context)
    qtbot.addWidget(view)
    view.show()
    qtbot.waitUntil(lambda: view.profile.currentText() == name, timeout=30000)

    view.preflight_button.click()
    qtbot.waitUntil(lambda: view.preflight is not None, timeout=120000)
    checks = {view.preflight_table.item(r, 0).text() for r in range(view.preflight_table.rowCount())}
    assert {"ports free", "clocks"} <= checks
    assert view.prepared is not None and view.prepared.simulated
    assert view.preflight.passed, [r.reason for r in view.preflight.failures]

    planned = []
    demo_context.deployments.planned_memory.connect(planned.append)
    with qtbot.waitSignal(view.launched, timeout=240000) as launched:
        view.launch_button.click()
    snapshot = launched.args[0]
    assert snapshot.state == "running" and snapshot.name == name
    assert f"pre-flight of launch {snapshot.id}" in view.preflight_caption.text()  # the launch ran its own
    qtbot.waitUntil(lambda: view.workers.table.rowCount() == len(snapshot.workers), timeout=30000)
    assert {view.workers.table.item(r, 3).text() for r in range(view.workers.table.rowCount())} == {"running"}
    assert view.stop_button.isEnabled()
    qtbot.waitUntil(lambda: bool(planned) and bool(planned[-1]), timeout=30000)
    hosts = {host for host, _gpu in planned[-1]}
    assert hosts == set(DEMO_HOSTS)
    assert view.planned.table.item(0, 1).text() != "—"  # the prediction the launch carried
    qtbot.waitUntil(lambda: view.planned.table.item(0, 2).text() != "—", timeout=60000)  # vLLM's startup line

    # the case: a second launch of the same profile while the first holds the GPUs and ports. The first
    # launch's job may still be finishing after `launched` (on a loaded machine it was, and the click went nowhere):
    # wait for it, so the click starts a second job and `second` is that one
    first = demo_context.jobs.running("launch")
    qtbot.waitUntil(
        lambda: demo_context.jobs.running("launch") is None and view.launch_button.isEnabled(), timeout=60000
    )
    view.launch_button.click()
    second = demo_context.jobs.running("launch")
    assert second is not None and second is not first
    qtbot.waitUntil(lambda: second.has_ended, timeout=240000)
    assert view.blocked is not None, view.message.text()
    failed = {r.check for r in view.blocked.report.failures}
    assert failed & {"GPU memory", "ports free"}, failed
    assert [d.id for d in demo_context.deploy.list()] == [snapshot.id]  # nothing of the second was started
    view.select(snapshot.id)

    view.tabs.setCurrentWidget(view.logs)
    qtbot.waitUntil(lambda: "KV cache" in view.logs.text.toPlainText(), timeout=30000)
    view.logs.search.setText("KV cache")
    assert view.logs.highlight() >= 1

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    def confirm() -> None:  # Stop asks first (tests/gui/test_deployments_preflight_and_stop.py)
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, confirm)
            return
        next(b for b in box.buttons() if b.text().replace("&", "") == f"Stop {snapshot.id}").click()

    QTimer.singleShot(0, confirm)
    view.stop_button.click()
    qtbot.waitUntil(lambda: demo_context.deploy.get(snapshot.id).state == "stopped", timeout=120000)
    qtbot.waitUntil(lambda: not view.stop_button.isEnabled(), timeout=30000)


def test_planned_vs_measured_uses_the_tightest_worker(qtbot) -> None:
    panel = PlannedPanel()
    qtbot.addWidget(panel)
    panel.set_numbers(
        {"weights_gib": 58.7, "available_kv_gib": 53.8, "kv_cache_tokens": 737_088, "max_concurrency": 4.5},
        {
            "w0": {"weights_gib": 58.9, "kv_cache_tokens": 740_000},
            "w1": {"weights_gib": 59.1, "kv_cache_tokens": 720_000},
        },
    )
    rows = {panel.table.item(r, 0).text(): [panel.table.item(r, c).text() for c in (1, 2, 3)] for r in range(4)}
    assert rows["weights per GPU (GiB)"] == ["58.70", "58.90", "+0.3 %"]
    assert rows["KV tokens per DP engine"][1] == "720,000"
    assert rows["max concurrency at max_model_len"][1:] == ["—", "—"]
    assert panel.table.horizontalHeaderItem(2).text() == "measured" and "vLLM printed" in panel.note.text()


def test_planned_vs_measured_on_simulated_hosts_labels_the_measured_numbers_simulated(qtbot) -> None:
    panel = PlannedPanel()
    qtbot.addWidget(panel)
    panel.set_numbers({"kv_cache_tokens": 737_088}, {"w0": {"kv_cache_tokens": 740_000}}, simulated=True)
    assert panel.table.horizontalHeaderItem(2).text() == "measured (simulated)"
    assert "simulated vLLM" in panel.note.text() and "estimate" in panel.note.text()


@pytest.mark.slow
def test_a_deployment_launched_elsewhere_is_found_on_the_agents_and_can_be_stopped(qtbot, demo_context) -> None:
    from meshdeck.services.deployments.targets import LOCAL_ADDRESS, prepare_launch

    name = _demo_profile(demo_context)
    profile = profile_service.get_profile(demo_context.db, name).profile
    elsewhere = DeployService(demo_context.fleet)  # e.g. `meshdeck launch`, or this console before a restart
    try:
        prepared = prepare_launch(
            profile, demo_context.fleet, addresses=dict.fromkeys(DEMO_HOSTS, LOCAL_ADDRESS), run_id="elsewhere"
        )
        launched = elsewhere.launch(prepared.plan)
    finally:
        elsewhere.close()
    view = DeploymentsView(demo_context)
    qtbot.addWidget(view)
    view.show()
    # adopted from its workers' events as they started (a console started later surveys each host it connects)
    qtbot.waitUntil(lambda: view.list.rowCount() == 1, timeout=30000)
    assert view.list.item(0, 0).text() == launched.id
    assert "found on the agents" in view.list.item(0, 3).text()
    view.list.selectRow(0)
    assert view.stop_button.isEnabled()
    view.stop(launched.id)

    def stopped() -> bool:
        states = [
            w["state"]
            for host in DEMO_HOSTS
            for w in demo_context.fleet.call(host, "workers.list", timeout=30)["workers"]
            if str(w.get("name", "")).startswith(f"meshdeck:{launched.id}:")
        ]
        return bool(states) and all(state in ("stopped", "exited", "failed") for state in states)

    qtbot.waitUntil(stopped, timeout=120000)


NCCL_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agent"  # see its SOURCES.md


def test_nccl_transports_per_rank_from_recorded_nccl_debug_lines(qtbot, console_context) -> None:
    """Recorded NCCL_DEBUG=INFO lines (vLLM + Ray, 2-node DeepSeek-R1, aibrix issue 758; and a
    2-node socket/SHM run, NCCL issue 690), parsed by the agent, become one row per rank and transport."""
    from meshdeck.remote.events import AgentEvent
    from meshdeck_agent.logparse import parse_line

    view = DeploymentsView(console_context)
    qtbot.addWidget(view)
    view.show()
    view.tabs.setCurrentWidget(view.nccl)
    view.select("dep-1")
    for fixture, worker in (
        ("nccl_info_vllm-ray-2node_deepseek-r1_aibrix758_head-p2p-ipc_excerpt.txt", "dep-1.vllm-node0"),
        ("nccl_info_2node_socket_shm_nccl-issue690_excerpt.txt", "dep-1.vllm-node1"),
    ):
        for line in (NCCL_FIXTURES / fixture).read_text().splitlines():
            parsed = parse_line(line)
            if parsed is not None:
                console_context.bridge.post(AgentEvent("demo-a", "log", {"worker": worker, **parsed}))
    qtbot.waitUntil(lambda: view.nccl.table.rowCount() >= 2, timeout=30000)
    rows = [[view.nccl.table.item(r, c).text() for c in range(6)] for r in range(view.nccl.table.rowCount())]
    head = [r for r in rows if r[0] == "dep-1.vllm-node0" and r[1] == "0"]
    assert head and head[0][2] == "P2P/IPC" and set(head[0][3].split(", ")) >= {"1", "7"}
    transports = {r[2] for r in rows}
    assert {"P2P/IPC", "SHM", "NET/Socket"} <= transports


class _Deployments:
    """Stands in for the registry's events: snapshots the test changes at will, each change delivered to the
    console as the registry delivers it (a DeploymentChanged through the bridge)."""

    def __init__(self, context, *snapshots: DeploymentSnapshot) -> None:
        self.context = context
        self.snapshots: dict[str, DeploymentSnapshot] = {}
        for snapshot in snapshots:
            self.publish(snapshot)

    def publish(self, snapshot: DeploymentSnapshot) -> None:
        self.snapshots[snapshot.id] = snapshot
        self.context.bridge.post(DeploymentChanged(snapshot))
        self.context.bridge.drain()  # what the bridge's next tick does

    def set_state(self, deployment_id: str, state: str, reason: str = "", worker_state: str | None = None) -> None:
        old = self.snapshots[deployment_id]
        workers = tuple(replace(w, state=worker_state or w.state) for w in old.workers)
        self.publish(replace(old, state=state, reason=reason, workers=workers))


def _snapshot(deployment_id: str, started_at: float, engine: str = "torch") -> DeploymentSnapshot:
    command = "torchrun-node0" if engine == "torch" else "vllm-node0"
    worker = WorkerSnapshot(command, "demo-a", f"{deployment_id}.{command}", 0, "running")
    return DeploymentSnapshot(
        deployment_id, deployment_id.rsplit("-", 2)[0], engine, "running", "", (worker,), started_at
    )


def _shown(view: DeploymentsView) -> tuple[str, str, str]:
    """(the highlighted row's deployment, its state column, the state line)."""
    (row,) = [index.row() for index in view.list.selectionModel().selectedRows()]
    return view.list.item(row, 0).text(), view.list.item(row, 2).text(), view.status.text()


def test_the_state_line_follows_the_selected_deployment_after_its_launch_message(qtbot, console_context) -> None:
    tiny = _snapshot("demo-tiny-deepseek-1130073111-8da8", 200.0)
    deployments = _Deployments(console_context, tiny)
    view = DeploymentsView(console_context)
    qtbot.addWidget(view)
    view.show()
    assert view.status.text() == NOTHING_SELECTED

    view._launched(tiny)  # what a finished launch job delivers
    assert _shown(view) == (tiny.id, "running", f"{tiny.id}: running; 1 of 1 part running")
    assert "came up" in view.message.text()

    deployments.set_state(tiny.id, "completed", "every part exited 0", worker_state="exited")
    assert _shown(view) == (tiny.id, "completed", f"{tiny.id}: completed — every part exited 0")
    assert not view.stop_button.isEnabled()


def test_the_highlighted_row_stays_on_the_selected_deployment_when_a_newer_one_arrives(qtbot, console_context) -> None:
    vllm = _snapshot("demo-deepseek-v3-2-1130073102-c8b0", 100.0, engine="vllm")
    deployments = _Deployments(console_context, vllm)
    view = DeploymentsView(console_context)
    qtbot.addWidget(view)
    view.show()
    view.select(vllm.id)
    assert _shown(view)[0] == vllm.id

    tiny = _snapshot("demo-tiny-deepseek-1130073111-8da8", 200.0)  # newer: listed first, above the selected row
    deployments.publish(tiny)
    deployments.set_state(vllm.id, "degraded", "vllm-node0 on demo-a exited with status 1", "failed")

    assert [view.list.item(r, 0).text() for r in range(2)] == [tiny.id, vllm.id]
    selected, state, line = _shown(view)
    assert (selected, state) == (vllm.id, "degraded")
    assert line.startswith(f"{vllm.id}: degraded — vllm-node0 on demo-a exited with status 1; 0 of 1")
    assert view.workers.table.item(0, 3).text() == "failed"  # the worker table shows the same deployment


def test_status_line_says_where_it_serves_and_what_is_simulated_or_found() -> None:
    snapshot = replace(_snapshot("d-1130073102-c8b0", 1.0, engine="vllm"), serving_url="http://127.0.0.1:8000/v1")
    line = status_line(snapshot, simulated=True, found=True)
    assert line == (
        "d-1130073102-c8b0: running at http://127.0.0.1:8000/v1; 1 of 1 part running "
        "(simulated vLLM, found on the agents)"
    )
    assert "at http" not in status_line(replace(snapshot, state="stopped"))


def test_a_stored_profile_launches_with_its_secret_from_the_keyring(
    qtbot, console_context, tmp_path, memory_keyring, monkeypatch
) -> None:
    """The console's launch reads the value the database does not hold back from the OS keyring."""
    from meshdeck.store.database import open_database
    from meshdeck.ui.views.deployments import view as deployments_module

    console_context.db = open_database(tmp_path / "console.sqlite")
    console_context.on_shutdown.append(console_context.db.close)
    console_context.fleet = object()  # never called: the two steps that would ask it are stood in for below
    text = "name: p\nmodel: m\nhosts: [a]\ngpus_per_node: 1\nenv: {HF_TOKEN: hf_secret, HF_HOME: /data}\n"
    profile_service.import_profile(console_context.db, text, "p.yaml")
    monkeypatch.setattr(deployments_module.deploy_hosts, "fleet_addresses", lambda fleet, hosts, db: {"a": "a"})
    monkeypatch.setattr(deployments_module, "prepare_launch", lambda profile, fleet, **_: profile)
    view = DeploymentsView(console_context)
    qtbot.addWidget(view)
    profile, prepared = view._prepare("p", "p-1")
    assert profile.env == prepared.env == {"HF_TOKEN": "hf_secret", "HF_HOME": "/data"}


def _torch_job_registry(console_context):
    """A registry on a scripted fleet, wired to the console as the app wires it, with one running torch job
    of two parts (their logs say so)."""
    from deploy_fleet import FakeFleet
    from meshdeck.launch.plan import LaunchPlan, NodeCommand, ReadyCheck

    fleet = FakeFleet()
    registry = DeployService(fleet, poll_s=0.01, log_poll_s=0.01)
    console_context.use_deploy(registry)
    ready = (ReadyCheck("running"),)
    commands = tuple(
        NodeCommand(host, rank, f"torchrun-node{rank}", "worker", rank, ("torchrun",), (), ready=ready)
        for rank, host in enumerate(("demo-a", "demo-b"))
    )
    snapshot = registry.launch(LaunchPlan("job", "torch", "m", "demo-a", "127.0.0.1", commands, (), "torchrun"))
    for command in commands:
        fleet.logs[f"{snapshot.id}.{command.name}"] = f"{command.name}: rank running\n"
    console_context.bridge.drain()
    return fleet, registry, snapshot


def _row_state(view: DeploymentsView, deployment_id: str) -> str:
    (row,) = [r for r in range(view.list.rowCount()) if view.list.item(r, 0).text() == deployment_id]
    return view.list.item(row, 2).text()


def test_a_visible_view_shows_a_change_as_soon_as_the_bridge_delivers_it_and_runs_no_timer(
    qtbot, console_context
) -> None:
    from PySide6.QtCore import QTimer

    fleet, _registry, snapshot = _torch_job_registry(console_context)
    view = DeploymentsView(console_context)
    qtbot.addWidget(view)
    view.show()
    view.select(snapshot.id)
    assert _row_state(view, snapshot.id) == "running"
    assert not [timer for timer in view.findChildren(QTimer) if timer.isActive()]  # nothing polls

    fleet.finish("demo-b", f"{snapshot.id}.torchrun-node1")
    fleet.finish("demo-a", f"{snapshot.id}.torchrun-node0")  # the registry publishes as the events come
    with qtbot.waitSignal(console_context.deployments.changed, timeout=5000):
        console_context.bridge.drain()  # the bridge's next tick; nothing of the view's waits for one

    assert _row_state(view, snapshot.id) == "completed"
    assert view.status.text() == f"{snapshot.id}: completed — every part exited 0"
    assert {view.workers.table.item(r, 3).text() for r in range(2)} == {"exited"}
    assert not view.stop_button.isEnabled()


def test_a_hidden_view_makes_no_call_and_draws_nothing_then_catches_up_when_shown(qtbot, console_context) -> None:
    fleet, registry, snapshot = _torch_job_registry(console_context)
    view = DeploymentsView(console_context)
    qtbot.addWidget(view)
    view.show()
    view.select(snapshot.id)
    view.tabs.setCurrentWidget(view.logs)  # the log tab shown with Follow on: its log is watched
    qtbot.waitUntil(lambda: "torchrun-node0: rank running" in view.logs.text.toPlainText(), timeout=10000)
    assert registry.watched_logs() == [(snapshot.id, "torchrun-node0")]

    view.hide()
    assert registry.watched_logs() == []  # nothing is read for a hidden view
    calls, redraws = len(fleet.calls), view.redraws
    drawn: list[str] = []
    for name in ("_draw_list", "_draw_row", "_draw_selected"):
        original = getattr(view, name)
        setattr(view, name, lambda *args, _name=name, _original=original: drawn.append(_name) or _original(*args))
    fleet.logs[f"{snapshot.id}.torchrun-node0"] += "more output\n"
    fleet.finish("demo-b", f"{snapshot.id}.torchrun-node1")
    fleet.finish("demo-a", f"{snapshot.id}.torchrun-node0")
    console_context.bridge.drain()

    assert console_context.deployments.get(snapshot.id).state == "completed"  # the console's model follows...
    assert _row_state(view, snapshot.id) == "running" and drawn == [] and view.redraws == redraws  # ...not the view
    assert fleet.calls[calls:] == [] and console_context.jobs.running(f"stop {snapshot.id}") is None

    view.show()  # catches up at once from the model, and watches the log again
    assert _row_state(view, snapshot.id) == "completed" and view.redraws == redraws + 1
    qtbot.waitUntil(lambda: "more output" in view.logs.text.toPlainText(), timeout=10000)


def test_the_dashboards_planned_memory_follows_the_deployments_whichever_view_is_shown(console_context) -> None:
    from meshdeck.services.deployments.model import PlannedNumbers

    planned = PlannedNumbers({"kv_cache_tokens": 1000.0}, 100.0, (("demo-a", 0), ("demo-a", 1)))
    running = replace(_snapshot("d-1130073102-c8b0", 1.0, engine="vllm"), planned=planned)
    lines: list[dict] = []
    console_context.deployments.planned_memory.connect(lines.append)
    deployments = _Deployments(console_context, running)
    assert lines == [{("demo-a", 0): 100.0, ("demo-a", 1): 100.0}]
    deployments.set_state(running.id, "stopped")
    assert lines[-1] == {}
