"""A real prefill/decode-disaggregated vLLM (CPU build) on two agents of this machine, watched as the console does.

One deployment for the module (two engine starts on 2 shared cores take a minute or two): the disaggregated
profile's own plan (prefill engine as kv_producer on local-0, decode engine as kv_consumer on local-1, NIXL with
a CPU buffer over TCP, vLLM's router last), pre-flight on both nodes' ports, ordered start and readiness; greedy
completions through the router; the decode engine's own counters say it computed no prompt token (the KV came
over NIXL); its answers equal an aggregated engine's (the decode engine asked directly computes every prompt
itself, with the same seeded dummy weights); the agents stored the handoff metrics; asking the decode engine
directly makes it compute prompts, which raises the KV-handoff alarm naming it; the console shows the parts, the
alarm and the handoff charts; then kill -9 of the router degrades the deployment naming the router, its agent
restarts it and it serves again, and the stop leaves no process in any part's session.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from meshdeck.core.kv_handoff import BLOCK_ALLOWANCE_TOKENS
from meshdeck.launch.profile import Disaggregated
from meshdeck.launch.vllm_flags import flag_values
from meshdeck.services.completion_load import send_completions
from meshdeck.services.pd_bench import engine_counters
from meshdeck.services.session_processes import left_after
from meshdeck.services.vllm_bench import LocalVllmDeployment

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
REQUESTS = 6
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def running(vllm_executable: str) -> Iterator[LocalVllmDeployment]:
    with LocalVllmDeployment(vllm_executable, disaggregated=True) as run:
        report = run.run_preflight()
        assert report.passed, report.failures
        run.launch()
        yield run


def parts_logs(run: LocalVllmDeployment) -> str:
    """Every part's last lines (vLLM's /metrics access lines left out), for a failure's message."""
    texts = []
    for part in run.deploy.logs(run.deployment_id, lines=200):
        kept = [line for line in part.text.splitlines() if "GET /metrics" not in line]
        texts.append(f"== {part.worker.command}\n" + "\n".join(kept[-60:]))
    return "\n".join(texts)


def charts_side_by_side(charts: list) -> Any:
    """The charts' images two by two on one white canvas (the dashboard's other charts are GPU ones: empty here)."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QPainter, QPixmap

    shots = [chart.grab() for chart in charts]
    width, height = max(s.width() for s in shots), max(s.height() for s in shots)
    canvas = QPixmap(2 * width, height * ((len(shots) + 1) // 2))
    canvas.fill(Qt.GlobalColor.white)
    painter = QPainter(canvas)
    for index, shot in enumerate(shots):
        painter.drawPixmap((index % 2) * width, (index // 2) * height, shot)
    painter.end()
    return canvas


def port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def pools_of(run: LocalVllmDeployment) -> Disaggregated:
    pools = run.profile.disaggregated
    assert pools is not None and pools.prefill.port is not None and pools.decode.port is not None
    return pools


@pytest.fixture(scope="module")
def routed(running: LocalVllmDeployment) -> dict:
    pools = pools_of(running)
    assert pools.decode.port is not None
    warm_up_errors = running.warm_up()
    assert len(warm_up_errors) < 3, (warm_up_errors, parts_logs(running))  # NIXL's first handshake: see warm_up
    before = engine_counters(pools.decode.port)
    load = running.send_load(REQUESTS, concurrency=3, max_tokens=MAX_TOKENS, keep_texts=True)
    after = engine_counters(pools.decode.port)
    assert running.wait_stored(load, generated=after.generated), "the stored samples never caught up"
    return {"load": load, "handoff": after.minus(before), "warm_up_errors": warm_up_errors}


def test_the_pools_start_in_order_with_their_roles_and_the_router_last(running: LocalVllmDeployment) -> None:
    plan, hosts = running.plan, running.agents.hosts
    assert [(c.name, c.host) for c in plan.commands] == [
        ("prefill0-vllm-node0", hosts[0]), ("decode0-vllm-node0", hosts[1]), ("router", hosts[0])]  # fmt: skip
    prefill, decode, router = plan.commands
    for command, role in ((prefill, "kv_producer"), (decode, "kv_consumer")):
        flags = flag_values(list(command.argv[3:]))
        assert f'"kv_role":"{role}"' in (flags["--kv-transfer-config"] or "")
        assert '"kv_buffer_device":"cpu"' in (flags["--kv-transfer-config"] or "")
        assert command.env_dict["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.0.1"
    assert router.stage > max(prefill.stage, decode.stage) and router.argv[0].endswith("vllm-router")
    snapshot = running.current()
    assert snapshot.state == "running", snapshot.reason
    assert {w.command: w.state for w in snapshot.workers} == {
        "prefill0-vllm-node0": "running", "decode0-vllm-node0": "running", "router": "running"}  # fmt: skip
    assert snapshot.serving_url == plan.serving_url and snapshot.alarms == ()


def test_completions_through_the_router_hand_the_prompts_kv_to_decode(
    running: LocalVllmDeployment, routed: dict
) -> None:
    load, handoff = routed["load"], routed["handoff"]
    assert (load.ok, load.failed) == (REQUESTS, 0), (load.errors, parts_logs(running))
    assert load.completion_tokens == REQUESTS * MAX_TOKENS
    # decode computed no prompt token itself: every one came over NIXL from prefill
    assert handoff.computed == 0 and handoff.transferred == load.prompt_tokens > 0
    assert handoff.nixl_bytes > 0
    # what the agents scraped and the store kept: per engine, the handoff as the dashboard charts it
    decode_host, prefill_host = running.agents.hosts[1], running.agents.hosts[0]
    stored = {(host, device): peak for host, device, peak, _ in running.stored("prompt_tokens_transferred_total")}
    assert any(host == decode_host and "decode0" in device and peak > 0 for (host, device), peak in stored.items())
    assert any(host == decode_host and peak > 0 for host, _, peak, _ in running.stored("kv_transfer_bytes_total"))
    assert any(host == prefill_host and peak > 0 for host, _, peak, _ in running.stored("prompt_tokens_computed_total"))
    assert any(
        "router" in device and peak >= REQUESTS for _, device, peak, _ in running.stored("router_requests_total")
    )
    alarms = running.current().alarms
    assert not [a for a in alarms if " computed " in a], alarms  # a working handoff raises no handoff alarm
    if not routed["warm_up_errors"]:  # a warm-up that failed on NIXL's first handshake is a failed transfer, said
        assert alarms == ()


def test_the_answers_equal_an_aggregated_engines_and_decode_computing_prompts_raises_the_alarm(
    running: LocalVllmDeployment, routed: dict
) -> None:
    pools = pools_of(running)
    direct = send_completions(f"http://127.0.0.1:{pools.decode.port}/v1", running.profile.model,
                              requests=REQUESTS, concurrency=3, max_tokens=MAX_TOKENS, keep_texts=True)  # fmt: skip
    assert direct.ok == REQUESTS and routed["load"].texts == direct.texts  # token for token, greedy
    assert not [a for a in running.current().alarms if " computed " in a]  # short prompts: one KV block each
    # prompts of many blocks asked directly: decode computes them itself, and the handoff alarm names it
    long = send_completions(f"http://127.0.0.1:{pools.decode.port}/v1", running.profile.model, requests=3,
                            concurrency=3, max_tokens=4, prompt_chars=2000)  # fmt: skip
    assert long.ok == 3 and long.prompt_tokens > 3 * BLOCK_ALLOWANCE_TOKENS * 5
    deadline = time.monotonic() + 60
    while not (computed := [a for a in running.current().alarms if " computed " in a]):
        assert time.monotonic() < deadline, "no alarm after decode computed prompts itself"
        time.sleep(0.5)
    assert computed[0].startswith("decode0-vllm-node0 computed ") and "KV handoff is not happening" in computed[0]


def test_the_console_shows_the_pools_and_the_router_as_parts_with_the_alarm_and_the_handoff_charts(
    running: LocalVllmDeployment, routed: dict, qtbot, tmp_path: Path
) -> None:
    from meshdeck.services.deployments.events import DeploymentChanged
    from meshdeck.ui.bridge import FleetBridge
    from meshdeck.ui.context import ConsoleContext
    from meshdeck.ui.jobs import JobRunner
    from meshdeck.ui.views.dashboard.view import DashboardView
    from meshdeck.ui.views.deployments.view import DeploymentsView
    from PySide6.QtCore import QSettings

    fleet = running.agents.fleet
    settings = QSettings(str(tmp_path / "console.ini"), QSettings.Format.IniFormat)
    context = ConsoleContext(fleet=fleet, db=running.db, bridge=FleetBridge(), jobs=JobRunner(), settings=settings)
    context.deploy = running.deploy  # the module's registry: the console watches it, the module stops it
    context.on_shutdown.append(running.deploy.subscribe(context.bridge.post))
    context.on_shutdown.append(fleet.subscribe(context.bridge.post))
    try:
        context.bridge.post(DeploymentChanged(running.current()))  # what the registry said before the window opened
        view = DeploymentsView(context)
        qtbot.addWidget(view)
        view.resize(1500, 800)
        view.show()
        qtbot.waitUntil(lambda: view.model.get(running.deployment_id) is not None, timeout=15000)
        view.select(running.deployment_id)
        status = view.status.text()
        assert "running" in status and "; 3 of 3 parts running" in status
        assert "ALARM: decode0-vllm-node0 computed" in status
        view.tabs.setCurrentWidget(view.workers)  # the three parts, each on its host
        dashboard = DashboardView(context.live)
        qtbot.addWidget(dashboard)
        dashboard.resize(1500, 1100)
        dashboard.show()
        running.send_load(8, concurrency=2, max_tokens=MAX_TOKENS)  # charted as it happens

        def charted(chart: str, part: str) -> bool:
            return any(part in label for label in dashboard.charts[chart].legend_labels)

        qtbot.waitUntil(lambda: dashboard.refresh() >= 0 and charted("kv_transfer", "decode0-vllm-node0")
                        and charted("latency", "prefill0-vllm-node0"), timeout=60000)  # fmt: skip
        time.sleep(3.0)
        dashboard.zoom(0.2)  # the operator's + and → keys: the last minute, where the load ran
        for _ in range(3):
            dashboard.shift(1.0)
        handoff_charts = charts_side_by_side(
            [dashboard.charts[n] for n in ("kv_cache", "tokens", "latency", "kv_transfer")]
        )
        for image, name in (
            (view.grab(), "deployments-disaggregated.png"),
            (handoff_charts, "dashboard-disaggregated.png"),
        ):
            for folder in filter(None, (str(tmp_path), os.environ.get("MESHDECK_SCREENSHOT_DIR"))):
                assert image.save(str(Path(folder) / name))
    finally:
        context.shutdown()


def test_kill_9_of_the_router_names_it_its_agent_restarts_it_and_the_stop_leaves_nothing(
    running: LocalVllmDeployment, routed: dict
) -> None:
    sessions = running.worker_pids()
    assert len(sessions) == 3
    listing = running.agents.fleet.call(running.agents.hosts[0], "workers.list", timeout=30)["workers"]
    (router,) = [w for w in listing if w["id"] == f"{running.deployment_id}.router"]
    os.kill(int(router["pid"]), signal.SIGKILL)
    deadline = time.monotonic() + 60
    while not (snapshot := running.current()).reason.startswith("router on "):
        assert time.monotonic() < deadline, snapshot
        time.sleep(0.2)
    assert snapshot.state == "degraded" and "killed by SIGKILL" in snapshot.reason, snapshot.reason
    # a part of a disaggregated deployment is restarted by its agent (on-failure, 3 times at most), alone
    deadline = time.monotonic() + 120
    while (snapshot := running.current()).state != "running":
        assert time.monotonic() < deadline, snapshot
        time.sleep(0.5)
    parts = {w.command: w for w in snapshot.workers}
    assert parts["router"].restarts == 1 and parts["decode0-vllm-node0"].restarts == 0
    router_port = pools_of(running).router.port
    deadline = time.monotonic() + 60  # its process runs; it serves once it found both engines healthy again
    while not port_open(router_port):
        assert time.monotonic() < deadline, parts_logs(running)
        time.sleep(0.2)
    again = running.send_load(2, concurrency=2, max_tokens=4)
    assert again.ok == 2, (again.errors, parts_logs(running))
    sessions += [s for s in running.worker_pids() if s not in sessions]  # the new router's session too
    assert running.stop().state == "stopped"
    assert left_after(sessions, within_s=60, keepers=running.keeper_pids()) == []
