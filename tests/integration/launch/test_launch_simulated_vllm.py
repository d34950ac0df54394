"""A DeepSeek V3.2 vLLM launch on two simulated 8xH200 agents (the `--demo` path): pre-flight, the DP-across-
nodes plan with the planner's prediction (the plan a real launch sends), the stand-ins the agents choose for
`vllm serve` by themselves, their startup lines measured and recorded beside the prediction, and a stop in
reverse order."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from meshdeck.launch.profile import profile_from_mapping
from meshdeck.services.deployments.local import free_port
from meshdeck.services.deployments.records import StoreRecorder
from meshdeck.services.deployments.registry import DeployService
from meshdeck.services.deployments.targets import prepare_launch
from meshdeck.services.fleet import FleetService, FleetSettings
from meshdeck.services.preflight import run_preflight
from meshdeck.store.database import open_database
from meshdeck.store.deployments import compare_deployments, get_deployment
from meshdeck_agent.gpu.catalog import parse_simulate
from meshdeck_agent.sim.engine import StandInChooser

# real torchrun on 2 shared cores: slow when other suites run at the same time, so a generous limit
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
HOSTS = ("sim-a", "sim-b")


@pytest.fixture
def fleet() -> Iterator[FleetService]:
    root = Path(tempfile.mkdtemp(prefix="md-", dir="/tmp"))
    service = FleetService(FleetSettings(known_hosts=str(root / "known_hosts")))
    try:
        for host in HOSTS:
            service.add_local(host, simulate="8xH200", socket=str(root / f"{host}.sock"), state_dir=str(root / host))
        deadline = time.monotonic() + 60
        while not all(service.status(h).state == "connected" for h in HOSTS):
            assert time.monotonic() < deadline, [service.status(h) for h in HOSTS]
            time.sleep(0.1)
        yield service
    finally:
        for host in service.hosts():
            try:
                service.call(host, "agent.shutdown", timeout=15)
            except Exception as exc:  # already gone
                print(f"shutdown {host}: {exc}")
        service.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize(
    ("layout", "layout_class"),
    [
        ({"tensor_parallel": 1, "data_parallel": 16, "expert_parallel": True}, "dp-multi-node"),
        ({"tensor_parallel": 8, "pipeline_parallel": 2}, "multi-node-mp"),  # the head's master port is waited on
    ],
)
def test_v32_on_two_simulated_nodes(
    fleet: FleetService, tmp_path: Path, layout: dict[str, Any], layout_class: str
) -> None:
    profile = profile_from_mapping(
        {
            "name": "ds32-demo",
            "model": "deepseek-ai/DeepSeek-V3.2",
            "hosts": list(HOSTS),
            "gpus_per_node": 8,
            "layout": layout,
            "vllm": {"max_model_len": 16384, "gpu_memory_utilization": 0.85, "port": free_port(),
                     "data_parallel_rpc_port": free_port(), "master_port": free_port()},
        }
    )  # fmt: skip
    prepared = prepare_launch(profile, fleet, addresses=dict.fromkeys(HOSTS, "127.0.0.1"), run_id="demo")
    assert prepared.simulated and prepared.plan.layout_class == layout_class
    planned = prepared.plan.planned
    assert planned is not None and planned.kv_tokens > 0
    report = run_preflight(fleet, prepared.plan, profile, inventories=prepared.inventories)
    assert report.passed, report.failures
    assert any("simulated node" in r.reason for r in report.results if r.check == "versions")
    for command in prepared.plan.commands:  # from each simulated node's HCAs
        assert command.env_dict["NCCL_IB_HCA"].startswith("=mlx5_0:1,mlx5_1:1,")
    with open_database(tmp_path / "m.db") as db:
        deploy = DeployService(fleet, recorder=StoreRecorder(db))
        snapshot = deploy.launch(prepared.plan)
        try:
            assert snapshot.state == "running"
            deadline = time.monotonic() + 90
            while len([m for m in deploy.get(snapshot.id).measured.values() if "kv_cache_tokens" in m]) < 2:
                assert time.monotonic() < deadline, deploy.get(snapshot.id).measured
                time.sleep(0.2)
        finally:
            stopped = deploy.stop(snapshot.id, grace_s=2).snapshot
            deploy.close()
        assert stopped.state == "stopped"
        assert {w.state for w in stopped.workers} == {"stopped"}
        rows = {row.metric: row for row in compare_deployments(db, [snapshot.id])}
        assert rows["kv_cache_tokens"].planned[snapshot.id] == planned.kv_tokens
        # measured: what the agents' stand-in derived from the real argv it got, close to the app's prediction
        head = prepared.plan.commands[0]
        stand_in = StandInChooser(parse_simulate("8xH200")).plan_for(list(head.argv), dict(head.env), head.gpus)
        assert rows["kv_cache_tokens"].measured[snapshot.id] == stand_in["kv_tokens"]
        assert stand_in["kv_tokens"] == pytest.approx(planned.kv_tokens, rel=0.05)
        assert get_deployment(db, snapshot.id).state == "stopped"
