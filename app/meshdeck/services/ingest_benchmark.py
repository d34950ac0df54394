"""Measuring the ingest path against plain SQLite on the same machine, in the same run.

store: fabricated 8-GPU samples (`synthetic_samples.py`, decoded and flattened as the app does) are
submitted per host and second to a `SampleWriter`, timed until `flush()` says they are durable: queue
hand-off, series lookup, the sort into key order, the inserts, minute/hour rollups and positions.

baseline: the same rows, already reduced to `(series_id, ts_ms, value)` tuples in arrival order, put
into a database with the same schema (created by `open_database`: WAL) by plain
`sqlite3.executemany` with `synchronous=NORMAL`, one transaction per `batch_rows` rows, as the
writer commits.

A second, tuned baseline adds to plain SQLite what the writer does to SQLite itself (rows sorted into
key order per batch, the writer's larger page cache), so `ratio_vs_tuned` isolates the store's own
Python overhead. Rounds alternate the order; medians are reported (other processes share the CPUs).
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from meshdeck.services.synthetic_samples import GPU_METRICS, fleet_batches
from meshdeck.store.database import open_database
from meshdeck.store.sqlite_baseline import plain_sqlite_insert
from meshdeck.store.writer import SampleWriter, WriterSettings

Batch = tuple[str, list[tuple[int, float, str, str, float]]]


@dataclass(frozen=True)
class IngestRound:
    store_rows_per_s: float
    raw_sqlite_rows_per_s: float
    raw_sqlite_tuned_rows_per_s: float
    store_cpu_s: float
    raw_sqlite_cpu_s: float

    @property
    def ratio(self) -> float:
        return self.store_rows_per_s / self.raw_sqlite_rows_per_s

    @property
    def ratio_vs_tuned(self) -> float:
        return self.store_rows_per_s / self.raw_sqlite_tuned_rows_per_s


@dataclass(frozen=True)
class IngestBenchmark:
    rows: int
    hosts: int
    series: int
    batch_rows: int
    rounds: tuple[IngestRound, ...]

    @property
    def store_rows_per_s(self) -> float:
        return statistics.median(r.store_rows_per_s for r in self.rounds)

    @property
    def raw_sqlite_rows_per_s(self) -> float:
        return statistics.median(r.raw_sqlite_rows_per_s for r in self.rounds)

    @property
    def ratio(self) -> float:
        return statistics.median(r.ratio for r in self.rounds)

    def as_dict(self) -> dict[str, object]:
        return {
            "rows": self.rows,
            "hosts": self.hosts,
            "series": self.series,
            "batch_rows": self.batch_rows,
            "store_rows_per_s": round(self.store_rows_per_s),
            "raw_sqlite_rows_per_s": round(self.raw_sqlite_rows_per_s),
            "ratio": round(self.ratio, 3),
            "raw_sqlite_tuned_rows_per_s": round(statistics.median(r.raw_sqlite_tuned_rows_per_s for r in self.rounds)),
            "ratio_vs_tuned": round(statistics.median(r.ratio_vs_tuned for r in self.rounds), 3),
            "store_rows_per_cpu_s": round(statistics.median(self.rows / r.store_cpu_s for r in self.rounds)),
            "raw_sqlite_rows_per_cpu_s": round(statistics.median(self.rows / r.raw_sqlite_cpu_s for r in self.rounds)),
            "rounds": [
                {**asdict(r), "ratio": round(r.ratio, 3), "ratio_vs_tuned": round(r.ratio_vs_tuned, 3)}
                for r in self.rounds
            ],
            "store_path": "SampleWriter: queue, series ids, key-order sort, INSERT OR IGNORE, rollups, positions",
            "baseline": "sqlite3.executemany of pre-resolved (series_id, ts_ms, value) in arrival order, same "
            "schema, WAL, synchronous=NORMAL, default page cache, one transaction per batch_rows",
            "tuned_baseline": "the baseline plus the writer's SQLite tricks: rows sorted into key order per "
            "batch and the writer's page cache",
            "machine": machine(),
        }


def machine() -> dict[str, object]:
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def fabricate(rows: int, hosts: int, *, start_ts: float | None = None) -> list[Batch]:
    """Whole samples of `hosts` 8-GPU hosts at 1 Hz, at least `rows` rows, second by second."""
    per_second = hosts * 8 * len(GPU_METRICS)
    seconds = max(1, math.ceil(rows / per_second))
    start = time.time() - seconds - 60 if start_ts is None else start_ts
    return list(fleet_batches(hosts, seconds, start_ts=start))


def _store_round(folder: Path, batches: Sequence[Batch], batch_rows: int) -> tuple[float, float]:
    path = folder / "store.db"
    db = open_database(path)
    settings = WriterSettings(commit_interval_s=3600.0, max_batch_rows=batch_rows, retention_every_s=1e9)
    writer = SampleWriter(db, settings=settings).start()
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        for host, rows in batches:
            writer.submit_rows(host, rows)
        if not writer.flush(timeout=3600):
            raise RuntimeError(f"the store did not commit: {writer.stats().last_error}")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        writer.stop(roll_up_open_buckets=False)
        db.close()
    return wall, cpu


def _raw_round(folder: Path, batches: Sequence[Batch], batch_rows: int, *, tuned: bool = False) -> tuple[float, float]:
    """Plain executemany; `tuned` adds what the writer does to SQLite (key-order sort per batch, the
    writer's page cache) so the difference left is the store's own overhead."""
    path = folder / ("raw-tuned.db" if tuned else "raw.db")
    open_database(path).close()  # the same schema, WAL
    cache_kib = WriterSettings().cache_kib if tuned else None
    return plain_sqlite_insert(path, batches, batch_rows, sort_by_series=tuned, cache_kib=cache_kib)


def run_ingest_benchmark(
    rows: int = 1_000_000,
    *,
    hosts: int = 8,
    batch_rows: int = 100_000,
    repeat: int = 3,
    directory: str | Path | None = None,
) -> IngestBenchmark:
    """Measure `repeat` rounds of store vs baseline on fresh databases under `directory` (a temp dir)."""
    batches = fabricate(rows, hosts)
    total = sum(len(r) for _, r in batches)
    rounds = []
    root = Path(tempfile.mkdtemp(prefix="meshdeck-bench-ingest-", dir=directory))
    try:
        for index in range(repeat):
            folder = root / f"round{index}"
            folder.mkdir()
            if index % 2 == 0:
                store_wall, store_cpu = _store_round(folder, batches, batch_rows)
                raw_wall, raw_cpu = _raw_round(folder, batches, batch_rows)
                tuned_wall, _ = _raw_round(folder, batches, batch_rows, tuned=True)
            else:
                tuned_wall, _ = _raw_round(folder, batches, batch_rows, tuned=True)
                raw_wall, raw_cpu = _raw_round(folder, batches, batch_rows)
                store_wall, store_cpu = _store_round(folder, batches, batch_rows)
            rounds.append(IngestRound(total / store_wall, total / raw_wall, total / tuned_wall, store_cpu, raw_cpu))
            shutil.rmtree(folder)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return IngestBenchmark(total, hosts, hosts * 8 * len(GPU_METRICS), batch_rows, tuple(rounds))
