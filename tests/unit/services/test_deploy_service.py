"""DeployService against a scripted fleet: start order, readiness, failures while starting, cancellation,
crash handling and restart policy, stop order, planned-vs-measured recording."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from deploy_fleet import FakeFleet, Recorder, wait_until
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.plan import LaunchPlan, NodeCommand, ReadyCheck
from meshdeck.services.deployments.model import worker_id
from meshdeck.services.deployments.registry import DeployService, LaunchFailed
from unit.launch.launch_builders import make_node, make_profile  # tests/ is on sys.path (tests/conftest.py)


def mp_plan() -> LaunchPlan:
    profile = make_profile(hosts=["gpu-a", "gpu-b"], layout={"tensor_parallel": 8, "pipeline_parallel": 2})
    return quick(
        build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1"), make_node("gpu-b", "10.0.0.2")], run_id="r")
    )


def torch_plan() -> LaunchPlan:
    profile = make_profile(
        engine="torch",
        hosts=["gpu-a", "gpu-b"],
        gpus_per_node=2,
        layout={"tensor_parallel": 2, "pipeline_parallel": 2},
        torch={"script": "tiny-deepseek", "master_port": 29400},
    )
    return quick(
        build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1"), make_node("gpu-b", "10.0.0.2")], run_id="r")
    )


def vllm_cluster(fleet: FakeFleet) -> None:
    """Head: master port opens at once; the API opens once the other node has joined."""
    fleet.on_start["vllm-node0"] = lambda host, worker: fleet.open_ports.add(("gpu-a", 29501))

    def join(host: str, worker: dict[str, Any]) -> None:
        time.sleep(0.05)  # the fake's behaviour: the API opens a little after the second node starts
        fleet.open_ports.add(("gpu-a", 8000))

    fleet.on_start["vllm-node1"] = join


def torch_cluster(fleet: FakeFleet) -> None:
    def node(rank: int):
        def behaviour(host: str, worker: dict[str, Any]) -> None:
            if rank == 0:
                fleet.open_ports.add(("gpu-a", 29400))
            for local in range(2):
                fleet.logs[worker["id"]] += f"meshdeck-workload: rank {rank * 2 + local}/4 running\n"

        return behaviour

    fleet.on_start["torchrun-node0"] = node(0)
    fleet.on_start["torchrun-node1"] = node(1)


@pytest.fixture
def fleet() -> FakeFleet:
    return FakeFleet()


def make_service(fleet: FakeFleet, recorder: Recorder | None = None) -> DeployService:
    return DeployService(fleet, recorder=recorder, poll_s=0.01)


def quick(plan: LaunchPlan) -> LaunchPlan:
    """The same plan with 'running for N s' checks shortened, so the tests do not sleep through them."""

    def fast(checks: tuple[ReadyCheck, ...]) -> tuple[ReadyCheck, ...]:
        return tuple(replace(c, settle_s=0.05) if c.kind == "running" else c for c in checks)

    return replace(plan, commands=tuple(replace(c, ready=fast(c.ready)) for c in plan.commands))


def test_the_head_is_ready_before_the_next_stage_starts(fleet: FakeFleet) -> None:
    vllm_cluster(fleet)
    recorder = Recorder()
    messages: list[str] = []
    snapshot = make_service(fleet, recorder).launch(mp_plan(), progress=lambda p: messages.append(p.message))
    assert snapshot.state == "running" and snapshot.serving_url == "http://10.0.0.1:8000/v1"
    assert fleet.started() == [("gpu-a", "vllm-node0"), ("gpu-b", "vllm-node1")]
    probe = next(i for i, (h, m, p) in enumerate(fleet.calls) if m == "checks.tcp_connect" and p["port"] == 29501)
    second = next(i for i, (h, m, p) in enumerate(fleet.calls) if m == "workers.start" and h == "gpu-b")
    assert probe < second  # the master port was seen open before node 1 was started
    assert any("waiting for vllm-node0: port 29501 open" in m for m in messages)
    assert messages[-1] == "up: http://10.0.0.1:8000/v1"
    assert recorder.started and recorder.events[-1][1] == "running"
    spec = next(p["spec"] for h, m, p in fleet.calls if m == "workers.start")
    assert spec["name"] == f"meshdeck:{snapshot.id}:0:vllm-node0" and spec["restart"]["policy"] == "never"


def test_a_part_dying_while_starting_fails_the_launch_with_its_log_tail_and_stops_the_rest(fleet: FakeFleet) -> None:
    vllm_cluster(fleet)

    def die(host: str, worker: dict[str, Any]) -> None:
        fleet.logs[worker["id"]] += "INFO loading\nRuntimeError: NCCL error: unhandled system error\n"
        fleet.crash(host, worker["id"], signal=None, exit_code=1)

    fleet.on_start["vllm-node1"] = die
    with pytest.raises(LaunchFailed) as excinfo:
        make_service(fleet).launch(mp_plan())
    snapshot = excinfo.value.snapshot
    assert snapshot.state == "failed"
    assert snapshot.reason.startswith("vllm-node1 on gpu-b exited with status 1 while starting")
    assert "NCCL error: unhandled system error" in snapshot.reason
    assert fleet.stopped() == [("gpu-b", "vllm-node1"), ("gpu-a", "vllm-node0")]  # reverse order


def test_a_start_the_agent_refuses_fails_the_launch(fleet: FakeFleet) -> None:
    vllm_cluster(fleet)
    fleet.fail_start.add("vllm-node1")
    with pytest.raises(LaunchFailed, match="vllm-node1 on gpu-b did not start: gpu-b: spawn failed"):
        make_service(fleet).launch(mp_plan())
    assert fleet.stopped() == [("gpu-a", "vllm-node0")]


def test_cancelling_a_launch_stops_what_was_started(fleet: FakeFleet) -> None:
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()  # the head never opens its port
    with pytest.raises(LaunchFailed) as excinfo:
        make_service(fleet).launch(mp_plan(), cancel=cancel)
    assert excinfo.value.snapshot.state == "cancelled"
    assert fleet.stopped() == [("gpu-a", "vllm-node0")]
    assert fleet.started() == [("gpu-a", "vllm-node0")]


def test_a_part_not_ready_in_time_fails_the_launch(fleet: FakeFleet) -> None:
    command = NodeCommand(
        "gpu-a", 0, "job", "head", 0, ("sleep", "99"), (), ready=(ReadyCheck("tcp", port=1, timeout_s=0.2),)
    )
    plan = LaunchPlan("p", "torch", "m", "gpu-a", "10.0.0.1", (command,), (), "torchrun")
    with pytest.raises(LaunchFailed, match=r"not ready after 0.2 s: port 1 open"):
        make_service(fleet).launch(plan)


def test_a_multi_node_vllm_crash_restarts_the_whole_deployment(fleet: FakeFleet) -> None:
    vllm_cluster(fleet)
    recorder = Recorder()
    service = make_service(fleet, recorder)
    snapshot = service.launch(mp_plan())
    fleet.crash("gpu-b", worker_id(snapshot.id, "vllm-node1"))
    wait_until(lambda: service.get(snapshot.id).whole_restarts == 1 and service.get(snapshot.id).state == "running")
    assert fleet.stopped() == [("gpu-b", "vllm-node1"), ("gpu-a", "vllm-node0")]
    assert fleet.started() == [("gpu-a", "vllm-node0"), ("gpu-b", "vllm-node1")] * 2
    kinds = [kind for _, kind, _ in recorder.events]
    assert kinds[kinds.index("worker_failed") :][:2] == ["worker_failed", "restarting"]
    assert "vllm-node1 on gpu-b killed by signal 9" in dict((k, m) for _, k, m in recorder.events)["worker_failed"]


def test_without_restarts_left_a_crash_fails_the_deployment_and_stops_the_rest(fleet: FakeFleet) -> None:
    vllm_cluster(fleet)
    recorder = Recorder()
    service = make_service(fleet, recorder)
    snapshot = service.launch(mp_plan(), whole_restarts=0)
    fleet.crash("gpu-b", worker_id(snapshot.id, "vllm-node1"))
    wait_until(lambda: service.get(snapshot.id).state == "failed")
    assert service.get(snapshot.id).reason == "vllm-node1 on gpu-b killed by signal 9"
    assert fleet.stopped() == [("gpu-a", "vllm-node0")]
    assert recorder.finished[-1].state == "failed"


def test_single_node_vllm_is_restarted_in_place_by_the_agent(fleet: FakeFleet) -> None:
    fleet.on_start["vllm-node0"] = lambda host, worker: fleet.open_ports.add(("gpu-a", 8000))
    recorder = Recorder()
    service = make_service(fleet, recorder)
    plan = build_launch_plan(make_profile(), [make_node("gpu-a", "10.0.0.1")], run_id="r")
    snapshot = service.launch(plan)
    spec = next(p["spec"] for h, m, p in fleet.calls if m == "workers.start")
    assert spec["restart"] == {"policy": "on-failure", "max": 3, "backoff_s": 5.0}
    worker = fleet.workers[("gpu-a", worker_id(snapshot.id, "vllm-node0"))]
    worker.update(state="failed", signal=9)
    fleet.emit_worker("gpu-a", worker)
    worker.update(state="restarting")
    fleet.emit_worker("gpu-a", worker)
    assert service.get(snapshot.id).state == "degraded"
    worker.update(state="running", restarts=1, signal=None)
    fleet.emit_worker("gpu-a", worker)
    wait_until(lambda: "recovered" in [k for _, k, _ in recorder.events])
    assert service.get(snapshot.id).state == "running"


def test_a_torch_job_is_up_when_every_rank_runs_and_completes_when_all_exit_0(fleet: FakeFleet) -> None:
    torch_cluster(fleet)
    service = make_service(fleet)
    snapshot = service.launch(torch_plan())
    assert snapshot.state == "running"
    fleet.finish("gpu-b", worker_id(snapshot.id, "torchrun-node1"))
    assert service.get(snapshot.id).state == "running"
    fleet.finish("gpu-a", worker_id(snapshot.id, "torchrun-node0"))
    wait_until(lambda: service.get(snapshot.id).state == "completed")


def test_rank_lines_two_processes_ran_together_on_one_line_each_count(fleet: FakeFleet) -> None:
    def node(rank: int):
        def behaviour(host: str, worker: dict[str, Any]) -> None:
            if rank == 0:
                fleet.open_ports.add(("gpu-a", 29400))
            first, second = (f"meshdeck-workload: rank {rank * 2 + local}/4 running" for local in range(2))
            fleet.logs[worker["id"]] += first + second + "\n\n"  # text, text, newline, newline: as seen in a log

        return behaviour

    fleet.on_start["torchrun-node0"] = node(0)
    fleet.on_start["torchrun-node1"] = node(1)
    assert make_service(fleet).launch(torch_plan()).state == "running"


@pytest.mark.timeout(60)
def test_a_job_that_finishes_cleanly_before_its_ready_check_passes_is_completed_not_waited_on(
    fleet: FakeFleet,
) -> None:
    def finish_at_once(host: str, worker: dict[str, Any]) -> None:
        fleet.open_ports.add(("gpu-a", 29400))
        time.sleep(0.05)  # the fake's behaviour: the job runs a moment, then ends
        fleet.finish(host, worker["id"])  # no rank line ever matched (its output went elsewhere)

    fleet.on_start["torchrun-node0"] = finish_at_once
    fleet.on_start["torchrun-node1"] = finish_at_once
    snapshot = make_service(fleet).launch(torch_plan())  # the rank-line check alone would wait 600 s
    assert snapshot.state == "completed" and snapshot.reason == "every part exited 0"


def test_a_killed_torch_rank_is_reported_and_its_peers_are_stopped(fleet: FakeFleet) -> None:
    torch_cluster(fleet)
    recorder = Recorder()
    service = make_service(fleet, recorder)
    snapshot = service.launch(torch_plan())
    fleet.crash("gpu-b", worker_id(snapshot.id, "torchrun-node1"))
    wait_until(lambda: service.get(snapshot.id).state == "failed")
    final = service.get(snapshot.id)
    assert final.reason == "torchrun-node1 on gpu-b killed by signal 9"
    assert {w.command: w.state for w in final.workers} == {"torchrun-node0": "stopped", "torchrun-node1": "failed"}
    assert ("worker_failed" in [k for _, k, _ in recorder.events]) and recorder.finished[-1].state == "failed"


def test_stop_goes_in_reverse_start_order(fleet: FakeFleet) -> None:
    torch_cluster(fleet)
    service = make_service(fleet)
    snapshot = service.launch(torch_plan())
    stopped = service.stop(snapshot.id, grace_s=1)
    assert stopped.snapshot.state == "stopped" and not stopped.failures
    assert fleet.stopped() == [("gpu-b", "torchrun-node1"), ("gpu-a", "torchrun-node0")]


def test_vllm_startup_numbers_are_recorded_beside_the_plan(fleet: FakeFleet) -> None:
    fleet.on_start["vllm-node0"] = lambda host, worker: fleet.open_ports.add(("gpu-a", 8000))
    recorder = Recorder()
    service = make_service(fleet, recorder)
    snapshot = service.launch(build_launch_plan(make_profile(), [make_node("gpu-a", "10.0.0.1")], run_id="r"))
    wid = worker_id(snapshot.id, "vllm-node0")
    fleet.emit_log("gpu-a", wid, "vllm_startup", {"weights_gib": 80.78})
    fleet.emit_log("gpu-a", wid, "vllm_startup", {"available_kv_gib": 30.52, "kv_cache_tokens": 418304})
    fleet.emit_log("gpu-a", wid, "nccl_transport", {"transport": "P2P/IPC"})
    assert service.get(snapshot.id).measured[wid] == {"weights_gib": 80.78, "available_kv_gib": 30.52,
                                                      "kv_cache_tokens": 418304}  # fmt: skip
    assert recorder.measured[-1] == (snapshot.id, wid, service.get(snapshot.id).measured[wid])


def test_parts_stopped_from_elsewhere_are_seen(fleet: FakeFleet) -> None:
    torch_cluster(fleet)
    service = make_service(fleet)
    snapshot = service.launch(torch_plan())
    for host, command in (("gpu-b", "torchrun-node1"), ("gpu-a", "torchrun-node0")):  # another CLI stops them
        worker = fleet.workers[(host, worker_id(snapshot.id, command))]
        worker.update(state="stopped", reason="stopped by request")
        fleet.emit_worker(host, worker)
        if command == "torchrun-node1":
            assert service.get(snapshot.id).state == "degraded"
    wait_until(lambda: service.get(snapshot.id).state == "stopped")
    assert service.get(snapshot.id).reason == "stopped outside this app"
