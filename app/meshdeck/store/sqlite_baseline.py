"""The baseline the ingest benchmark measures the store against: the same rows put into a database of the
same schema by plain `sqlite3.executemany`, one transaction per `batch_rows` rows, as the writer commits.
It lives in the store because it is SQL; the benchmark (services/ingest_benchmark.py) runs both."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from operator import itemgetter
from pathlib import Path

Rows = Sequence[tuple[int, float, str, str, float]]  # (seq, ts_s, device, metric, value), as the writer takes


def plain_sqlite_insert(
    path: Path, batches: Sequence[tuple[str, Rows]], batch_rows: int, *, sort_by_series: bool, cache_kib: int | None
) -> tuple[float, float]:
    """(wall, CPU) seconds to insert every row of `batches` into `path` (a new meshdeck database): series
    numbered in order of first sight as the store does, rows reduced to (series_id, ts_ms, value) beforehand.
    `sort_by_series` and `cache_kib` add what the writer does to SQLite (key order per batch, a big cache)."""
    ids: dict[tuple[str, str, str], int] = {}
    for host, rows in batches:
        for row in rows:
            ids.setdefault((host, row[2], row[3]), len(ids) + 1)
    plain = [(ids[(host, row[2], row[3])], round(row[1] * 1000), row[4]) for host, rows in batches for row in rows]
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA synchronous = NORMAL")
        if cache_kib is not None:
            connection.execute(f"PRAGMA cache_size = -{int(cache_kib)}")
        connection.executemany(
            "INSERT INTO series (id, host, device, metric) VALUES (?, ?, ?, ?)", [(i, *key) for key, i in ids.items()]
        )
        wall, cpu = time.perf_counter(), time.process_time()
        for start in range(0, len(plain), batch_rows):
            chunk = plain[start : start + batch_rows]
            if sort_by_series:
                chunk.sort(key=itemgetter(0))
            connection.execute("BEGIN")
            connection.executemany("INSERT INTO samples (series_id, ts, value) VALUES (?, ?, ?)", chunk)
            connection.execute("COMMIT")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        connection.close()
    return wall, cpu
