"""Metric history for the console and the CLI: record the fleet's events, chart a range, export.

    writer = SampleWriter(db).start()
    recorder = HistoryRecorder(writer)
    unsubscribe = fleet.subscribe(recorder.handle)          # samples, host states, worker events, XIDs
    point = resume_points(db)[host.name]                    # the last stored seq and its sequence epoch
    fleet.add_record(host, since_seq=point.seq, since_epoch=point.epoch)

`HistoryRecorder.handle` runs on the fleet's threads (remote/sample_pump.py) and only enqueues (waiting while the
writer's bounded inbox is full: that host's agent then holds its samples); the writer thread does the
database work. Times given on the command line (`--since`, `--until`) are parsed by
`parse_time`: Unix seconds, ISO 8601 (UTC unless an offset is given), `now`, or an age such as
`2h` / `-90m` / `7d` meaning that long ago.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import re
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any

from meshdeck.core.errors import InputError
from meshdeck.services.events import AgentEvent, FleetEvent, HostStateChanged, SamplesReceived, SequenceReset
from meshdeck.services.metrics import series_unit
from meshdeck.store.database import Database
from meshdeck.store.events import EventRecord
from meshdeck.store.ingest import ingest_positions
from meshdeck.store.link_minutes import rollup_only
from meshdeck.store.query import Series, list_series, query_range, raw_points, stored_span, tier_by_name
from meshdeck.store.query import SeriesRange as SeriesRange  # the console's history charts read it
from meshdeck.store.raw_tier import RawTierSize, raw_tier_size
from meshdeck.store.rollups import RAW
from meshdeck.store.writer import SampleWriter

log = logging.getLogger(__name__)

EXPORT_FORMATS = ("csv", "json")


class HistoryRecorder:
    """Turns fleet events into writer submissions (samples) and history events (everything else)."""

    def __init__(self, writer: SampleWriter) -> None:
        self.writer = writer

    def handle(self, event: FleetEvent) -> None:
        try:
            self._handle(event)
        except RuntimeError:  # the writer stopped (app shutting down): nothing left to record into
            log.debug("history writer stopped; dropped %s", type(event).__name__)

    def _handle(self, event: FleetEvent) -> None:
        if isinstance(event, SamplesReceived):
            if len(event.batch) or event.dropped:
                self.writer.submit_samples(event.host, event.batch, dropped=event.dropped, epoch=event.epoch)
        elif isinstance(event, SequenceReset):
            data = {
                "epoch": event.epoch,
                "previous_epoch": event.previous_epoch,
                "previous_seq": event.previous_seq,
                "reason": event.reason,
            }
            self.writer.submit_event(EventRecord("seq_reset", event.ts or time.time(), host=event.host, data=data))
        elif isinstance(event, HostStateChanged):
            data = {"state": event.state, "reason": event.reason}
            self.writer.submit_event(EventRecord("host_state", event.ts or time.time(), host=event.host, data=data))
        elif isinstance(event, AgentEvent):
            record = agent_event_record(event)
            if record is not None:
                self.writer.submit_event(record)


def _ts(data: dict[str, Any]) -> float:
    value = data.get("ts")
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return time.time()


def agent_event_record(event: AgentEvent) -> EventRecord | None:
    """The history event for an agent notification, or None for one not worth keeping (plain log lines)."""
    data = dict(event.data)
    if event.event == "worker":
        return EventRecord("worker_state", _ts(data), host=event.host, subject=str(data.get("id")), data=data)
    if event.event == "log" and data.get("kind") in ("nccl_transport", "vllm_startup"):
        fields = dict(data.get("fields") or {})
        return EventRecord(str(data["kind"]), _ts(data), host=event.host, subject=str(data.get("worker")), data=fields)
    if event.event == "alert":
        if data.get("kind") == "xid":
            return EventRecord("xid", _ts(data), host=event.host, subject=f"gpu{data.get('gpu')}", data=data)
        return EventRecord("alert", _ts(data), host=event.host, subject=str(data.get("kind")), data=data)
    return None


@dataclass(frozen=True)
class ResumePoint:
    """Where a host's stored history ends: its last seq and the agent's sequence epoch it belongs to."""

    seq: int
    epoch: str | None  # None: stored before epochs, or from an agent without them


def resume_points(db: Database) -> dict[str, ResumePoint]:
    """Per host, the last seq stored and its epoch: pass them as `since_seq` / `since_epoch`."""
    return {host: ResumePoint(p.last_seq, p.epoch) for host, p in ingest_positions(db).items() if p.last_seq >= 0}


@dataclass(frozen=True)
class HostHistory:
    host: str
    series: int
    samples: int  # received (re-deliveries included)
    dropped: int  # lost by the agent's ring before meshdeck read them
    last_seq: int
    last_ts: float
    raw_rows: int = 0  # rows of the host in the raw tier now
    raw_bytes: int = 0  # what they take in the file (store/raw_tier.py)
    bytes_per_sample: float = 0.0  # raw bytes one sample of the host takes: its raw series x bytes per row


def history_hosts(db: Database) -> list[HostHistory]:
    positions = ingest_positions(db)
    counts: dict[str, int] = {}
    raw_kept: dict[str, int] = {}
    for series in list_series(db):
        counts[series.host] = counts.get(series.host, 0) + 1
        if not rollup_only(series.device):
            raw_kept[series.host] = raw_kept.get(series.host, 0) + 1
    per_row = raw_tier(db).bytes_per_row
    rows = raw_rows_by_host(db)
    return [
        HostHistory(
            host,
            counts.get(host, 0),
            p.samples,
            p.dropped,
            p.last_seq,
            p.last_ts_ms / 1000,
            rows.get(host, 0),
            round(rows.get(host, 0) * per_row),
            raw_kept.get(host, 0) * per_row,
        )
        for host, p in sorted(positions.items())
    ]


def raw_tier(db: Database) -> RawTierSize:
    """The raw tier now: rows, bytes per row, bytes (what `--raw-max-size` is compared with)."""
    with db.read() as connection:
        raw = connection.connection.driver_connection
        assert isinstance(raw, sqlite3.Connection)
        return raw_tier_size(raw)


def raw_rows_by_host(db: Database) -> dict[str, int]:
    with db.read() as connection:
        return {host: int(rows) for host, rows in connection.exec_driver_sql("SELECT host, raw_rows FROM ingest_state")}


def host_metrics(db: Database, host: str) -> dict[str, list[str]]:
    """What the history view can chart for a host: metric -> the devices that report it."""
    metrics: dict[str, list[str]] = {}
    for series in list_series(db, host=host):
        metrics.setdefault(series.metric, []).append(series.device)
    return dict(sorted(metrics.items()))


def chart(
    db: Database,
    *,
    host: str,
    metric: str,
    since: float,
    until: float,
    device: str | None = None,
    max_points: int = 1000,
) -> list[SeriesRange]:
    """One chart's worth of history (every device of `host` reporting `metric`), tier chosen by span.

    The charts draw per-GPU NVLink sums, so per-link series (kept by the minute only, store/link_minutes.py)
    are read only when one is asked for by `device`: mixed in, they would give one chart two resolutions."""
    if device is not None:
        return query_range(db, host=host, metric=metric, device=device, since=since, until=until, max_points=max_points)
    drawn = [s.id for s in list_series(db, host=host, metric=metric) if not rollup_only(s.device)]
    if not drawn:
        return []
    return query_range(db, series_ids=drawn, since=since, until=until, max_points=max_points)


# -- times ------------------------------------------------------------------------------------------

_AGE = re.compile(r"^-?(?P<amount>\d+(?:\.\d+)?)\s*(?P<unit>s|m|min|h|d|w)$")
_UNIT_S = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_time(text: str, *, field: str, now: float | None = None) -> float:
    """Unix seconds from `1764482400`, `2025-11-30T06:00:00Z`, `2025-11-30 06:00` (UTC), `now`, `2h` (ago)."""
    current = time.time() if now is None else now
    value = text.strip()
    if value == "now":
        return current
    age = _AGE.match(value)
    if age:
        return current - float(age.group("amount")) * _UNIT_S[age.group("unit")]
    try:
        number = float(value)
    except ValueError:
        pass
    else:
        if math.isfinite(number):
            return number
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(
            field, f"{text!r} is not a time: use Unix seconds, ISO 8601 (2025-11-30T06:00Z), 'now' or an age like 2h"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


# -- export -----------------------------------------------------------------------------------------


def utc_stamp(ts: float) -> str:
    """`2025-11-30 06:00:00Z`: how tables on the command line show a time (`out of range (ts 1e+12)` for
    one no calendar can show: a database may hold such a time from before the store refused them)."""
    moment = _utc(ts)
    return _out_of_range(ts) if moment is None else moment.strftime("%Y-%m-%d %H:%M:%SZ")


def iso_time(ts: float) -> str:
    """`2025-11-30T06:00:00.250Z`: the time column of an export (out of range as in `utc_stamp`)."""
    moment = _utc(ts)
    return _out_of_range(ts) if moment is None else moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _utc(ts: float) -> datetime | None:
    try:
        return datetime.fromtimestamp(ts, UTC)
    except (OverflowError, OSError, ValueError):  # beyond year 1..9999, beyond the C time_t, NaN
        return None


def _out_of_range(ts: float) -> str:
    return f"out of range (ts {ts:g})"


def check_export_format(fmt: str) -> None:
    if fmt not in EXPORT_FORMATS:
        raise InputError("--format", f"{fmt!r} is not one of {', '.join(EXPORT_FORMATS)}")


def export_history(
    db: Database,
    out: IO[str],
    *,
    host: str,
    metric: str | None = None,
    device: str | None = None,
    since: float | None = None,
    until: float | None = None,
    fmt: str = "csv",
    tier: str = "raw",
) -> int:
    """Write every point of the matching series in [since, until) to `out`; returns the number of points.

    raw: one row per sample (time, ts, host, device, metric, unit, value); per-link NVLink series, kept as
    rollups only, are left out (asked for alone, the error says to use 1m). 1m / 1h: one row per bucket
    with min, mean, max and count (the open bucket computed from the finer tier). `unit` is the metric
    registry's (meshdeck.services.metrics): empty for a unitless metric or one the registry lacks.
    """
    check_export_format(fmt)
    chosen = tier_by_name(tier)
    matched = list_series(db, host=host, metric=metric, device=device)
    if not matched:
        known = sorted({s.host for s in list_series(db)})
        if host not in known:
            raise InputError(
                "--host", f"no history for host {host!r} (hosts with history: {', '.join(known) or 'none'})"
            )
        raise InputError("--metric", f"host {host!r} has no series matching metric={metric!r} device={device!r}")
    if chosen is RAW:
        kept = [series for series in matched if not rollup_only(series.device)]
        if not kept:
            raise InputError(
                "--tier",
                f"{matched[0].device} {matched[0].metric} is kept as 1-minute rollups, not raw samples "
                "(per-link NVLink detail; the GPU's sum is kept raw): use --tier 1m or 1h",
            )
        matched = kept
    start = 0.0 if since is None else since
    end = time.time() + 86400 if until is None else until
    if end <= start:
        raise InputError("--until", f"must be after --since ({iso_time(start)})")
    writer = export_writer(out, fmt, raw=chosen is RAW)
    count = 0
    for series in matched:
        for row in _series_rows(db, series, chosen.name, start, end):
            writer.write(row)
            count += 1
    writer.close()
    return count


def _series_rows(db: Database, series: Series, tier: str, since: float, until: float) -> Iterator[list[Any]]:
    """One series' points in time order: raw rows streamed from the table, buckets through query_range
    over the span the series actually has data in (so an open-ended range costs nothing extra)."""
    prefix = [series.host, series.device, series.metric, series_unit(series.device, series.metric)]
    if tier == "raw":
        for ts_ms, value in raw_points(db, series.id, since, until):
            yield [iso_time(ts_ms / 1000), ts_ms / 1000, *prefix, value]
        return
    span = stored_span(db, series.id, tier)
    if span is None:
        return
    first, last = span
    bucket_s = 60.0 if tier == "1m" else 3600.0
    start = max(since, first / 1000)
    start -= start % bucket_s
    stop = min(until, last / 1000 + bucket_s)
    if stop <= start:
        return
    points = max(1, math.ceil((stop - start) / bucket_s))
    (result,) = query_range(db, series_ids=[series.id], since=start, until=stop, tier=tier, max_points=points)
    for i, ts in enumerate(result.ts):
        yield [iso_time(ts), ts, *prefix, result.minimum[i], result.mean[i], result.maximum[i], result.count[i]]


def export_writer(out: IO[str], fmt: str, *, raw: bool) -> _RowWriter:
    """The writer of an export's rows (any source's): CSV or JSON with the columns of a raw or a bucketed
    export. `fmt` was checked with `check_export_format` before anything was asked of the source."""
    header = ["time", "ts", "host", "device", "metric", "unit"]
    header += ["value"] if raw else ["min", "mean", "max", "count"]
    return _RowWriter(out, fmt, header)


class _RowWriter:
    """CSV rows, or a JSON array of objects written as it goes (one object per line)."""

    def __init__(self, out: IO[str], fmt: str, header: list[str]) -> None:
        self.out, self.fmt, self.header = out, fmt, header
        self.first = True
        if fmt == "csv":
            self.csv = csv.writer(out, lineterminator="\n")
            self.csv.writerow(header)
        else:
            out.write("[")

    def write(self, row: list[Any]) -> None:
        if self.fmt == "csv":
            self.csv.writerow(row)
            return
        self.out.write(("\n" if self.first else ",\n") + json.dumps(dict(zip(self.header, row, strict=True))))
        self.first = False

    def close(self) -> None:
        if self.fmt == "json":
            self.out.write("\n]\n" if not self.first else "]\n")
