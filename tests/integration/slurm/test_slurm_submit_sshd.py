"""meshdeck submitting to a real Slurm 22.05 through its login node: a local sshd on 127.0.0.1 (the cluster's
SLURM_CONF reaches its sessions by sshd's SetEnv), the real agent uploaded there, Slurm's commands run by it.

The job's nodes run their own agents (started by the batch script, reached with the login node as a jump host and
`attach --no-start`); states come from squeue while the job is there and from the completion record after; stop
is scancel and leaves no process carrying the cluster's SLURM_CONF. A job asking 3 of the 2 nodes stays PENDING
with Slurm's reason; one over its time limit ends TIMEOUT; a bad partition is refused at submit in Slurm's words.
"""

from __future__ import annotations

import getpass
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from integration.remote.remote_agent_fixtures import stop_agent
from meshdeck.core.errors import InputError
from meshdeck.launch.build import parse_layout_spec
from meshdeck.launch.profile import Profile
from meshdeck.launch.slurm_batch import job_agent_dir
from meshdeck.launch.slurm_options import slurm_options
from meshdeck.services.deployments.local import free_port, workload_profile
from meshdeck.services.fleet import FleetService
from meshdeck.services.history import HistoryRecorder
from meshdeck.services.slurm import SlurmClient, SlurmCommandFailed, cluster_info
from meshdeck.services.slurm_bench import slurm_vllm_round
from meshdeck.services.slurm_jobs import SlurmDeployments, ssh_login
from meshdeck.services.slurm_local import SlurmCluster, processes_of
from meshdeck.services.vllm_local import VllmNotInstalled, find_vllm_executable
from meshdeck.store.database import Database, open_database
from meshdeck.store.hosts import HostRecord, add_host
from meshdeck.store.writer import SampleWriter
from slurm_fixtures import NODES_BEYOND_PARTITION, start_login_node
from sshd import SshdFactory

pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.timeout(600)]
LOGIN = "hpc"


@dataclass
class Login:
    fleet: FleetService
    db: Database
    jobs: SlurmDeployments
    cluster: SlurmCluster
    root: Path
    writer: SampleWriter


@pytest.fixture(scope="module")
def login(
    slurm_cluster: SlurmCluster,
    sshd_factory: SshdFactory,
    ssh_client_key: Path,
    agent_pyz: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Login]:
    root = tmp_path_factory.mktemp("slurm-login")
    node = start_login_node(slurm_cluster, sshd_factory, ssh_client_key, root, agent_pyz)
    server, settings = node.server, node.settings
    record = HostRecord(
        name=LOGIN,
        target=f"{getpass.getuser()}@127.0.0.1",
        port=server.port,
        identity_file=str(ssh_client_key),
        scheduler="slurm",
        node_port=server.port,
    )
    db = open_database(root / "meshdeck.db")
    add_host(db, record)
    fleet = FleetService(settings)
    writer = SampleWriter(db).start()
    unsubscribe = fleet.subscribe(HistoryRecorder(writer).handle)
    try:
        fleet.add_record(record)
        deadline = time.monotonic() + 120
        while fleet.status(LOGIN).state != "connected":
            assert time.monotonic() < deadline, fleet.status(LOGIN)
            time.sleep(0.2)
        jobs = SlurmDeployments(fleet, db, ssh_login(record, settings))
        yield Login(fleet, db, jobs, slurm_cluster, root, writer)
    finally:
        unsubscribe()
        fleet.close()
        writer.stop()
        stop_agent(node.agent_socket)
        db.close()
        server.stop()


def _shim(login: Login, name: str, then: str) -> str:
    """A `python` for torch profiles: runs the real Python, or sleeps (a job that runs until stopped)."""
    shim = login.root / name
    shim.write_text(f"#!/bin/bash\n{then}\n")
    shim.chmod(0o755)
    return str(shim)


def _profile(login: Login, hosts: list[str], python: str) -> Profile:
    return workload_profile(
        "collectives", parse_layout_spec(f"dp={len(hosts)}"), hosts, python=python, master_port=free_port()
    )


def test_the_clusters_partitions_and_gpus_come_from_its_login_node(login: Login) -> None:
    info = cluster_info(SlurmClient(login.fleet, LOGIN), getpass.getuser())
    assert info.version and info.version.startswith("22.05")
    assert [(p.name, p.node_count, p.gpus_per_node, p.available) for p in info.partitions] == [("debug", 2, 8, True)]
    assert not info.accounting and any("accounting" in p for p in info.problems)


def test_a_bad_partition_is_refused_at_submit_in_slurms_words(login: Login) -> None:
    profile = _profile(login, ["a", "b"], sys.executable)
    with pytest.raises(SlurmCommandFailed, match="invalid partition specified: nope"):
        login.jobs.submit(profile, slurm_options(job_name="bad", partition="nope"))


def test_three_nodes_of_two_stay_pending_with_slurms_reason(login: Login) -> None:
    profile = _profile(login, ["a", "b", "c"], sys.executable)
    record = login.jobs.submit(profile, slurm_options(job_name="toobig"))
    seen = login.jobs.watch(record.deployment, lambda r: r.reason is not None, timeout_s=30)
    assert seen.state == "PENDING" and seen.reason in NODES_BEYOND_PARTITION
    stopped = login.jobs.stop(record.deployment)
    assert stopped.state == "CANCELLED" and stopped.states_seen == ("PENDING", "CANCELLED")


def test_a_job_runs_with_agents_on_its_nodes_and_scancel_leaves_nothing(login: Login) -> None:
    idle = set(processes_of(login.cluster.conf))
    profile = _profile(login, ["a", "b"], _shim(login, "py-sleep", "exec sleep 600"))
    record = login.jobs.submit(profile, slurm_options(job_name="sleeper", time_limit="5"))
    ready = login.jobs.wait_ready(record.deployment, timeout_s=120)
    assert ready.state == "RUNNING" and ready.node_names == ("node1", "node2")
    agents = login.jobs.connect_agents(record.deployment)
    assert not login.jobs.agents_problem, login.jobs.agents_problem
    for agent in agents:
        inventory = login.fleet.call(agent.host, "inventory")
        assert inventory["hostname"], inventory
    output = login.jobs.logs(record.deployment)  # the job's output file, read on the login node
    assert "node1: NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME=lo (holds its NodeAddr 127.0.0.1)" in output, output
    stopped = login.jobs.stop(record.deployment)
    assert stopped.state == "CANCELLED"
    assert stopped.states_seen[-1] == "CANCELLED" and "RUNNING" in stopped.states_seen
    deadline = time.monotonic() + 20
    while (left := set(processes_of(login.cluster.conf)) - idle) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"processes left after scancel: {sorted(left)}"
    assert not [i for i in (0, 1) if Path(job_agent_dir(record.job_id, i)).exists()]  # the agents' dirs are gone
    with pytest.raises(InputError):
        login.jobs.logs(record.deployment, lines=0)


def test_the_tiny_vllm_serves_tp2_across_the_slurm_nodes_and_a_job_past_its_limit_ends_timeout(login: Login) -> None:
    """Item 6 end to end (the bench's round), with a 1-minute job beside it that Slurm ends TIMEOUT meanwhile."""
    try:
        executable = find_vllm_executable()
    except VllmNotInstalled as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the real-vLLM tests (`make vllm-venv`): {exc}")
        pytest.skip(f"vLLM's CPU build is not installed: {exc}")
    short = _profile(login, ["a"], _shim(login, "py-timeout", "exec sleep 600"))
    limited = login.jobs.submit(short, slurm_options(job_name="limited", time_limit="1"))
    # running before the round counts its idle processes, so that its own are not taken for the round's leftovers
    login.jobs.watch(limited.deployment, lambda r: r.state == "RUNNING", timeout_s=60)
    time.sleep(2)  # its task has started its agent and its `python`
    result = slurm_vllm_round(login.jobs, login.writer, executable=executable, conf=login.cluster.conf)
    assert result["requests_ok"] == 8 and result["requests_failed"] == 0, result
    assert result["metric_rows_stored"] > 0 and result["agents_problem"] is None, result
    assert result["states_seen"][-1] == "CANCELLED" and "RUNNING" in result["states_seen"]
    assert result["stopped_state"] == "CANCELLED" and result["leftover_processes"] == 0, result
    ended = login.jobs.watch(limited.deployment, lambda r: r.final, timeout_s=150)
    # it ran on a node until Slurm's time limit ended it
    assert (
        ended.state == "TIMEOUT"
        and ended.node_names == ("node1",)
        and "RUNNING" in ended.states_seen
        and ended.states_seen[-1] == "TIMEOUT"
    )
