"""Reading history back for a chart: pick the resolution by span, return at most `max_points` points.

The tier is the coarsest one whose bucket still fits in one chart point (span / max_points): a
15-minute chart reads raw samples, a day reads 1-minute rollups, a month reads 1-hour rollups. If the
retention policy already deleted that tier for the start of the range, the next coarser tier is used.
Points are grouped into steps that are whole multiples of the tier's bucket, aligned to the epoch
(so a panned chart keeps its points), each with min / mean / max / count.

Buckets a host has not closed yet (the current minute and hour) are not in the rollup tables; they are
read from the finer tier, so the right edge of a chart is never missing.

Per-link NVLink series are kept as rollups only (link_minutes.py): their finest tier is the minute, whose
open bucket is in open_rollup_1m. A chart that reads raw samples reads those series by the minute.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from operator import truediv
from typing import Any

from sqlalchemy import Select, select

from meshdeck.core.errors import InputError
from meshdeck.store import schema
from meshdeck.store.database import Database
from meshdeck.store.link_minutes import rollup_only
from meshdeck.store.retention import RetentionPolicy, load_policy
from meshdeck.store.rollups import HOUR, HOUR_MS, MINUTE, MINUTE_MS, RAW, Tier

DEFAULT_MAX_POINTS = 1000


@dataclass(frozen=True)
class Series:
    id: int
    host: str
    device: str
    metric: str


@dataclass(frozen=True)
class SeriesRange:
    """One series over a time range. `ts` are Unix seconds: the step's start (raw: the first sample's time)."""

    series: Series
    tier: str
    step_s: float
    ts: tuple[float, ...]
    mean: tuple[float, ...]
    minimum: tuple[float, ...]
    maximum: tuple[float, ...]
    count: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.ts)


def _series_query(
    host: str | None, device: str | None, metric: str | None, series_ids: Sequence[int] | None = None
) -> Select[int, str, str, str]:
    table = schema.series
    query = select(table.c.id, table.c.host, table.c.device, table.c.metric)
    if series_ids is not None:
        query = query.where(table.c.id.in_(list(series_ids)))
    if host is not None:
        query = query.where(table.c.host == host)
    if device is not None:
        query = query.where(table.c.device == device)
    if metric is not None:
        query = query.where(table.c.metric == metric)
    return query.order_by(table.c.host, table.c.device, table.c.metric, table.c.id)


def list_series(
    db: Database, *, host: str | None = None, device: str | None = None, metric: str | None = None
) -> list[Series]:
    with db.read() as connection:
        return [Series(*row) for row in connection.execute(_series_query(host, device, metric))]


def choose_tier(span_s: float, max_points: int, since_s: float, policy: RetentionPolicy, now_s: float) -> Tier:
    """The coarsest tier whose bucket fits one point, moved coarser while retention has removed `since`."""
    width_ms = span_s * 1000 / max_points
    tiers = [RAW, MINUTE, HOUR]
    index = 2 if width_ms >= HOUR_MS else 1 if width_ms >= MINUTE_MS else 0
    cutoffs = policy.cutoffs_ms(now_s)
    while index < 2 and (cutoff := cutoffs[tiers[index].table]) is not None and since_s * 1000 < cutoff:
        index += 1
    return tiers[index]


def _step_ms(tier: Tier, span_ms: float, max_points: int) -> int:
    width = math.ceil(span_ms / max_points)
    if tier.bucket_ms == 0:
        return max(1, width)
    return tier.bucket_ms * max(1, math.ceil(width / tier.bucket_ms))


def _segments(
    tier: Tier, open_minute: int | None, lo: int, hi: int, *, finest: str = "samples"
) -> list[tuple[str, int, int]]:
    """(source, start, end) pieces covering [lo, hi): closed buckets from the tier, open ones from finer.
    `finest` is where the open minute is read: the raw samples, or open_rollup_1m for a rollup-only series."""
    if tier is RAW:
        return [("samples", lo, hi)]
    if open_minute is None:
        return [(tier.table, lo, hi)]
    if tier is MINUTE:
        return [("rollup_1m", lo, min(hi, open_minute)), (finest, max(lo, open_minute), hi)]
    open_hour = open_minute - open_minute % HOUR_MS
    return [
        ("rollup_1h", lo, min(hi, open_hour)),
        ("rollup_1m", max(lo, open_hour), min(hi, open_minute)),
        (finest, max(lo, open_minute), hi),
    ]


_SOURCE_COLUMNS = {
    "samples": ("ts", "min(ts), min(value), max(value), sum(value), count(*)"),
    "rollup_1m": ("bucket", "min(bucket), min(vmin), max(vmax), sum(vsum), sum(n)"),
    "rollup_1h": ("bucket", "min(bucket), min(vmin), max(vmax), sum(vsum), sum(n)"),
    "open_rollup_1m": ("bucket", "min(bucket), min(vmin), max(vmax), sum(vsum), sum(n)"),
}


def _source_sql(source: str, series_ids: Sequence[int]) -> str:
    """One statement for all of a host's series: a seek per series on the primary key, grouped per step."""
    column, aggregates = _SOURCE_COLUMNS[source]
    ids = ",".join(str(int(i)) for i in series_ids)
    return (
        f"SELECT series_id, {column} / ? AS g, {aggregates} FROM {source} "
        f"WHERE series_id IN ({ids}) AND {column} >= ? AND {column} < ? GROUP BY series_id, g ORDER BY series_id, g"
    )


def _plans(series: Sequence[Series], tier: Tier, step: int, lo: int) -> list[tuple[list[Series], Tier, int, int, str]]:
    """How to read one host's series: (series, tier, step, start, where the open minute is). Raw-kept
    series at `tier`; rollup-only ones at the minute tier or coarser (one minute per point at least)."""
    kept = [s for s in series if not rollup_only(s.device)]
    rolled = [s for s in series if rollup_only(s.device)]
    plans = [(kept, tier, step, lo, "samples")] if kept else []
    if rolled:
        coarse = MINUTE if tier is RAW else tier
        coarse_step = coarse.bucket_ms * max(1, math.ceil(step / coarse.bucket_ms))
        plans.append((rolled, coarse, coarse_step, lo - lo % coarse.bucket_ms, "open_rollup_1m"))
    return plans


def _read_host(
    connection: sqlite3.Connection,
    series: Sequence[Series],
    tier: Tier,
    step: int,
    open_minute: int | None,
    lo: int,
    hi: int,
    finest: str,
) -> list[SeriesRange]:
    """Series of one host over [lo, hi). Segments come in time order, so only the step at a boundary
    between two segments can need merging."""
    points: dict[int, list[tuple[Any, ...]]] = {s.id: [] for s in series}
    for source, start, end in _segments(tier, open_minute, lo, hi, finest=finest):
        if start >= end:
            continue
        for row in connection.execute(_source_sql(source, list(points)), (step, start, end)):
            kept = points[row[0]]
            if kept and kept[-1][0] == row[1]:
                _, g, first, vmin, vmax, vsum, n = row
                old = kept[-1]
                kept[-1] = (g, min(old[1], first), min(old[2], vmin), max(old[3], vmax), old[4] + vsum, old[5] + n)
            else:
                kept.append(row[1:])
    results = []
    for item in series:
        rows = points[item.id]
        groups, first, vmin, vmax, vsum, count = zip(*rows, strict=True) if rows else ((),) * 6
        ts = tuple(t / 1000 for t in first) if tier is RAW else tuple(g * step / 1000 for g in groups)
        results.append(
            SeriesRange(
                series=item,
                tier=tier.name,
                step_s=step / 1000,
                ts=ts,
                mean=tuple(map(truediv, vsum, count)),
                minimum=tuple(vmin),
                maximum=tuple(vmax),
                count=tuple(count),
            )
        )
    return results


STORED_SECONDS_LIMIT = 9.2e15  # |ts| in seconds whose milliseconds fit SQLite's 64-bit integers


def clamp_to_stored(seconds: float) -> float:
    """`seconds` moved into the span a stored millisecond time can have: a query from -1e300 to 1e300
    selects what one over that span does, instead of failing to bind its bounds."""
    return max(-STORED_SECONDS_LIMIT, min(STORED_SECONDS_LIMIT, seconds))


def tier_by_name(name: str) -> Tier:
    by_name = {t.name: t for t in (RAW, MINUTE, HOUR)}
    if name not in by_name:
        raise InputError("tier", f"{name!r} is not one of raw, 1m, 1h")
    return by_name[name]


def query_range(
    db: Database,
    *,
    since: float,
    until: float,
    host: str | None = None,
    metric: str | None = None,
    device: str | None = None,
    series_ids: Sequence[int] | None = None,
    max_points: int = DEFAULT_MAX_POINTS,
    tier: str | None = None,
    now: float | None = None,
    policy: RetentionPolicy | None = None,
) -> list[SeriesRange]:
    """History of the matching series between `since` and `until` (Unix seconds), one chart's worth.

    Select series by `series_ids`, or by any of host / metric / device. `tier` ("raw", "1m", "1h")
    overrides the automatic choice.
    """
    if not (math.isfinite(since) and math.isfinite(until)) or until <= since:
        raise InputError("range", f"until ({until}) must be after since ({since})")
    if isinstance(max_points, bool) or not isinstance(max_points, int) or max_points < 1:
        raise InputError("max_points", f"{max_points!r} must be a positive integer")
    since, until = clamp_to_stored(since), clamp_to_stored(until)
    if until <= since:  # both beyond what can be stored on the same side: nothing to read
        until = since + 1.0
    if tier is None:
        chosen = choose_tier(until - since, max_points, since, policy or load_policy(db), now or time.time())
    else:
        chosen = tier_by_name(tier)
    step = _step_ms(chosen, (until - since) * 1000, max_points)
    lo = math.floor(since * 1000)
    hi = math.ceil(until * 1000)
    if chosen.bucket_ms:
        lo -= lo % chosen.bucket_ms
    with db.read() as connection:
        matched = [Series(*row) for row in connection.execute(_series_query(host, device, metric, series_ids))]
        by_host: dict[str, list[Series]] = {}
        for series in matched:
            by_host.setdefault(series.host, []).append(series)
        open_minutes: dict[str, int | None] = {}
        if by_host and (chosen is not RAW or any(rollup_only(s.device) for s in matched)):
            state = schema.ingest_state
            query = select(state.c.host, state.c.open_minute).where(state.c.host.in_(sorted(by_host)))
            open_minutes = {host_name: minute for host_name, minute in connection.execute(query)}
        raw = connection.connection.driver_connection  # the same read transaction, without Row objects
        assert isinstance(raw, sqlite3.Connection)
        found: dict[int, SeriesRange] = {}
        for host_name, host_series in by_host.items():
            for group, tier_read, step_read, start, finest in _plans(host_series, chosen, step, lo):
                open_minute = open_minutes.get(host_name)
                for result in _read_host(raw, group, tier_read, step_read, open_minute, start, hi, finest):
                    found[result.series.id] = result
    return [found[series.id] for series in matched]


def raw_points(db: Database, series_id: int, since: float, until: float) -> Iterator[tuple[int, float]]:
    """(ts_ms, value) of one series' raw samples in [since, until), in time order, streamed from the table."""
    with db.read() as connection:
        rows = connection.exec_driver_sql(
            "SELECT ts, value FROM samples WHERE series_id = ? AND ts >= ? AND ts < ? ORDER BY ts",
            (series_id, math.floor(clamp_to_stored(since) * 1000), math.ceil(clamp_to_stored(until) * 1000)),
        )
        yield from rows


def stored_span(db: Database, series_id: int, tier: str) -> tuple[int, int] | None:
    """(first, last) ms a series has data at in the raw table, the rollup `tier` ("1m" / "1h") or its open
    minute (a rollup-only series), each edge a seek on a primary key; None when it has none."""
    table = "rollup_1m" if tier == "1m" else "rollup_1h"
    edges = ", ".join(
        f"(SELECT {edge}({column}) FROM {source} WHERE series_id = :sid)"
        for source, column in (("samples", "ts"), (table, "bucket"), ("open_rollup_1m", "bucket"))
        for edge in ("min", "max")
    )
    with db.read() as connection:
        known = [t for t in connection.exec_driver_sql(f"SELECT {edges}", {"sid": series_id}).one() if t is not None]
    return (min(known), max(known)) if known else None
