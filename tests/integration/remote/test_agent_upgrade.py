"""A server still running an agent of another protocol (tests/fakes/old_agent.py fabricates one): the
fleet's bootstrap + attach end connected to the new agent, or fail once, naming both versions."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from integration.agent.agent_harness import old_agent
from meshdeck.remote.errors import AgentVersionConflict
from meshdeck.remote.events import HostStateChanged
from meshdeck.services.fleet import FleetService, FleetSettings, ssh_connector
from meshdeck_agent import __version__
from remote_agent_fixtures import RemoteAgentSetup, short_temp_dir
from remote_fake_agent import Recorder  # tests/fakes is on sys.path (tests/conftest.py)
from sshd import SshdServer

pytestmark = pytest.mark.slow


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = short_temp_dir("mdu-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _connecting_count(recorder: Recorder, host: str) -> int:
    return sum(
        1 for e in recorder.events if isinstance(e, HostStateChanged) and e.host == host and e.state == "connecting"
    )


@dataclass
class _Beside:
    old: subprocess.Popen[bytes]  # the fabricated old agent
    fleet: FleetService
    got: Recorder


@contextmanager
def _local_fleet_beside_an_old_agent(short_dir: Path, tmp_path: Path, *, pid_known: bool) -> Iterator[_Beside]:
    """An agent 0.0.1 speaking protocol 0 on the socket, then the fleet's local transport aimed at it."""
    socket_path, state = short_dir / "a.sock", short_dir / "a.state"
    with (
        old_agent(socket_path, state, "0.0.1", protocol=0) as old,
        FleetService(FleetSettings(known_hosts=str(tmp_path / "known_hosts"))) as fleet,
    ):
        if not pid_known:
            (state / "agent.pid").unlink()  # started some other way: attach cannot know which process it is
        got = Recorder()
        fleet.subscribe(got)
        fleet.add_local("gpu-a", simulate="1xH100", socket=str(socket_path), state_dir=str(state))
        yield _Beside(old, fleet, got)


def test_a_local_agent_of_another_protocol_is_replaced_and_the_host_connects(short_dir: Path, tmp_path: Path):
    with _local_fleet_beside_an_old_agent(short_dir, tmp_path, pid_known=True) as beside:
        supervisor = beside.fleet.supervisor("gpu-a")
        try:
            beside.got.wait_for(lambda: supervisor.state == "connected" and beside.got.seqs("gpu-a"), timeout=90)
            assert supervisor.agent_version == __version__
            assert beside.old.wait(timeout=20) == 0  # SIGTERMed by attach, not left beside the new daemon
            assert "failed" not in beside.got.states("gpu-a")
        finally:
            beside.fleet.call("gpu-a", "agent.shutdown", timeout=30)


def test_an_old_agent_that_cannot_be_replaced_fails_the_host_once_naming_both_versions(short_dir: Path, tmp_path: Path):
    with _local_fleet_beside_an_old_agent(short_dir, tmp_path, pid_known=False) as beside:
        supervisor = beside.fleet.supervisor("gpu-a")
        beside.got.wait_for(lambda: supervisor.state == "failed", timeout=90)
        assert isinstance(supervisor.error, AgentVersionConflict)
        assert "agent 0.0.1 (protocol 0) serves" in supervisor.reason
        assert f"not this agent {__version__} (protocol 1)" in supervisor.reason
        assert "stop it by hand" in supervisor.reason
        assert _connecting_count(beside.got, "gpu-a") == 1  # no reconnect loop against it
        assert beside.old.poll() is None  # left alone


@pytest.mark.sshd
def test_over_ssh_bootstrap_and_attach_replace_an_old_agent_with_the_uploaded_one(
    sshd: SshdServer, ssh_client_key: Path, remote_agent: RemoteAgentSetup
):
    state = remote_agent.socket.parent / "a.state"  # the agent's default: next to its socket
    sshd.write_known_hosts(remote_agent.known_hosts)
    got = Recorder()
    with (
        old_agent(remote_agent.socket, state, "0.0.1", protocol=0) as old,
        FleetService(remote_agent.settings) as fleet,
    ):
        fleet.subscribe(got)
        connector = ssh_connector(
            remote_agent.settings,
            "127.0.0.1",
            port=sshd.port,
            identity_file=str(ssh_client_key),
            simulate="1xH100",
            host_keys=fleet.host_keys,
        )
        supervisor = fleet.add_host("gpu-a", connector)
        got.wait_for(lambda: supervisor.state == "connected", timeout=120)
        assert supervisor.agent_version == __version__
        assert supervisor.details["uploaded"] is True
        assert old.wait(timeout=20) == 0
        assert fleet.call("gpu-a", "inventory", timeout=60)["simulated"] is True
