"""`meshdeck bench fleet` for real at small N: real agents, the real fleet and store (and the console offscreen).

The JSON contract (every named key, typed) and its consistency: produced >= stored, lost = produced - stored
and 0 here (nothing is dropped on the way: the writer's back-pressure holds the agents), the window's
samples all accounted for, and nothing the run started left running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil
import pytest
from meshdeck.services.fleet_benchmark import CONTRACT_KEYS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

HOSTS = 3
SECONDS = 4


def _bench_agents() -> set[int]:
    """PIDs of agent processes living in a `bench fleet` folder (/tmp/mdfb-*)."""
    found = set()
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info.get("cmdline") or [])
        if "meshdeck_agent" in cmdline and "/mdfb-" in cmdline:
            found.add(process.pid)
    return found


def _bench(*flags: str) -> dict[str, object]:
    before = _bench_agents()
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    command = [sys.executable, "-m", "meshdeck", "bench", "fleet", "--host-count", str(HOSTS), "--gpus-per-host", "8"]
    done = subprocess.run(
        [*command, "--seconds", str(SECONDS), *flags, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=500,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert _bench_agents() <= before, "the benchmark left agents running"
    return json.loads(done.stdout)


def _check_contract(result: dict[str, object]) -> None:
    missing = [key for key in CONTRACT_KEYS if key not in result]
    assert not missing, f"contract keys missing: {missing}"
    assert result["hosts"] == HOSTS
    assert result["gpus"] == HOSTS * 8
    assert result["seconds"] == SECONDS
    assert result["hosts_connected"] == result["hosts_measured"] == HOSTS, result["not_measured"]
    produced, stored, lost = result["samples_produced"], result["samples_stored"], result["samples_lost"]
    assert isinstance(produced, int) and isinstance(stored, int) and isinstance(lost, int)
    # every agent samples at 1 Hz: about SECONDS samples each, a tick either side of the window's edges
    assert HOSTS * (SECONDS - 1) <= produced <= HOSTS * (SECONDS + 1)
    assert produced >= stored
    assert lost == produced - stored == 0
    assert result["samples_undelivered"] == 0 and result["samples_dropped_by_agents"] == 0
    live = result["samples_delivered_live"]
    assert isinstance(live, int) and 0 < live <= produced + HOSTS
    p50, p99 = result["delay_p50_ms"], result["delay_p99_ms"]
    assert isinstance(p50, float) and isinstance(p99, float) and 0 <= p50 <= p99
    assert isinstance(result["connect_all_s"], float) and result["connect_all_s"] > 0
    assert isinstance(result["settle_s"], float) and result["settle_s"] >= 0  # a few hosts catch up at once
    assert str(result["agent_bytecode"]).startswith(("compiled before the run", "compiled now", "not compiled"))
    phase = result["connect_phase"]
    assert isinstance(phase, dict) and set(phase) == {
        "client_cpu_s",
        "agents_cpu_s",
        "relays_cpu_s",
        "machine_cpu_busy_pct",
    }
    # a 3-host storm lasts a second or two: this process's CPU in it may round to 0.00 s
    assert all(isinstance(value, float) and value >= 0 for value in phase.values()), phase
    assert isinstance(result["client_cpu_pct"], float) and result["client_cpu_pct"] > 0
    assert isinstance(result["client_rss_mb"], float) and result["client_rss_mb"] > 0
    for key in ("writer_backlog_start", "writer_backlog_end"):
        assert isinstance(result[key], int) and result[key] >= 0
    rows = result["rows_per_sample"]
    assert isinstance(rows, float) and rows > 8  # at least one row per GPU
    # /proc counts CPU in 10 ms ticks: 3 idle agents over 4 s may honestly read 0
    assert isinstance(result["agents_cpu_pct"], float) and result["agents_cpu_pct"] >= 0


def test_bench_fleet_runs_real_agents_into_the_store_and_accounts_for_every_sample():
    result = _bench()
    _check_contract(result)
    assert result["gui_view"] is None
    assert result["gui_refresh_ms_median"] is None and result["gui_refresh_ms_p99"] is None


@pytest.mark.gui
def test_bench_fleet_with_the_console_offscreen_times_the_shown_views_refreshes():
    result = _bench("--console")
    _check_contract(result)
    assert result["gui_view"] == "fleet"
    refreshes, median, p99 = result["gui_refreshes"], result["gui_refresh_ms_median"], result["gui_refresh_ms_p99"]
    assert isinstance(refreshes, int) and refreshes > 0
    assert isinstance(median, float) and isinstance(p99, float) and 0 < median <= p99
