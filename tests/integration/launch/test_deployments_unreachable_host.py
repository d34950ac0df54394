"""`meshdeck deployments list|stop` with stored hosts that cannot be reached next to a real local agent: the
hosts are asked at once with a short connect timeout, the unreachable ones are named (stderr and --json),
the rest is shown and stopped, and the exit status says some hosts were unreachable (3)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from local_agent_cli import isolated_runtime, meshdeck
from meshdeck.commands.deployments import EXIT_HOSTS_UNREACHABLE
from meshdeck.services.deploy_model import new_deployment_id, worker_id, worker_name
from meshdeck.services.fleet import FleetService
from meshdeck.store.database import open_database
from meshdeck.store.hosts import HostRecord, add_host
from sshd import free_port

pytestmark = pytest.mark.timeout(300)

# Before, the CLI waited 120 s for each host, then exited 2 with nothing listed. The hosts now get a
# few seconds to answer; this bound leaves room for a slow, shared machine, and is far below 120 s.
CLI_BOUND_S = 60


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, str]]:
    with isolated_runtime() as env:
        env["XDG_DATA_HOME"] = str(tmp_path / "data")  # meshdeck's own known_hosts: this test's
        monkeypatch.setenv("XDG_RUNTIME_DIR", env["XDG_RUNTIME_DIR"])
        yield env


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections and never says anything (no SSH banner): a hung server."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def _start_local_worker(deployment: str) -> None:
    """A meshdeck-named worker on this test's local agent (the daemon keeps it once the fleet closes)."""
    spec = {"id": worker_id(deployment, "sleeper"), "name": worker_name(deployment, 0, "sleeper"),
            "argv": ["sleep", "600"], "restart": "never"}  # fmt: skip
    with FleetService() as fleet:
        fleet.add_local("local")
        deadline = time.monotonic() + 60
        while fleet.status("local").state != "connected":
            assert time.monotonic() < deadline, fleet.status("local").reason
            time.sleep(0.1)
        fleet.call("local", "workers.start", {"spec": spec}, timeout=30)


def test_unreachable_hosts_are_named_and_the_local_agent_is_listed_and_stopped(
    runtime: dict[str, str], tmp_path: Path, silent_port: int
) -> None:
    db = str(tmp_path / "meshdeck.db")
    with open_database(db) as database:
        add_host(database, HostRecord(name="gpu-closed", target="127.0.0.1", port=free_port()))
        add_host(database, HostRecord(name="gpu-silent", target="127.0.0.1", port=silent_port))
    deployment = new_deployment_id("probe")
    _start_local_worker(deployment)

    started = time.monotonic()
    listed = meshdeck(runtime, "--db", db, "deployments", "list", "--json", timeout=CLI_BOUND_S)
    assert time.monotonic() - started < CLI_BOUND_S
    assert listed.returncode == EXIT_HOSTS_UNREACHABLE == 3, listed.stderr
    document = json.loads(listed.stdout)
    (found,) = [d for d in document["deployments"] if d["id"] == deployment]
    assert found["state"] == "running" and found["workers"][0]["host"] == "local"
    unreachable = {entry["host"]: entry["reason"] for entry in document["unreachable"]}
    assert set(unreachable) == {"gpu-closed", "gpu-silent"}
    assert "unreachable" in unreachable["gpu-closed"] and "127.0.0.1" in unreachable["gpu-silent"]
    assert "gpu-closed" in listed.stderr and "gpu-silent" in listed.stderr

    text = meshdeck(runtime, "--db", db, "deployments", "list", timeout=CLI_BOUND_S)
    assert text.returncode == 3 and f"{deployment}  running" in text.stdout

    stopped = meshdeck(runtime, "--db", db, "deployments", "stop", deployment, "--grace", "2", timeout=CLI_BOUND_S)
    assert stopped.returncode == 3, stopped.stderr
    assert "sleeper on local: stopped" in stopped.stdout
    assert "gpu-closed" in stopped.stderr and "could not be asked" in stopped.stderr

    after = meshdeck(runtime, "--db", db, "deployments", "list", "--json", "--hosts", "local", timeout=CLI_BOUND_S)
    assert after.returncode == 0, after.stderr
    (found,) = [d for d in json.loads(after.stdout)["deployments"] if d["id"] == deployment]
    assert found["state"] == "stopped"
