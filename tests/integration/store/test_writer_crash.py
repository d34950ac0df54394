"""Kill -9 the writer process mid-batch, 20 times: the database stays intact and every sample that was
acknowledged as committed is there (and the rollups still agree with the raw samples)."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("crash_writer.py")
sys.path.insert(0, str(CHILD.parent))
from crash_writer import HOSTS, first_sample_time, sample_time  # noqa: E402

ROWS_PER_SAMPLE = 4 * 12


def _run_and_kill(db_path: Path, rng: random.Random, t0: float) -> list[dict[str, object]]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(db_path), str(t0)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    acks: list[dict[str, object]] = []
    try:
        line = child.stdout.readline()
        assert line == "ready\n", child.stderr.read() if child.stderr else line
        wanted = rng.randint(1, 25)  # kill after a random number of commits, plus a random fraction of one
        while len(acks) < wanted:
            line = child.stdout.readline()
            if not line:
                raise AssertionError(f"writer exited early: {child.stderr.read() if child.stderr else ''}")
            acks.append(json.loads(line))
        time.sleep(rng.uniform(0.0, 0.03))  # the kill lands at a random point of the next commit
    finally:
        child.send_signal(signal.SIGKILL)
        rest, _ = child.communicate(timeout=60)
    acks.extend(json.loads(line) for line in rest.splitlines() if line.startswith("{"))
    assert child.returncode == -signal.SIGKILL
    return acks


def _check(db_path: Path, acknowledged: dict[str, set[int]], t0: float) -> None:
    connection = sqlite3.connect(db_path)
    try:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        for host in HOSTS:
            rows_at = dict(
                connection.execute(
                    "SELECT ts, count(*) FROM samples JOIN series ON series.id = samples.series_id "
                    "WHERE series.host = ? GROUP BY ts",
                    (host,),
                ).fetchall()
            )
            missing = [
                s for s in acknowledged[host] if rows_at.get(round(sample_time(s, t0) * 1000)) != ROWS_PER_SAMPLE
            ]
            assert missing == [], f"{host}: acknowledged but absent or partial: seq {missing[:10]}"
            open_minute = connection.execute("SELECT open_minute FROM ingest_state WHERE host = ?", (host,)).fetchone()
            limit = open_minute[0] if open_minute and open_minute[0] is not None else 2**62
            disagreements = connection.execute(
                "SELECT count(*) FROM (SELECT series_id, ts - ts % 60000 AS bucket, count(*) AS n FROM samples "
                "WHERE series_id IN (SELECT id FROM series WHERE host = ?) AND ts < ? GROUP BY 1, 2) AS raw "
                "LEFT JOIN rollup_1m USING (series_id, bucket) WHERE rollup_1m.n IS NOT raw.n",
                (host, limit),
            ).fetchone()[0]
            assert disagreements == 0, f"{host}: {disagreements} closed minutes disagree with their raw samples"
    finally:
        connection.close()


@pytest.mark.slow
def test_kill_9_mid_batch_twenty_times_loses_nothing_acknowledged(tmp_path: Path) -> None:
    db_path = tmp_path / "meshdeck.db"
    rng = random.Random(20)
    t0 = first_sample_time()
    acknowledged: dict[str, set[int]] = {host: set() for host in HOSTS}
    for _ in range(20):
        for ack in _run_and_kill(db_path, rng, t0):
            host, first, last = str(ack["host"]), int(ack["first"]), int(ack["last"])  # type: ignore[call-overload]
            acknowledged[host].update(range(first, last + 1))
        _check(db_path, acknowledged, t0)
    assert all(len(seqs) > 100 for seqs in acknowledged.values())
