"""The whole launch path on real processes: two local agents acting as two nodes, pre-flight, a
LaunchPlan, DeployService, real torchrun (gloo, CPU) — the path the GUI and `meshdeck bench` take."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from meshdeck.launch.build import parse_layout_spec
from meshdeck.services.deployments.local import LocalAgents, run_builtin_workload, workload_profile
from meshdeck.services.deployments.model import DeploymentSnapshot, worker_id
from meshdeck.services.deployments.registry import DeployService
from meshdeck.services.deployments.targets import prepare_launch
from meshdeck_agent import ifaddrs

# real torchrun on 2 shared cores: slow when other suites run at the same time, so a generous limit
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[LocalAgents]:
    with LocalAgents(2) as local:
        yield local


def cache_env(tmp_path: Path) -> dict[str, str]:
    return {"XDG_CACHE_HOME": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}


def test_each_node_sockets_on_the_interface_its_agent_routes_the_head_by(agents: LocalAgents) -> None:
    profile = workload_profile("collectives", parse_layout_spec("dp=2"), agents.hosts)
    over_lo = prepare_launch(profile, agents.fleet, addresses=dict.fromkeys(agents.hosts, "127.0.0.1"), run_id="r")
    assert {c.env_dict["NCCL_SOCKET_IFNAME"] for c in over_lo.plan.commands} == {"lo"}
    own = ifaddrs.interface_addresses()
    address, interface = next(
        ((a.split("/")[0], name) for name, held in sorted(own.items()) for a in held if name != "lo" and "." in a),
        (None, None),
    )
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    # the nodes meet at this machine's own address: the agents' route answers name the interface holding it
    prepared = prepare_launch(profile, agents.fleet, addresses=dict.fromkeys(agents.hosts, address), run_id="r")
    for command in prepared.plan.commands:
        assert command.env_dict["NCCL_SOCKET_IFNAME"] == command.env_dict["GLOO_SOCKET_IFNAME"] == interface
    assert not any("NCCL_SOCKET_IFNAME" in w for w in prepared.plan.warnings)


def test_collectives_tp2_dp2_across_two_agents(agents: LocalAgents, tmp_path: Path) -> None:
    run = run_builtin_workload(
        agents.fleet, agents.hosts, "collectives", parse_layout_spec("tp=2,dp=2"),
        args=["--max-bytes", "16384", "--iters", "2"], env=cache_env(tmp_path),
    )  # fmt: skip
    assert run.snapshot.state == "completed", run.logs
    assert run.preflight is not None and run.preflight.passed
    groups = {(row["group"], tuple(row["ranks"])) for row in run.result["results"]}
    assert groups == {("tp", (0, 1)), ("tp", (2, 3)), ("dp", (0, 2)), ("dp", (1, 3))}
    assert {row["bytes"] for row in run.result["results"]} == {1024, 2048, 4096, 8192, 16384}
    assert all(w.host in agents.hosts and w.state == "exited" for w in run.snapshot.workers)


def test_tiny_deepseek_tp2_pp2_across_two_agents_matches_one_process(agents: LocalAgents, tmp_path: Path) -> None:
    run = run_builtin_workload(
        agents.fleet, agents.hosts, "tiny-deepseek", parse_layout_spec("tp=2,pp=2"), env=cache_env(tmp_path)
    )
    assert run.snapshot.state == "completed", run.logs
    assert run.result["matches_reference"] and run.result["max_abs_diff"] < 1e-4
    assert run.result["layout"] == {"tensor_parallel": 2, "pipeline_parallel": 2, "data_parallel": 1,
                                    "expert_parallel": False}  # fmt: skip
    assert run.result["bytes_per_forward"]["tp"] > 0 and run.result["bytes_per_forward"]["pp"] > 0
    # each node's torchrun ran two ranks
    assert sum("meshdeck-workload: rank" in line for text in run.logs.values() for line in text.splitlines()) == 4


def test_tiny_deepseek_dp2_with_expert_parallel_across_two_agents(agents: LocalAgents, tmp_path: Path) -> None:
    run = run_builtin_workload(
        agents.fleet, agents.hosts, "tiny-deepseek", parse_layout_spec("dp=2,ep"), env=cache_env(tmp_path)
    )
    assert run.snapshot.state == "completed", run.logs
    assert run.result["matches_reference"]
    assert run.result["bytes_per_forward"]["ep"] > 0 and run.result["bytes_per_forward"]["tp"] == 0


def test_a_worker_killed_mid_run_is_detected_and_reported(agents: LocalAgents, tmp_path: Path) -> None:
    killed: dict[str, int] = {}

    def kill_node1(deploy: DeployService, snapshot: DeploymentSnapshot) -> None:
        listing = agents.fleet.call("local-1", "workers.list", timeout=30)["workers"]
        worker = next(w for w in listing if w["id"] == worker_id(snapshot.id, "torchrun-node1"))
        killed["pid"] = worker["pid"]
        os.kill(worker["pid"], signal.SIGKILL)

    run = run_builtin_workload(
        agents.fleet, agents.hosts, "tiny-deepseek", parse_layout_spec("dp=2,ep"),
        args=["--duration-s", "300"], env=cache_env(tmp_path), preflight=False, on_running=kill_node1,
        timeout_s=120,
    )  # fmt: skip
    assert killed, "the job never ran"
    snapshot = run.snapshot
    assert snapshot.state == "failed"
    assert snapshot.reason.startswith("torchrun-node1 on local-1 killed by SIGKILL")
    states = {w.command: w.state for w in snapshot.workers}
    assert states == {"torchrun-node0": "stopped", "torchrun-node1": "failed"}  # its peer was stopped, not left hanging
    assert run.result is None
