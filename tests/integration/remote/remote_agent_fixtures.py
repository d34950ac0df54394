"""The real agent on the test sshd: its zipapp, per-test isolated remote paths, and a cleanup that
leaves no daemon or worker behind. Used by the remote integration tests and the fleet benchmark
(`from integration.remote.remote_agent_fixtures import ...`; tests/ is on sys.path)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from meshdeck.remote.agent_zipapp import build_agent_zipapp
from meshdeck.remote.auth import AuthOptions
from meshdeck.remote.bootstrap import AGENT_PYZ_ENV
from meshdeck.remote.rpc import RpcClient
from meshdeck.remote.ssh import SshOptions
from meshdeck.remote.streams import SocketStream
from meshdeck.remote.supervisor import Backoff, SupervisorSettings
from meshdeck.services.fleet import FleetService, FleetSettings


def isolated_ssh_options(key_dir: Path) -> SshOptions:
    """Only explicit key files: no ssh-agent, no ~/.ssh defaults (key_dir must be empty), no keyring."""
    return SshOptions(
        connect_timeout_s=20, auth=AuthOptions(use_agent=False, default_key_dir=str(key_dir), password_lookup=None)
    )


def isolated_fleet_settings(root: Path, agent_pyz: Path, agent_socket: Path, known_hosts: Path) -> FleetSettings:
    """Settings for a fleet reaching loopback sshd servers with explicit keys only, its remote cache under `root`."""
    key_dir = root / "no-default-keys"
    key_dir.mkdir(exist_ok=True)
    return FleetSettings(
        known_hosts=str(known_hosts),
        user_known_hosts=(),
        ssh_config=None,
        agent_pyz=str(agent_pyz),
        remote_cache_dir=str(root / "remote-cache"),
        agent_socket=str(agent_socket),
        ssh=isolated_ssh_options(key_dir),
        supervisor=SupervisorSettings(backoff=Backoff(initial_s=0.5, max_s=2.0)),
    )


@pytest.fixture(scope="session")
def agent_pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The agent zipapp the app uploads: $MESHDECK_AGENT_PYZ if set, else built from this checkout's agent."""
    if os.environ.get(AGENT_PYZ_ENV):
        return Path(os.environ[AGENT_PYZ_ENV])
    return build_agent_zipapp(tmp_path_factory.mktemp("agent-pyz") / "meshdeck-agent.pyz")


def stop_agent(socket_path: Path) -> None:
    """Stop the workers and the daemon serving `socket_path` (started by a test over SSH).

    Asks nicely over the socket first; then any process still naming the socket's (unique, temporary)
    directory in its command line — the daemon, its keepers — is killed by PID, so none is left behind.
    """
    try:
        _shutdown_over_socket(socket_path)
    except Exception as exc:  # cleanup must go on; the PID sweep below still runs
        print(f"agent at {socket_path}: orderly shutdown failed: {exc}")
    marker = str(socket_path.parent) + "/"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _processes_naming(marker):
        time.sleep(0.2)
    for process in _processes_naming(marker):
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()


def _processes_naming(text: str) -> list[psutil.Process]:
    """Agent processes (daemon, keepers) whose command line names `text`; never this process."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info.get("cmdline") or []
        is_agent = any("meshdeck_agent" in part or part.endswith(".pyz") for part in cmdline)
        if process.pid != os.getpid() and is_agent and any(text in part for part in cmdline):
            found.append(process)
    return found


def _shutdown_over_socket(socket_path: Path) -> None:
    if not socket_path.exists():
        return
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(socket_path))
    except OSError:
        sock.close()
        return
    with RpcClient(SocketStream(sock), host="cleanup") as client:
        client.start(timeout=20)
        for worker in client.call("workers.list", timeout=30)["workers"]:
            if worker.get("state") in ("starting", "running", "restarting"):
                client.call("workers.stop", {"id": worker["id"], "grace_s": 2}, timeout=60)
        client.call("agent.shutdown", timeout=20)


@dataclass
class RemoteAgentSetup:
    """Everything a fleet needs to reach a test sshd and run the real agent there, isolated per test."""

    settings: FleetSettings
    socket: Path
    cache_dir: Path
    known_hosts: Path


def short_temp_dir(prefix: str = "mdr-") -> Path:
    """Agent sockets need short paths (sun_path is 108 bytes); pytest's tmp_path can be too long."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


@pytest.fixture
def remote_agent(tmp_path: Path, agent_pyz: Path) -> Iterator[RemoteAgentSetup]:
    """FleetSettings with a private remote cache dir, agent socket and known_hosts; stops the agent after."""
    short = short_temp_dir()
    setup = RemoteAgentSetup(
        settings=isolated_fleet_settings(tmp_path, agent_pyz, short / "a.sock", tmp_path / "meshdeck_known_hosts"),
        socket=short / "a.sock",
        cache_dir=tmp_path / "remote-cache",
        known_hosts=tmp_path / "meshdeck_known_hosts",
    )
    try:
        yield setup
    finally:
        stop_agent(setup.socket)
        shutil.rmtree(short, ignore_errors=True)


@contextlib.contextmanager
def local_fleet(tmp_path: Path, state_root: Path) -> Iterator[FleetService]:
    """A fleet service for local agents whose state dirs are `state_root/<dir>`; afterwards each agent is
    shut down and waited for, so none is left for the session's leftover-process check."""
    service = FleetService(
        FleetSettings(
            known_hosts=str(tmp_path / "known_hosts"),
            supervisor=SupervisorSettings(backoff=Backoff(initial_s=0.2, max_s=2.0)),
        )
    )
    try:
        yield service
    finally:
        daemons = [psutil.Process(json.loads(path.read_text())["pid"]) for path in state_root.glob("*/agent.pid")]
        for name in service.hosts():
            with contextlib.suppress(Exception):  # a test may have broken the agent on purpose
                service.call(name, "agent.shutdown", timeout=10)
        service.close()
        psutil.wait_procs(daemons, timeout=30)
