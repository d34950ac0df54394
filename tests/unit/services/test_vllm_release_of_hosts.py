"""A launch's prediction follows the vLLM release its hosts report, else the newest modelled, saying why.

The agent's inventory does not carry the installed vLLM; `checks.versions` does. Preparing a launch asks
each host and plans with the release they all run (services/vllm_release.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from deploy_fleet import InventoryFleet
from meshdeck.core.vllm_releases import CUDAGRAPH_ESTIMATE_ENV, NEWEST_MODELLED
from meshdeck.remote.errors import RpcTimeout
from meshdeck.services.deployments.targets import planned_startup, prepare_launch
from meshdeck.services.vllm_release import release_from_reports
from meshdeck_agent.gpu.catalog import parse_simulate
from meshdeck_agent.sim.machine import SimulatedMachine
from meshdeck_agent.wire_inventory import Inventory
from unit.launch.launch_builders import make_profile  # tests/ is on sys.path (tests/conftest.py)

ADDRESSES = {"gpu-a": "10.0.0.1"}
VLLM = {"max_model_len": 16384, "gpu_memory_utilization": 0.85}

HOSTS = ["gpu-a"]
LAYOUT = {"tensor_parallel": 8, "pipeline_parallel": 1, "data_parallel": 1, "expert_parallel": False}


def _answer(vllm: Any) -> dict[str, Any]:
    return {"python": "3.11.7", "torch": "2.13.0", "vllm": vllm, "nccl": "2.27.3", "ray": None}


@pytest.mark.parametrize(
    ("reports", "release"),
    [
        ({"a": _answer("0.16.0"), "b": _answer("0.16.1")}, (0, 16)),
        ({"a": _answer("v0.21.1rc2.dev3+g1234")}, (0, 21)),
        ({"a": _answer("0.11.0+cpu")}, (0, 11)),
    ],
)
def test_hosts_that_agree_on_a_modelled_release_are_planned_with_it(reports, release):
    assert release_from_reports(reports) == (release, "")


@pytest.mark.parametrize(
    ("reports", "why"),
    [
        ({"a": _answer("0.16.0"), "b": _answer("0.20.0")}, "the hosts run different vLLM releases (a 0.16, b 0.20)"),
        ({"a": _answer(None)}, "a reported no vLLM version"),
        ({"a": None}, "a reported no vLLM version"),
        ({"a": _answer("0.7.3")}, "the hosts run vLLM 0.7 (0.7: releases before 0.11 can run the V0 engine"),
        ({"a": _answer("0.40.0")}, "the hosts run vLLM 0.40"),
        ({"a": _answer("banana\x1b[31m")}, "a reported vLLM version 'banana\\x1b[31m'"),
    ],
)
def test_otherwise_the_newest_modelled_release_is_used_and_the_reason_names_the_hosts(reports, why):
    release, reason = release_from_reports(reports)
    assert release == NEWEST_MODELLED
    assert reason.startswith(why) and reason.endswith(
        "the prediction follows vLLM 0.33's accounting, the newest modelled"
    )
    assert "\x1b" not in reason


def _prepare(versions: dict[str, Any]):
    wire = SimulatedMachine(parse_simulate("8xH200")).inventory()
    eth = {"name": "eth0", "kind": "ethernet", "state": "UP", "addresses": [f"{ADDRESSES['gpu-a']}/24"]}
    inventory = {**wire, "hostname": "gpu-a", "simulated": False, "nics": [*wire["nics"][:-1], eth]}
    profile = make_profile(hosts=HOSTS, layout=LAYOUT, vllm=dict(VLLM))
    fleet = InventoryFleet({"gpu-a": inventory}, versions)
    prepared = prepare_launch(profile, fleet, addresses={"gpu-a": ADDRESSES["gpu-a"]}, run_id="r")
    return profile, {"gpu-a": Inventory.from_wire(inventory)}, prepared, fleet


def test_a_launch_predicts_with_the_release_its_hosts_run():
    profile, inventories, prepared, fleet = _prepare({"gpu-a": _answer("0.16.0")})
    on_0_16, _ = planned_startup(profile, inventories, (0, 16))
    on_newest, _ = planned_startup(profile, inventories)
    assert ("gpu-a", "checks.versions") in fleet.calls
    assert prepared.plan.planned == on_0_16 != on_newest  # CUDA graphs outside the budget before 0.20
    assert prepared.planned_note == ""


def test_a_host_that_cannot_say_leaves_the_newest_modelled_release_and_a_note():
    profile, inventories, prepared, _ = _prepare({"gpu-a": RpcTimeout("gpu-a: checks.versions timed out")})
    assert prepared.plan.planned == planned_startup(profile, inventories)[0]
    assert prepared.planned_note.startswith("gpu-a reported no vLLM version")


def test_the_prediction_honours_the_profiles_cudagraph_estimate_env():
    profile, inventories, _, _ = _prepare({"gpu-a": _answer("0.22.0")})
    with_graphs, _ = planned_startup(profile, inventories, (0, 22))
    off = make_profile(hosts=HOSTS, layout=LAYOUT, vllm=dict(VLLM), env={CUDAGRAPH_ESTIMATE_ENV: "0"})
    without_graphs, _ = planned_startup(off, inventories, (0, 22))
    assert with_graphs is not None and without_graphs is not None
    assert without_graphs.kv_cache_bytes > with_graphs.kv_cache_bytes  # the graphs are no longer paid from the KV


def test_a_cudagraph_estimate_env_the_release_lacks_leaves_no_prediction_and_says_why():
    _, inventories, _, _ = _prepare({"gpu-a": _answer("0.16.0")})
    off = make_profile(hosts=HOSTS, layout=LAYOUT, vllm=dict(VLLM), env={CUDAGRAPH_ESTIMATE_ENV: "0"})
    planned, why = planned_startup(off, inventories, (0, 16))
    assert planned is None and CUDAGRAPH_ESTIMATE_ENV in why and "0.18" in why
