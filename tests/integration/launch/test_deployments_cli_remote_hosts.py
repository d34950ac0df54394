"""`meshdeck deployments list|stop|logs` against a real local agent: stored hosts that cannot be reached are
asked at once with a short connect timeout, named (stderr and --json), the rest is shown and stopped, and
the exit status says some hosts were unreachable (3); what the agent's workers print is shown escaped."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from local_agent_cli import isolated_runtime, meshdeck, start_local_worker
from meshdeck.commands.deployments import EXIT_HOSTS_UNREACHABLE
from meshdeck.services.deployments.model import new_deployment_id
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


def test_unreachable_hosts_are_named_and_the_local_agent_is_listed_and_stopped(
    runtime: dict[str, str], tmp_path: Path, silent_port: int
) -> None:
    db = str(tmp_path / "meshdeck.db")
    with open_database(db) as database:
        add_host(database, HostRecord(name="gpu-closed", target="127.0.0.1", port=free_port()))
        add_host(database, HostRecord(name="gpu-silent", target="127.0.0.1", port=silent_port))
    deployment = new_deployment_id("probe")
    start_local_worker(deployment, "sleeper", ["sleep", "600"])

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

    stopped = meshdeck(
        runtime, "--db", db, "deployments", "stop", deployment, "--grace", "2", "--yes", timeout=CLI_BOUND_S
    )
    assert stopped.returncode == 3, stopped.stderr
    assert "sleeper on local: stopped" in stopped.stdout
    assert "gpu-closed" in stopped.stderr and "could not be asked" in stopped.stderr

    after = meshdeck(runtime, "--db", db, "deployments", "list", "--json", "--hosts", "local", timeout=CLI_BOUND_S)
    assert after.returncode == 0, after.stderr
    (found,) = [d for d in json.loads(after.stdout)["deployments"] if d["id"] == deployment]
    assert found["state"] == "stopped"


def test_logs_are_printed_with_control_characters_escaped_and_lines_and_tabs_kept(
    runtime: dict[str, str], tmp_path: Path
) -> None:
    deployment = new_deployment_id("noisy")
    script = "printf '\\033[2Jred\\tcell\\r\\nnext\\033]0;title\\007 line\\n'; sleep 600"
    start_local_worker(deployment, "printer", ["sh", "-c", script], output="line")
    logs = meshdeck(runtime, "--db", str(tmp_path / "m.db"), "deployments", "logs", deployment, "--hosts", "local")
    assert logs.returncode == 0, logs.stderr
    assert "\x1b" not in logs.stdout and "\r" not in logs.stdout
    assert "\\x1b[2Jred\tcell\nnext\\x1b]0;title\\x07 line" in logs.stdout  # a CR LF ends a line
    meshdeck(runtime, "--db", str(tmp_path / "m.db"), "deployments", "stop", deployment, "--hosts", "local", "--yes")
