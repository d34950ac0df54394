"""The three resolutions history is kept at, and how the coarse ones are derived from the fine ones.

raw (every sample) → 1-minute buckets → 1-hour buckets, each bucket holding min / max / sum / count
(avg = sum / count). A bucket is rolled up once, when it closes: the writer keeps, per host, the minute
and hour still open, and rolls a bucket up in the same transaction as the first sample of the next one.
A late sample (backfill after a reconnect) re-rolls the closed bucket it lands in. Rolling up is a full
recompute of the bucket from the finer tier, never an increment, so a re-delivered or replayed sample
can never be counted twice and a crash can never leave a tier disagreeing with the one below it.
Open buckets are answered from the finer tier at query time (`query.py`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

MINUTE_MS = 60_000
HOUR_MS = 3_600_000


@dataclass(frozen=True)
class Tier:
    name: str  # "raw", "1m", "1h"
    table: str
    bucket_ms: int  # 0 for raw: one point per sample


RAW = Tier("raw", "samples", 0)
MINUTE = Tier("1m", "rollup_1m", MINUTE_MS)
HOUR = Tier("1h", "rollup_1h", HOUR_MS)
TIERS = (RAW, MINUTE, HOUR)

_HOST_SERIES = "SELECT id FROM series WHERE host = :host"

_ROLL_MINUTE = f"""
INSERT OR REPLACE INTO rollup_1m (series_id, bucket, vmin, vmax, vsum, n)
SELECT series_id, :bucket, min(value), max(value), sum(value), count(*)
FROM samples
WHERE series_id IN ({_HOST_SERIES}) AND ts >= :bucket AND ts < :bucket + {MINUTE_MS}
GROUP BY series_id
"""

_ROLL_HOUR = f"""
INSERT OR REPLACE INTO rollup_1h (series_id, bucket, vmin, vmax, vsum, n)
SELECT series_id, :bucket, min(vmin), max(vmax), sum(vsum), sum(n)
FROM rollup_1m
WHERE series_id IN ({_HOST_SERIES}) AND bucket >= :bucket AND bucket < :bucket + {HOUR_MS}
GROUP BY series_id
"""


def minute_of(ts_ms: int) -> int:
    return ts_ms - ts_ms % MINUTE_MS


def hour_of(ts_ms: int) -> int:
    return ts_ms - ts_ms % HOUR_MS


def roll_up(
    connection: sqlite3.Connection, minutes: Iterable[tuple[str, int]], hours: Iterable[tuple[str, int]]
) -> None:
    """Recompute the given (host, bucket start ms) minute buckets from raw, then the hours from minutes.

    Must run inside the caller's transaction, after the samples it covers were inserted.
    """
    minute_params = [{"host": host, "bucket": bucket} for host, bucket in sorted(set(minutes))]
    if minute_params:
        connection.executemany(_ROLL_MINUTE, minute_params)
    hour_params = [{"host": host, "bucket": bucket} for host, bucket in sorted(set(hours))]
    if hour_params:
        connection.executemany(_ROLL_HOUR, hour_params)
