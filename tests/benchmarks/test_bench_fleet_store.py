"""The store writer at fleet size (issue 14): 278 hosts x 8 GPUs at 1 Hz into a database that already
holds several minutes of their history. Run with `make bench` or `pytest tests/benchmarks -s`.

Each sample is the 400-value GPU part of a simulated 8xH200 (12 metrics, the two NVLink sums and 18
links x (tx, rx) per GPU). The database is filled once with `PREFILL_S` seconds of the fleet through the
writer (so every series already has its own leaf pages: what made each commit rewrite a page per
series), then copied for every round:

- store: the next `MEASURED_S` seconds submitted per host and second to a `SampleWriter` with its
  default settings (the commit cadence it adopts for this fleet; the data is fed as fast as it takes
  it), timed until `flush()` says all of it is durable;
- baseline: the raw rows the store keeps for those samples, already reduced to (series_id, ts_ms, value)
  tuples, put into the same pre-filled copy by plain `sqlite3.executemany`, sorted by key, in one
  transaction per commit the store made: what SQLite itself costs for that data in this layout.

Printed, medians of `ROUNDS` alternating rounds: seconds of data stored per second of wall time (above
1 keeps up), the writer thread's CPU per second of data, and bytes written to disk per sample (from
/proc/self/io: WAL, checkpoints, rollups), each with its ratio to the baseline. Asserted: the writer
keeps up with a 278-host fleet (its CPU per second of data under half a core) and writes at most 4x the
bytes per sample plain SQLite writes for the same rows.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import statistics
import time
from operator import itemgetter
from pathlib import Path

from meshdeck.core.samples import SampleBatch
from meshdeck.services.ingest_benchmark import machine
from meshdeck.services.synthetic_samples import host_name, sample_batch, wire_sample
from meshdeck.store.database import open_database
from meshdeck.store.link_minutes import rollup_only
from meshdeck.store.writer import BatchRows, SampleWriter, WriterSettings

HOSTS, PREFILL_S, MEASURED_S, ROUNDS = 278, 180, 30, 3
TEMPLATES = 4  # distinct samples per second, spread over the hosts (generating 278 a second would dominate)
NVLINK_LINKS = 18


def _disk_written() -> int:
    with open("/proc/self/io") as handle:
        for line in handle:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    raise AssertionError("/proc/self/io has no write_bytes")


def _seconds(first: int, count: int, start: float, rng: random.Random) -> list[list[SampleBatch]]:
    return [
        [
            sample_batch([wire_sample(first + s, start + first + s, rng=rng, nvlink_links=NVLINK_LINKS)])
            for _ in range(TEMPLATES)
        ]
        for s in range(count)
    ]


def _feed(writer: SampleWriter, seconds: list[list[SampleBatch]]) -> None:
    for batches in seconds:
        for index in range(HOSTS):
            writer.submit_samples(host_name(index), batches[index % TEMPLATES])


def _prefill(path: Path, start: float, rng: random.Random) -> None:
    with open_database(path) as db:
        writer = SampleWriter(db, settings=WriterSettings(retention_every_s=1e9)).start()
        for first in range(0, PREFILL_S, 30):
            _feed(writer, _seconds(first, min(30, PREFILL_S - first), start, rng))
        assert writer.flush(3600)
        writer.stop(roll_up_open_buckets=False)
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()


def _store_round(path: Path, seconds: list[list[SampleBatch]]) -> tuple[float, float, int, int, int]:
    """(wall s, writer CPU s, bytes written, samples, commits)."""
    with open_database(path) as db:
        writer = SampleWriter(db, settings=WriterSettings(retention_every_s=1e9)).start()
        before = writer.stats()
        written = _disk_written()
        began = time.perf_counter()
        _feed(writer, seconds)
        assert writer.flush(3600)
        wall = time.perf_counter() - began
        written = _disk_written() - written
        stats = writer.stats()
        writer.stop(roll_up_open_buckets=False)
    return wall, stats.cpu_seconds - before.cpu_seconds, written, stats.samples, stats.commits - before.commits


def _baseline_rows(path: Path, seconds: list[list[SampleBatch]]) -> list[tuple[int, int, float]]:
    connection = sqlite3.connect(path)
    ids = {
        (host, device, metric): i
        for i, host, device, metric in connection.execute("SELECT id, host, device, metric FROM series")
    }
    connection.close()
    rows = []
    for batches in seconds:
        for index in range(HOSTS):
            host = host_name(index)
            for _, ts, device, metric, value in BatchRows(batches[index % TEMPLATES]):
                if not rollup_only(device):
                    rows.append((ids[(host, device, metric)], round(ts * 1000), value))
    return rows


def _baseline_round(path: Path, rows: list[tuple[int, int, float]], commits: int) -> tuple[float, float, int]:
    """(wall s, CPU s, bytes written) of plain executemany, sorted by key, in `commits` transactions."""
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA synchronous = NORMAL")
    written, cpu, began = _disk_written(), time.process_time(), time.perf_counter()
    per_commit = -(-len(rows) // max(1, commits))
    for start in range(0, len(rows), per_commit):
        chunk = sorted(rows[start : start + per_commit], key=itemgetter(0))
        connection.execute("BEGIN")
        connection.executemany("INSERT OR IGNORE INTO samples (series_id, ts, value) VALUES (?, ?, ?)", chunk)
        connection.execute("COMMIT")
    connection.close()  # the last connection checkpoints the WAL into the file, as the store's does
    return time.perf_counter() - began, time.process_time() - cpu, _disk_written() - written


def test_bench_the_writer_at_278_hosts_with_a_prefilled_database(tmp_path: Path) -> None:
    print(f"\n[fleet store] machine: {machine()}")
    rng = random.Random(14)
    start = time.time() - PREFILL_S - MEASURED_S - 120
    prefilled = tmp_path / "prefilled.db"
    began = time.perf_counter()
    _prefill(prefilled, start, rng)
    print(
        f"[fleet store] pre-filled {PREFILL_S} s of {HOSTS} hosts in {time.perf_counter() - began:.0f} s: "
        f"{prefilled.stat().st_size / 1e6:.0f} MB"
    )
    seconds = _seconds(PREFILL_S, MEASURED_S, start, rng)
    store, baseline = [], []
    for index in range(ROUNDS):
        store_path, baseline_path = tmp_path / f"store{index}.db", tmp_path / f"baseline{index}.db"
        shutil.copyfile(prefilled, store_path)
        shutil.copyfile(prefilled, baseline_path)
        rows = _baseline_rows(baseline_path, seconds)
        if index % 2 == 0:
            store.append(_store_round(store_path, seconds))
            baseline.append(_baseline_round(baseline_path, rows, store[-1][4]))
        else:
            commits = store[-1][4]
            baseline.append(_baseline_round(baseline_path, rows, commits))
            store.append(_store_round(store_path, seconds))
        for path in (store_path, baseline_path):
            for suffix in ("", "-wal", "-shm"):
                path.with_name(path.name + suffix).unlink(missing_ok=True)
    samples = store[0][3]
    assert samples == HOSTS * MEASURED_S
    store_speed = statistics.median(MEASURED_S / r[0] for r in store)
    baseline_speed = statistics.median(MEASURED_S / r[0] for r in baseline)
    store_cpu = statistics.median(r[1] / MEASURED_S for r in store)
    store_bytes = statistics.median(r[2] / samples for r in store)
    baseline_bytes = statistics.median(r[2] / samples for r in baseline)
    rows_per_sample = len(_baseline_rows(prefilled, seconds[:1])) / HOSTS
    print(
        f"[fleet store] {HOSTS} hosts x 8 GPUs, {MEASURED_S} s of 1 Hz data onto {PREFILL_S} s stored, median of "
        f"{ROUNDS}: store {store_speed:.2f}x real time ({store[0][4]} commits; writer CPU {store_cpu:.1%} of a core "
        f"per second of data), plain sqlite3 {baseline_speed:.2f}x (ratio {store_speed / baseline_speed:.2f}); "
        f"disk written per sample: store {store_bytes / 1e3:.1f} kB, plain sqlite3 {baseline_bytes / 1e3:.1f} kB "
        f"(ratio {store_bytes / baseline_bytes:.2f}); raw rows per sample {rows_per_sample:.0f} of 400 reported"
    )
    assert store_bytes < 4 * baseline_bytes  # a ratio to plain sqlite3 in the same run; no time is asserted
