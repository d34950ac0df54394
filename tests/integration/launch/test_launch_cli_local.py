"""The command line end to end on this machine's agent: `meshdeck launch` (pre-flight, staged start, --wait),
then `meshdeck deployments list|logs`, in an isolated runtime dir so the agent is this test's own."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from local_agent_cli import isolated_runtime, meshdeck

# real torchrun on 2 shared cores: slow when other suites run at the same time, so a generous limit
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PROFILE = """\
name: tiny-local
model: tiny-deepseek
engine: torch
hosts: [local]
gpus_per_node: 2
layout: {{tensor_parallel: 1, data_parallel: 2, expert_parallel: true}}
torch: {{script: tiny-deepseek, args: [--iters, "2", --duration-s, "{duration}"], python: {python}, master_port: {port}}}
env: {{XDG_CACHE_HOME: {cache}}}
"""


@pytest.fixture
def runtime() -> Iterator[dict[str, str]]:
    with isolated_runtime() as env:
        yield env


def test_launch_wait_then_list_and_logs(runtime: dict[str, str], tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    profile = tmp_path / "tiny.yaml"
    profile.write_text(PROFILE.format(python=sys.executable, port=port, cache=tmp_path / "cache", duration=0))
    db = str(tmp_path / "meshdeck.db")
    launched = meshdeck(runtime, "--db", db, "launch", str(profile), "--wait", "--json")
    assert launched.returncode == 0, launched.stderr[-3000:]
    outcome = json.loads(launched.stdout)
    assert outcome["state"] == "completed"
    assert "ok   reach head" in launched.stderr and "[2/2] up" not in launched.stderr  # one node: one command
    listed = meshdeck(runtime, "--db", db, "deployments", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    (found,) = [d for d in json.loads(listed.stdout)["deployments"] if d["id"] == outcome["id"]]
    assert found["state"] == "completed" and found["workers"][0]["host"] == "local"
    logs = meshdeck(runtime, "--db", db, "deployments", "logs", "tiny-local", "--lines", "5")
    assert logs.returncode == 0, logs.stderr
    assert "MESHDECK_RESULT" in logs.stdout and '"matches_reference": true' in logs.stdout

    # a long job: launch returns once every rank runs; `deployments stop` ends it and closes its record
    profile.write_text(PROFILE.format(python=sys.executable, port=port, cache=tmp_path / "cache", duration=600))
    launched = meshdeck(runtime, "--db", db, "launch", str(profile), "--skip-preflight", "--json")
    assert launched.returncode == 0, launched.stderr[-3000:]
    running = json.loads(launched.stdout)
    assert running["state"] == "running"
    stopped = meshdeck(runtime, "--db", db, "deployments", "stop", running["id"], "--grace", "2", "--yes")
    assert stopped.returncode == 0, stopped.stderr
    assert "torchrun-node0 on local: stopped" in stopped.stdout
    listed = json.loads(meshdeck(runtime, "--db", db, "deployments", "list", "--json").stdout)
    assert listed["unreachable"] == []
    assert next(d for d in listed["deployments"] if d["id"] == running["id"])["state"] == "stopped"
    from meshdeck.store.database import open_database
    from meshdeck.store.deployments import get_deployment

    with open_database(db) as database:
        assert get_deployment(database, running["id"]).state == "stopped"
        assert get_deployment(database, outcome["id"]).state == "completed"
