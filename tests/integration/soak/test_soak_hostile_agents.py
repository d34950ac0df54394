"""Soak: one flooding and one poisoned agent next to a healthy one, for a minute, through the console's
whole sample path (fleet, store writer, Qt bridge, live metrics, dashboard) in its own process.

What must hold: every sample the healthy agent took while the console listened is stored up to the
last one acknowledged, and the console kept up with it (no starvation behind the flood); the poisoned
host's good samples are stored and its garbage never fails a commit; the console's memory stays under
MAX_PEAK_RSS_MB and grows by less than GROWTH_BUDGET_MB over what it held before the agents connected (every buffer
on the path is bounded: the RPC event queue, the writer's inbox, the bridge; unbounded, the app reached
1.85 GB in 30 s); stopping takes under 5 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

SOAK_S = 60.0
GROWTH_BUDGET_MB = (
    200.0  # measured ~115 MB (the writer's page cache, sized to the series, is part); 1.85 GB in 30 s unbounded
)
MAX_PEAK_RSS_MB = 350.0
SCRIPT = Path(__file__).with_name("soak_console.py")


def _stored_seqs(db_path: Path, host: str) -> int:
    """How many distinct samples of `host` are stored (one gpu0 memory row each)."""
    connection = sqlite3.connect(db_path)
    try:
        (count,) = connection.execute(
            "SELECT count(*) FROM samples s JOIN series r ON r.id = s.series_id "
            "WHERE r.host = ? AND r.device = 'gpu0' AND r.metric = 'memory_used_bytes'",
            (host,),
        ).fetchone()
    finally:
        connection.close()
    return int(count)


def _committed_seq(db_path: Path, host: str) -> int:
    """The last seq of `host` the store acknowledged: where the console resumes from."""
    connection = sqlite3.connect(db_path)
    try:
        (seq,) = connection.execute("SELECT last_seq FROM ingest_state WHERE host = ?", (host,)).fetchone()
    finally:
        connection.close()
    return int(seq)


def _stop_daemon(state_dir: Path) -> None:
    pid_file = state_dir / "agent.pid"
    if pid_file.exists():
        pid = json.loads(pid_file.read_text())["pid"]
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):  # it removes its socket and exits within a few seconds
                os.kill(pid, 0)
                time.sleep(0.1)


@pytest.mark.slow
def test_a_flooding_and_a_poisoned_agent_cost_the_healthy_host_nothing(tmp_path: Path) -> None:
    result_path = tmp_path / "result.json"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    try:
        run = subprocess.run(
            [sys.executable, str(SCRIPT), str(result_path), str(tmp_path), str(SOAK_S)],
            env=env,
            capture_output=True,
            text=True,
            timeout=SOAK_S + 120,
        )
    finally:
        _stop_daemon(tmp_path / "healthy-state")
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(result_path.read_text())
    print(
        f"\nsoak {SOAK_S:.0f} s: RSS {result['idle_rss_mb']:.0f} MB idle, peak {result['peak_rss_mb']:.0f} MB, stop {result['stop_s']:.2f} s, "
        f"healthy {len(result['healthy_delivered'])} delivered (agent at seq {result['healthy_agent_last_seq']}), "
        f"flood {result['flooding_delivered']} delivered, poisoned {result['poisoned_delivered']} delivered, "
        f"console skipped {result['bridge_skipped']}, writer waits {result['writer_inbox_waits']}, "
        f"stop steps {result['stop_steps']}"
    )
    healthy = result["healthy_delivered"]
    assert healthy == list(range(healthy[0], healthy[-1] + 1))  # in order, none twice, no gap
    db = tmp_path / "meshdeck.db"
    committed = _committed_seq(db, "healthy")
    # every sample from the first to the last acknowledged one is stored; the few still queued when the
    # stop began were not acknowledged, so the agent's ring sends them again at the next start
    assert _stored_seqs(db, "healthy") == committed - healthy[0] + 1
    assert committed >= result["healthy_agent_last_seq"] - 5  # kept up: never starved behind the flood
    assert committed - healthy[0] + 1 >= SOAK_S * 0.8
    assert _stored_seqs(db, "poisoned") >= SOAK_S * 0.5  # its good samples got through and are stored
    assert result["flooding_delivered"] > 100 * len(healthy)  # the flood really flooded
    assert result["writer_failures"] == 0
    # Peak measured ~260 MB before the column-wise store path, ~290 MB after it (170 MB idle here, 191 MB in
    # CI): the flood is taken ~25 % faster (40,000 -> 50,000-59,000 samples in the minute) and each GPU has
    # two ECC series more. What this guards against is an unbounded buffer (1.85 GB in 30 s).
    assert result["peak_rss_mb"] < MAX_PEAK_RSS_MB
    grown = result["peak_rss_mb"] - result["idle_rss_mb"]
    assert grown < GROWTH_BUDGET_MB, f"RSS {result['idle_rss_mb']:.0f} MB idle -> {result['peak_rss_mb']:.0f} MB peak"
    assert result["stop_s"] < 5
