"""A launch on simulated agents (`--simulate`, the demo) is the launch on real ones: the same argv, env and
ready checks, so `launch --dry-run` shows what runs either way. Each simulated agent reads its node's part
from that argv, opens the ports the plan waits on, and derives startup numbers close to the planner's
prediction, which stays the app's (planned vs measured)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_fleet import InventoryFleet
from meshdeck.cli import main
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.plan import LaunchPlan
from meshdeck.services.deployments.targets import SIMULATED_VLLM_NOTE, prepare_launch
from meshdeck_agent.gpu.catalog import parse_simulate
from meshdeck_agent.protocol import ProtocolError
from meshdeck_agent.sim.engine import StandInChooser, parse_vllm_serve
from meshdeck_agent.sim.machine import SimulatedMachine
from unit.launch.launch_builders import make_node, make_profile  # tests/ is on sys.path (tests/conftest.py)

HOSTS = ["gpu-a", "gpu-b"]
ADDRESSES = {"gpu-a": "10.0.0.1", "gpu-b": "10.0.0.2"}
H200 = StandInChooser(parse_simulate("8xH200"))
VLLM = {"max_model_len": 16384, "gpu_memory_utilization": 0.85}
DP16 = {"tensor_parallel": 1, "data_parallel": 16, "expert_parallel": True}
LAYOUTS = [
    pytest.param(["gpu-a"], {"tensor_parallel": 8}, id="single-node-tp8"),
    pytest.param(["gpu-a"], {"tensor_parallel": 4, "data_parallel": 2, "expert_parallel": True}, id="single-node-dp"),
    pytest.param(HOSTS, DP16, id="dp-multi-node"),
    pytest.param(HOSTS, {"tensor_parallel": 8, "pipeline_parallel": 2}, id="multi-node-mp-pp"),
    pytest.param(HOSTS, {"tensor_parallel": 16}, id="multi-node-mp-tp16"),
]


def _inventory(host: str, simulated: bool) -> dict[str, Any]:
    wire = SimulatedMachine(parse_simulate("8xH200")).inventory()
    eth = {"name": "eth0", "kind": "ethernet", "state": "UP", "addresses": [f"{ADDRESSES[host]}/24"]}
    return {**wire, "hostname": host, "simulated": simulated, "nics": [*wire["nics"][:-1], eth]}


def _prepare(hosts: list[str], layout: dict[str, Any], *, simulated: bool, **vllm: Any):
    profile = make_profile(hosts=hosts, layout=layout, vllm={**VLLM, **vllm})
    fleet = InventoryFleet({h: _inventory(h, simulated) for h in hosts})
    return prepare_launch(profile, fleet, addresses={h: ADDRESSES[h] for h in hosts}, run_id="r")


def _sent(plan: LaunchPlan) -> list[tuple[Any, ...]]:
    """What the agents get and what the launcher waits on, per command."""
    return [(c.host, c.name, c.stage, c.argv, c.env, c.gpus, c.ready, c.metrics_url) for c in plan.commands]


@pytest.mark.parametrize(("hosts", "layout"), LAYOUTS)
def test_a_simulated_launch_sends_exactly_what_a_real_one_sends(hosts: list[str], layout: dict[str, Any]) -> None:
    simulated = _prepare(hosts, layout, simulated=True)
    real = _prepare(hosts, layout, simulated=False)
    assert simulated.simulated and not real.simulated
    assert _sent(simulated.plan) == _sent(real.plan)
    assert {**simulated.plan.dry_run(), "planned": None} == {**real.plan.dry_run(), "planned": None}
    # the app's prediction follows the release that answers: the stand-in's accounting on simulated hosts
    # (services/vllm_release.py), the newest modelled vLLM on real ones
    assert simulated.plan.planned is not None and real.plan.planned is not None
    assert simulated.plan.planned.weights_bytes == real.plan.planned.weights_bytes
    assert simulated.plan.planned.kv_cache_bytes != real.plan.planned.kv_cache_bytes


@pytest.mark.parametrize(("hosts", "layout"), LAYOUTS)
def test_each_simulated_agent_reads_its_part_from_the_argv_and_opens_the_ports_the_plan_waits_on(
    hosts: list[str], layout: dict[str, Any]
) -> None:
    plan = _prepare(hosts, layout, simulated=True).plan
    ranks_before = 0
    for command in plan.commands:
        stand_in = H200.plan_for(list(command.argv), dict(command.env), command.gpus)
        assert stand_in is not None
        assert stand_in["gpus"] == list(command.gpus)  # every GPU the launcher gave this node's part
        serve = parse_vllm_serve(list(command.argv))
        listening = {port for _address, port in serve.early_ports} | ({serve.port} if serve.port else set())
        assert {check.port for check in command.ready if check.kind == "tcp"} <= listening
        assert (stand_in["port"] is not None) == (command.metrics_url is not None)  # headless parts serve no API
        assert stand_in["data_parallel_start_rank"] == ranks_before
        assert stand_in["nnodes"] == len(hosts)
        if plan.layout_class == "dp-multi-node":
            ranks_before += stand_in["data_parallel_local"]
    assert {check.port for check in plan.serving_ready if check.kind == "tcp"} == {parse_vllm_serve(
        list(plan.commands[0].argv)).port}  # fmt: skip


@pytest.mark.parametrize(("hosts", "layout"), LAYOUTS)
def test_the_stand_ins_startup_numbers_are_close_to_the_planners_prediction(
    hosts: list[str], layout: dict[str, Any]
) -> None:
    """Two independent estimates of vLLM's startup: close, as the planner is to vLLM's published log."""
    plan = _prepare(hosts, layout, simulated=True).plan
    planned = plan.planned
    assert planned is not None
    stand_in = H200.plan_for(list(plan.commands[0].argv), dict(plan.commands[0].env), plan.commands[0].gpus)
    assert stand_in["weights_bytes"] == pytest.approx(planned.weights_bytes, rel=0.03)
    assert stand_in["kv_tokens"] == pytest.approx(planned.kv_tokens, rel=0.05)
    assert stand_in["kv_cache_bytes"] == pytest.approx(planned.kv_cache_bytes, rel=0.05)
    assert stand_in["max_model_len"] == planned.max_model_len


def test_a_ray_plan_is_built_as_for_real_agents_and_every_simulated_agent_refuses_its_parts() -> None:
    profile = make_profile(hosts=HOSTS, layout={"tensor_parallel": 8, "pipeline_parallel": 2},
                           vllm={**VLLM, "distributed_backend": "ray"})  # fmt: skip
    plan = build_launch_plan(profile, [make_node(h, ADDRESSES[h]) for h in HOSTS], run_id="r")
    assert plan.layout_class == "ray"
    for command in plan.commands:
        with pytest.raises(ProtocolError, match="Ray would find no GPUs on this simulated server"):
            H200.plan_for(list(command.argv), dict(command.env), command.gpus)


@pytest.mark.parametrize("simulated", [True, False])
def test_the_launch_command_prints_the_same_plan_and_says_when_the_hosts_are_simulated(
    capsys, monkeypatch, tmp_path: Path, simulated: bool
) -> None:
    fleet = InventoryFleet({h: _inventory(h, simulated) for h in HOSTS})
    monkeypatch.setattr("meshdeck.commands.launch.FleetService", lambda: fleet)
    monkeypatch.setattr("meshdeck.commands.launch.deploy_hosts.connect", lambda *args: None)
    monkeypatch.setattr("meshdeck.commands.launch.deploy_hosts.addresses_for", lambda hosts, db: ADDRESSES)
    launched: list[LaunchPlan] = []
    monkeypatch.setattr(
        "meshdeck.commands.launch._launch", lambda fleet, profile, prepared, *rest: launched.append(prepared.plan) or 0
    )
    path = tmp_path / "ds32.yaml"
    path.write_text(yaml.safe_dump({"name": "ds32", "model": "deepseek-ai/DeepSeek-V3.2", "hosts": HOSTS,
                                    "gpus_per_node": 8, "layout": DP16,
                                    "vllm": VLLM}))  # fmt: skip
    assert main(["--db", str(tmp_path / "m.db"), "launch", str(path), "--skip-preflight"]) == 0
    err = capsys.readouterr().err
    assert ("note: " + SIMULATED_VLLM_NOTE in err) is simulated
    assert "vllm serve deepseek-ai/DeepSeek-V3.2" in err and _sent(launched[0]) == _sent(
        _prepare(HOSTS, DP16, simulated=not simulated).plan
    )
