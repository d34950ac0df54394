"""`meshdeck hosts processes` end to end on this test's own local agent (an isolated runtime dir): the real
backend answers through NVML (none on a machine without NVIDIA GPUs: no GPU, and why), as JSON and as a table."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from local_agent_cli import isolated_runtime, meshdeck

pytestmark = pytest.mark.slow


@pytest.fixture
def runtime() -> Iterator[dict[str, str]]:
    with isolated_runtime() as env:
        yield env


def test_hosts_processes_asks_the_local_agent(runtime: dict[str, str], tmp_path: Path) -> None:
    db = str(tmp_path / "meshdeck.db")
    listed = meshdeck(runtime, "--db", db, "hosts", "processes", "local", "--json", timeout=120)
    assert listed.returncode == 0, listed.stderr[-2000:]
    answer = json.loads(listed.stdout)
    assert answer["host"] == "local" and answer["simulated"] is False
    if answer["gpus"]:  # a machine with NVIDIA GPUs: whatever runs there, each row names a GPU it has
        assert all(row["gpu"] in answer["gpus"] for row in answer["processes"])
    else:
        assert answer["processes"] == [] and answer["reason"]  # why: no NVML here
    table = meshdeck(runtime, "--db", db, "hosts", "processes", "local", timeout=120)
    assert table.returncode == 0, table.stderr[-2000:]
    assert table.stdout.startswith("local: ")
    assert ("no GPUs: " in table.stdout) == (not answer["gpus"])


def test_an_unknown_host_is_bad_input(runtime: dict[str, str], tmp_path: Path) -> None:
    result = meshdeck(runtime, "--db", str(tmp_path / "meshdeck.db"), "hosts", "processes", "gpu-z", timeout=120)
    assert result.returncode == 2 and "'gpu-z' is not a known host" in result.stderr
