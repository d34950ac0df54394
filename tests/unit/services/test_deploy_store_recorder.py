"""Deployments land in the store: plan and nodes (without the inline workload blob), state changes and
events, outcome, and vLLM's measured startup numbers beside the prediction, under the same names."""

from __future__ import annotations

from pathlib import Path

from deploy_fleet import FakeFleet, wait_until
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.plan import PlannedStartup
from meshdeck.services.deployments.model import worker_id
from meshdeck.services.deployments.records import StoreRecorder
from meshdeck.services.deployments.registry import DeployService
from meshdeck.store.database import open_database
from meshdeck.store.deployments import compare_deployments, get_deployment
from meshdeck.store.events import list_events
from unit.launch.launch_builders import make_node, make_profile  # tests/ is on sys.path (tests/conftest.py)

GIB = 1024**3
PLANNED = PlannedStartup(int(120 * GIB), int(80.78 * GIB), int(30.52 * GIB), 418_304, 25.53, 16384)


def test_a_vllm_launch_is_recorded_with_planned_beside_measured(tmp_path: Path) -> None:
    fleet = FakeFleet()
    fleet.on_start["vllm-node0"] = lambda host, worker: fleet.open_ports.add(("gpu-a", 8000))
    profile = make_profile(vllm={"max_model_len": 16384})
    plan = build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1")], run_id="r", planned=PLANNED)
    with open_database(tmp_path / "m.db") as db:
        recorder = StoreRecorder(db, profile_name=profile.name, profile_version=3, profile_yaml="name: x\n")
        service = DeployService(fleet, recorder=recorder, poll_s=0.01)
        snapshot = service.launch(plan)
        wid = worker_id(snapshot.id, "vllm-node0")
        fleet.emit_log("gpu-a", wid, "vllm_startup", {"weights_gib": 80.78})
        fleet.emit_log("gpu-a", wid, "vllm_startup", {"available_kv_gib": 30.52, "kv_cache_tokens": 418304})
        service.stop(snapshot.id, grace_s=1)
        record = get_deployment(db, snapshot.id)
        assert record.state == "stopped" and record.finished_at is not None
        assert record.profile_version == 3 and record.nodes[0].argv == plan.commands[0].argv
        assert record.measured[wid] == {"weights_gib": 80.78, "available_kv_gib": 30.52, "kv_cache_tokens": 418304}
        rows = {row.metric: row for row in compare_deployments(db, [snapshot.id])}
        assert rows["kv_cache_tokens"].planned[snapshot.id] == 418304
        assert rows["kv_cache_tokens"].measured[snapshot.id] == 418304
        assert rows["weights_gib"].planned[snapshot.id] == 80.78
        kinds = [e.subject for e in list_events(db) if e.kind == "deployment"]
        assert "running" in kinds and "stopped" in kinds


def test_a_torch_launch_stores_no_workload_blob_and_its_failure(tmp_path: Path) -> None:
    fleet = FakeFleet()

    def node(rank: int):
        def behaviour(host, worker):
            if rank == 0:
                fleet.open_ports.add(("gpu-a", 29500))
            fleet.logs[worker["id"]] += f"meshdeck-workload: rank {rank}/2 running\n"

        return behaviour

    fleet.on_start["torchrun-node0"], fleet.on_start["torchrun-node1"] = node(0), node(1)
    profile = make_profile(engine="torch", hosts=["gpu-a", "gpu-b"], gpus_per_node=1, layout={"data_parallel": 2,
                           "tensor_parallel": 1}, torch={"script": "collectives"})  # fmt: skip
    plan = build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1"), make_node("gpu-b", "10.0.0.2")], run_id="r")
    with open_database(tmp_path / "m.db") as db:
        service = DeployService(fleet, recorder=StoreRecorder(db), poll_s=0.01)
        snapshot = service.launch(plan)
        fleet.crash("gpu-b", worker_id(snapshot.id, "torchrun-node1"))
        wait_until(lambda: get_deployment(db, snapshot.id).state == "failed")
        record = get_deployment(db, snapshot.id)
        assert record.reason == "torchrun-node1 on gpu-b killed by signal 9"
        env = dict(record.nodes[0].env)
        assert env["MESHDECK_WORKLOAD_BUNDLE"].startswith("<inline workload: collectives.py sha256:")
        assert len(str(record.plan)) < 20_000
        assert {w["command"]: w["state"] for w in record.workers} == {"torchrun-node0": "stopped",
                                                                      "torchrun-node1": "failed"}  # fmt: skip
