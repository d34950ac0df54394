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
from collections.abc import Callable, Iterable
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

_HOSTS = 500  # hosts per statement, bound as variables

# One statement per bucket for every host closing it (a 278-host fleet's minutes close together): a
# statement per host made every minute's close 278 round trips through the GIL (bulk_insert.py).


def _roll_minute(hosts: int) -> str:
    return f"""
INSERT OR REPLACE INTO rollup_1m (series_id, bucket, vmin, vmax, vsum, n)
SELECT series_id, :bucket, min(value), max(value), sum(value), count(*)
FROM samples
WHERE series_id IN (SELECT id FROM series WHERE host IN ({_names(hosts)}))
    AND ts >= :bucket AND ts < :bucket + {MINUTE_MS}
GROUP BY series_id
"""


def _roll_hour(hosts: int) -> str:
    return f"""
INSERT OR REPLACE INTO rollup_1h (series_id, bucket, vmin, vmax, vsum, n)
SELECT series_id, :bucket, min(vmin), max(vmax), sum(vsum), sum(n)
FROM rollup_1m
WHERE series_id IN (SELECT id FROM series WHERE host IN ({_names(hosts)}))
    AND bucket >= :bucket AND bucket < :bucket + {HOUR_MS}
GROUP BY series_id
"""


def _names(count: int) -> str:
    return ", ".join(f":h{i}" for i in range(count))


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
    _roll(connection, _roll_minute, minutes)
    _roll(connection, _roll_hour, hours)


def _roll(connection: sqlite3.Connection, statement: Callable[[int], str], buckets: Iterable[tuple[str, int]]) -> None:
    by_bucket: dict[int, list[str]] = {}
    for host, bucket in sorted(set(buckets)):
        by_bucket.setdefault(bucket, []).append(host)
    for bucket, hosts in sorted(by_bucket.items()):
        for start in range(0, len(hosts), _HOSTS):
            part = hosts[start : start + _HOSTS]
            params: dict[str, object] = {f"h{i}": host for i, host in enumerate(part)}
            params["bucket"] = bucket
            connection.execute(statement(len(part)), params)
