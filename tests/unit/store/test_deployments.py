"""Deployment records: the console's recorder keeps the stored profile, plan, outcome and measurements;
records list newest first and compare planned against measured."""

from __future__ import annotations

import ipaddress

import pytest
from meshdeck.core.errors import InputError
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.network import NetworkInterface, NodeNetwork
from meshdeck.launch.plan import LaunchPlan, PlannedStartup
from meshdeck.services import profiles as service
from meshdeck.services.deployments.model import DeploymentSnapshot, WorkerSnapshot
from meshdeck.store.database import Database
from meshdeck.store.deployments import compare_deployments, get_deployment, list_deployments
from meshdeck.store.events import list_events

PROFILE = """\
name: ds32-h200-2n
model: deepseek-ai/DeepSeek-V3.2
hosts: [gpu-a, gpu-b]
gpus_per_node: 8
layout: {tensor_parallel: 8, pipeline_parallel: 2}
vllm: {max_model_len: 32768}
"""
PLANNED = PlannedStartup(
    gpu_memory_bytes=141 * 1024**3,
    weights_bytes=int(45.2 * 1024**3),
    kv_cache_bytes=int(70.1 * 1024**3),
    kv_tokens=1_092_000,
    max_concurrency=33.3,
    max_model_len=32768,
)


def _node(host: str, address: str) -> NodeNetwork:
    return NodeNetwork(host, address, (NetworkInterface("ens1f0", (ipaddress.ip_interface(f"{address}/24"),)),))


@pytest.fixture
def plan(db: Database) -> LaunchPlan:
    stored = service.import_profile(db, PROFILE, "ds32.yaml")
    nodes = [_node("gpu-a", "10.0.0.1"), _node("gpu-b", "10.0.0.2")]
    return build_launch_plan(stored.profile, nodes, run_id="r1", planned=PLANNED)


def _snapshot(key: str, state: str, started: float, workers: tuple[WorkerSnapshot, ...] = ()) -> DeploymentSnapshot:
    return DeploymentSnapshot(key, "ds32-h200-2n", "vllm", state, "", workers, started)


def _run(db: Database, plan: LaunchPlan, key: str, started: float, kv_tokens: list[int]) -> None:
    recorder = service.StoreDeploymentRecorder(db)
    recorder.deployment_started(_snapshot(key, "starting", started), plan)
    recorder.deployment_event(key, "running", "ds32-h200-2n is up", {}, "running", "")
    for index, tokens in enumerate(kv_tokens):
        recorder.startup_measured(key, f"{key}.vllm-node{index}", {"weights_gib": 44.9})
        recorder.startup_measured(key, f"{key}.vllm-node{index}", {"kv_cache_tokens": tokens})
    worker = WorkerSnapshot("vllm-node0", "gpu-a", f"{key}.vllm-node0", 0, "stopped", exit_code=0)
    recorder.deployment_finished(_snapshot(key, "stopped", started, (worker,)))


def test_a_deployment_keeps_its_profile_plan_outcome_and_measurements(db: Database, plan: LaunchPlan) -> None:
    _run(db, plan, "ds32-h200-2n-1130060000-abcd", 1_764_482_400.0, [1_050_000, 1_060_000])
    record = get_deployment(db, "ds32-h200-2n-1130060000-abcd")
    assert (record.profile_name, record.profile_version, record.profile_yaml) == ("ds32-h200-2n", 1, PROFILE)
    assert [node.host for node in record.nodes] == ["gpu-a", "gpu-b"]
    head = record.nodes[0]
    assert head.argv[:3] == ("vllm", "serve", "deepseek-ai/DeepSeek-V3.2")
    assert "--tensor-parallel-size" in head.argv
    assert dict(head.env)["NCCL_SOCKET_IFNAME"] == "ens1f0"
    assert record.plan["layout"]["pipeline_parallel"] == 2
    assert record.planned is not None and record.planned["kv_cache_tokens"] == 1_092_000
    assert record.state == "stopped" and record.finished_at is not None and record.reason == ""
    assert record.workers[0]["exit_code"] == 0
    measured = record.measured["ds32-h200-2n-1130060000-abcd.vllm-node0"]
    assert measured == {"weights_gib": 44.9, "kv_cache_tokens": 1_050_000}  # later reports merged
    kinds = [(e.kind, e.subject) for e in list_events(db, deployment_id=record.id)]
    assert kinds == [("launch", record.key), ("deployment", "running"), ("stop", record.key)]


def test_deployments_list_newest_first_and_compare_planned_with_measured(db: Database, plan: LaunchPlan) -> None:
    _run(db, plan, "run-a", 1000.0, [1_050_000, 1_060_000])
    _run(db, plan, "run-b", 2000.0, [900_000])
    assert [r.key for r in list_deployments(db)] == ["run-b", "run-a"]
    assert [r.key for r in list_deployments(db, profile_name="ds32-h200-2n", limit=1)] == ["run-b"]
    rows = {row.metric: row for row in compare_deployments(db, ["run-a", "run-b"])}
    kv = rows["kv_cache_tokens"]
    assert kv.planned == {"run-a": 1_092_000.0, "run-b": 1_092_000.0}
    assert kv.measured == {"run-a": 1_050_000.0, "run-b": 900_000.0}  # the tightest engine
    assert rows["weights_gib"].planned["run-a"] == pytest.approx(45.2, abs=0.01)
    assert rows["max_concurrency"].measured == {"run-a": None, "run-b": None}
    with pytest.raises(InputError, match="no deployment 'nope' recorded"):
        compare_deployments(db, ["run-a", "nope"])


def test_a_plan_without_a_stored_profile_is_recorded_without_a_snapshot(db: Database, plan: LaunchPlan) -> None:
    service.delete_profile(db, "ds32-h200-2n")
    service.StoreDeploymentRecorder(db).deployment_started(_snapshot("adhoc", "starting", 5.0), plan)
    record = get_deployment(db, "adhoc")
    assert (record.profile_name, record.profile_version, record.profile_yaml) == (None, None, None)
    assert len(record.nodes) == 2
