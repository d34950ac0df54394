"""Turning batches of sample rows into one committed transaction: series ids, raw rows, rollups, positions.

`SampleIngest` is single-threaded (the writer thread owns it). Rows arrive as `writer.BatchRows`
produces them, `(seq, ts_seconds, device, metric, value)`, per host. A re-delivered sample (backfill
overlapping what is stored, a replay after a restart) is harmless: the raw table's primary key
(series, ts) ignores the row, and rollups are recomputed from raw, never incremented. A sample that
lands in a minute already rolled up (a gap filled late, a clock stepped back) re-rolls that minute.
Per-link NVLink rows are the exception: they are not stored raw but summed into their minute
(`link_minutes.py`, which counts each sample once), so an 8-GPU sample is 112 raw rows, not 400.

Per host the ingest keeps a position: the last seq (what the fleet resumes from; a lower seq with a
later time means the agent restarted and counts from 1 again), the agent's sequence epoch that seq
belongs to (a batch under another epoch starts the count afresh), and the minute still open.

Rows are checked as they are staged (`sample_checks.py`): a row SQLite could not take (a seq or time
beyond int64, a non-finite value) would otherwise fail the one transaction of every host, at each retry.
`add_rows` keeps the storable rows of a batch and says what it refused; the writer counts and logs that.

Everything a commit does — new series, samples, the per-link minutes, the rollups of buckets that
closed, the positions (with the raw rows each host gained) and events — is one SQLite transaction: after
a crash the database holds all of it or none of it, and `CommitAck` reports exactly what became durable.
A commit inserts one host at a time, its rows in key order.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from meshdeck.core.foreground import FOREGROUND, ForegroundGate
from meshdeck.core.samples import SampleBatch, SeriesKey
from meshdeck.store.batch_columns import (
    BatchRows,
    Block,
    Layout,
    add_link_sums,
    columns_storable,
    make_layout,
    raw_rows,
    reported_count,
    series_name,
    values_of,
)
from meshdeck.store.bulk_insert import chunk_rows, chunks, insert_columns, insert_flat, insert_rows
from meshdeck.store.database import Database
from meshdeck.store.events import EventRecord, insert_events
from meshdeck.store.link_minutes import LinkMinutes, LinkMinuteWork, LinkSums, add_to_sums, rollup_only
from meshdeck.store.rollups import HOUR_MS, MINUTE_MS, roll_up
from meshdeck.store.sample_checks import MAX_SQLITE_INTEGER, Refused, epoch_problem, loss_count_problem, storable_rows

log = logging.getLogger(__name__)

SampleRow = tuple[int, float, str, str, float]
"""(seq, ts in Unix seconds, device, metric, value): the shape `writer.BatchRows` yields from a sample batch."""

_INSERT_SAMPLES = "INSERT OR IGNORE INTO samples (series_id, ts, value)"
_INSERT_SERIES = "INSERT INTO series (host, device, metric, labels) VALUES (?, ?, ?, '')"
# An upsert, not a replace: `raw_rows` (the host's rows in the raw table) moves by what each commit adds
# and what retention deletes, in their own transactions.
_SAVE_POSITIONS = """
INSERT INTO ingest_state
    (host, last_seq, last_ts, open_minute, open_hour, samples, dropped, updated_at, seq_epoch, raw_rows)"""
_SAVE_POSITIONS_TAIL = """
ON CONFLICT (host) DO UPDATE SET
    last_seq = excluded.last_seq, last_ts = excluded.last_ts, open_minute = excluded.open_minute,
    open_hour = excluded.open_hour, samples = excluded.samples, dropped = excluded.dropped,
    updated_at = excluded.updated_at, seq_epoch = excluded.seq_epoch,
    raw_rows = ingest_state.raw_rows + excluded.raw_rows
"""
_SELECT_POSITIONS = "SELECT host, last_seq, last_ts, open_minute, samples, dropped, seq_epoch FROM ingest_state"


@dataclass(frozen=True)
class CommittedRange:
    """Every sample of `host` with a seq in first_seq..last_seq submitted before this commit is durable."""

    host: str
    first_seq: int
    last_seq: int
    samples: int


@dataclass(frozen=True)
class CommitAck:
    ranges: tuple[CommittedRange, ...]
    rows: int  # sample rows inserted
    events: int
    duplicates: int  # rows that were already stored (re-delivered samples)
    committed_at: float


@dataclass(frozen=True)
class HostPosition:
    """Where a host's history stands: the last committed sample and the minute bucket still open."""

    last_seq: int
    last_ts_ms: int
    open_minute: int | None
    samples: int = 0
    dropped: int = 0
    epoch: str | None = None  # the agent's sequence epoch last_seq belongs to (None: not known)

    @property
    def open_hour(self) -> int | None:
        return None if self.open_minute is None else self.open_minute - self.open_minute % HOUR_MS


NEW_HOST = HostPosition(last_seq=-1, last_ts_ms=-1, open_minute=None)


def load_positions(connection: sqlite3.Connection) -> dict[str, HostPosition]:
    return {row[0]: HostPosition(*row[1:]) for row in connection.execute(_SELECT_POSITIONS)}


class SampleIngest:
    """Stages rows, events and loss counts, and commits them as one transaction."""

    def __init__(self, connection: sqlite3.Connection, gate: ForegroundGate = FOREGROUND) -> None:
        self._connection = connection
        self._gate = gate  # between hosts a commit steps aside while the console redraws (core/foreground.py)
        self._series: dict[str, dict[tuple[str, str], int]] = {}  # kept raw
        self._link_series: dict[str, dict[tuple[str, str], int]] = {}  # kept as minute rollups (link_minutes.py)
        for series_id, host, device, metric in connection.execute(
            "SELECT id, host, device, metric FROM series WHERE labels = ''"
        ):
            kind = self._link_series if rollup_only(device) else self._series
            kind.setdefault(host, {})[(device, metric)] = series_id
        self._link_minutes = LinkMinutes()
        self._positions = load_positions(connection)
        self._batches: list[tuple[str, Sequence[SampleRow] | SampleBatch, str | None]] = []
        self._layouts: dict[str, Layout] = {}  # per host, the layout of its last batch (batch_columns.py)
        self._dropped: dict[str, int] = {}
        self._events: list[EventRecord] = []
        self._seal: set[str] = set()
        self._seal_all = False
        self.pending_rows = 0

    @property
    def has_pending(self) -> bool:
        return bool(self._batches or self._dropped or self._events or self._seal or self._seal_all)

    def series_count(self) -> int:
        """Series kept raw: what a commit writes a row (and touches a leaf page) for."""
        return sum(len(ids) for ids in self._series.values())

    def all_series_count(self) -> int:
        """Series staged rows can belong to: kept raw, or summed into minutes (link_minutes.py)."""
        return self.series_count() + sum(len(ids) for ids in self._link_series.values())

    def positions(self) -> dict[str, HostPosition]:
        return dict(self._positions)

    def add_rows(self, host: str, rows: Sequence[SampleRow], epoch: str | None = None) -> Refused | None:
        """Stage the storable rows of `host`; `epoch` is the agent's sequence epoch of their seqs (None: not
        known). Returns what was refused (None: nothing); a refused row is never staged."""
        problem = epoch_problem(epoch)
        if problem is not None:
            return Refused(len(rows), problem) if rows else None
        kept, refused = storable_rows(rows)
        if kept:
            self._batches.append((host, kept, epoch))
            self.pending_rows += len(kept)
        return refused

    def add_batch(self, host: str, batch: SampleBatch, epoch: str | None = None) -> Refused | None:
        """Stage a batch as it came (the column path); one with a value, seq or time that cannot be stored
        goes the row path instead, which keeps the storable rows and says what it refused."""
        problem = epoch_problem(epoch)
        if problem is not None:
            return Refused(reported_count(batch), problem) if len(batch) else None
        if not columns_storable(batch):
            return self.add_rows(host, BatchRows(batch), epoch)
        rows = reported_count(batch)
        if rows:
            self._batches.append((host, batch, epoch))
            self.pending_rows += rows
        return None

    def add_dropped(self, host: str, count: int) -> str | None:
        """Add to the samples `host`'s agent lost; returns why the count was refused (None: added)."""
        problem = loss_count_problem(count)
        if problem is None and count > 0:
            self._dropped[host] = self._dropped.get(host, 0) + count
        return problem

    def add_event(self, record: EventRecord) -> None:
        self._events.append(record)

    def seal(self, hosts: Sequence[str] | None = None) -> None:
        """Roll up the open buckets of `hosts` (every host, staged ones included, when None) at the next commit."""
        if hosts is None:
            self._seal_all = True
        else:
            self._seal.update(hosts)

    def idle_hosts(self, now_ms: int, idle_ms: int) -> list[str]:
        """Hosts with an open bucket whose last sample is older than `idle_ms`."""
        return [
            host
            for host, position in self._positions.items()
            if position.open_minute is not None and now_ms - position.last_ts_ms > idle_ms
        ]

    def discard_pending(self) -> int:
        """Forget everything staged (after a commit failed for good); returns the rows dropped."""
        rows = self.pending_rows
        self._batches, self._dropped, self._events, self._seal, self._seal_all = [], {}, [], set(), False
        self.pending_rows = 0
        return rows

    def commit(self) -> CommitAck | None:
        """Write everything staged in one transaction. On an exception nothing was written and the
        staged data is kept (call again to retry, or `discard_pending`)."""
        if not self.has_pending:
            return None
        connection = self._connection
        inserted = 0
        minutes: list[tuple[str, int]] = []
        hours: list[tuple[str, int]] = []
        updated: dict[str, HostPosition] = {}
        ranges: dict[str, CommittedRange] = {}
        created: list[tuple[str, tuple[str, str]]] = []
        raw_added: dict[str, int] = {}
        duplicates = 0
        by_host: dict[str, list[tuple[Sequence[SampleRow] | SampleBatch, str | None]]] = {}
        for host, rows, epoch in self._batches:
            by_host.setdefault(host, []).append((rows, epoch))
        fleet_rows: list[tuple[Any, Any, Any]] = []  # per host: (series ids, times, values), sorted, unique
        connection.execute("BEGIN IMMEDIATE")
        links = self._link_minutes.begin(connection, self._link_series, self._series)
        try:
            for host, batches in by_host.items():
                self._gate.step_aside()
                # One host at a time, its rows sorted by series: each series' rows land on its last leaf
                # page one after another (~1.4x fewer CPU-seconds per row than time order; the sort is
                # stable, so ts stays ascending), and the host's rows added are counted for its raw_rows.
                params: list[tuple[int, int, float]] = []
                arrays: list[tuple[Any, ...]] = []
                position = self._positions.get(host, NEW_HOST)
                for epoch, part in self._blocks(host, batches, created):
                    if epoch != position.epoch:  # another sequence: its seqs do not continue the held one
                        position = replace(
                            position, last_seq=-1 if epoch is not None else position.last_seq, epoch=epoch
                        )
                    if isinstance(part, Block):
                        position, accepted = self._convert_block(host, part, position, arrays, minutes, hours, links)
                    else:
                        position, accepted = self._convert(host, part, position, params, minutes, hours, created, links)
                    if accepted is not None:
                        low, high, count = accepted
                        before = ranges.get(host)
                        ranges[host] = (
                            CommittedRange(host, low, high, count)
                            if before is None
                            else CommittedRange(
                                host, min(low, before.first_seq), max(high, before.last_seq), before.samples + count
                            )
                        )
                updated[host] = position
                stored_until = self._positions.get(host, NEW_HOST).last_ts_ms
                fresh, late = _host_rows(params, arrays, stored_until)
                if fresh is not None:
                    rows_in, unique = fresh
                    fleet_rows.append(unique)
                    raw_added[host] = len(unique[0])
                    duplicates += rows_in - len(unique[0])
                    inserted += rows_in
                if late:  # older than the host's stored rows: may be stored already, counted by SQLite
                    changes_before = connection.total_changes
                    insert_flat(connection, _INSERT_SAMPLES, 3, late)
                    added = connection.total_changes - changes_before
                    raw_added[host] = raw_added.get(host, 0) + added
                    duplicates += len(late) // 3 - added
                    inserted += len(late) // 3
            if fleet_rows:  # every host's new rows in a few statements (bulk_insert.py: the GIL), host by host
                insert_columns(
                    connection, _INSERT_SAMPLES, [np.concatenate(column) for column in zip(*fleet_rows, strict=True)]
                )
            for host in (set(self._positions) | set(updated)) if self._seal_all else self._seal:
                sealed = updated.get(host) or self._positions.get(host)
                if sealed is None or sealed.open_minute is None:
                    continue
                minutes.append((host, sealed.open_minute))
                hours.append((host, sealed.open_minute - sealed.open_minute % HOUR_MS))
                updated[host] = replace(sealed, open_minute=None)
            for host, count in self._dropped.items():
                position = updated.get(host) or self._positions.get(host, NEW_HOST)
                updated[host] = replace(position, dropped=min(position.dropped + count, MAX_SQLITE_INTEGER))
            open_minutes = {host: p.open_minute for host, p in (self._positions | updated).items()}
            links.write(open_minutes, minutes)
            roll_up(connection, minutes, hours)
            now = time.time()
            insert_rows(
                connection,
                _SAVE_POSITIONS,
                10,
                [
                    (
                        host,
                        p.last_seq,
                        p.last_ts_ms,
                        p.open_minute,
                        p.open_hour,
                        p.samples,
                        p.dropped,
                        now,
                        p.epoch,
                        raw_added.get(host, 0),
                    )
                    for host, p in updated.items()
                ],
                _SAVE_POSITIONS_TAIL,
            )
            events = insert_events(connection, self._events)
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            self._layouts.clear()  # they may name series the rollback took back
            for host, key in created:
                self._series.get(host, {}).pop(key, None)
                self._link_series.get(host, {}).pop(key, None)
            raise
        links.kept(open_minutes)
        self._positions.update(updated)
        self._batches, self._dropped, self._events, self._seal, self._seal_all = [], {}, [], set(), False
        self.pending_rows = 0
        return CommitAck(tuple(ranges.values()), inserted, events, duplicates, now)

    def _blocks(
        self,
        host: str,
        batches: list[tuple[Sequence[SampleRow] | SampleBatch, str | None]],
        created: list[tuple[str, tuple[str, str]]],
    ) -> list[tuple[str | None, Block | Sequence[SampleRow]]]:
        """The host's staged items in order, consecutive batches of one layout and epoch joined in a Block."""
        parts: list[tuple[str | None, Block | Sequence[SampleRow]]] = []
        for item, epoch in batches:
            if not isinstance(item, SampleBatch):
                parts.append((epoch, item))
                continue
            layout = self._layout(host, item.series, created)
            last = parts[-1] if parts else None
            if last is not None and last[0] == epoch and isinstance(last[1], Block) and last[1].layout is layout:
                block = last[1]
                block.seqs.extend(item.seqs)
                block.times.extend(item.times)
                block.values.append(values_of(item))
            else:
                parts.append((epoch, Block(layout, list(item.seqs), list(item.times), [values_of(item)])))
        return parts

    def _convert(
        self,
        host: str,
        rows: Sequence[SampleRow],
        position: HostPosition,
        params: list[tuple[int, int, float]],
        minutes: list[tuple[str, int]],
        hours: list[tuple[str, int]],
        created: list[tuple[str, tuple[str, str]]],
        links: LinkMinuteWork,
    ) -> tuple[HostPosition, tuple[int, int, int] | None]:
        """The row path (rows submitted as rows, or a batch the column path would not take): one pass over
        the rows, with per-sample work only when the seq changes.

        Rows of rollup-only series (per-link NVLink) are added to their minute's sums instead of `params`.
        Returns the new position and (lowest seq, highest seq, samples) seen, or None for no rows.
        """
        ids = self._series.setdefault(host, {})
        link_ids = self._link_series.setdefault(host, {})
        stored_until = self._positions.get(host, NEW_HOST).last_ts_ms
        append = params.append
        cursor = _Cursor(host, position, minutes, hours)
        current: int | None = None
        ts_ms = minute = 0
        sample_links: dict[int, LinkSums] | None = None
        links_found = False
        for seq, ts, device, metric, value in rows:
            if seq != current:
                current = seq
                links_found = False
                ts_ms, minute = cursor.sample(seq, ts)
            key = (device, metric)
            series_id = ids.get(key)
            if series_id is None:
                link_id = link_ids.get(key)
                if link_id is None and rollup_only(device):
                    link_id = self._new_series(host, key, link_ids, created)
                if link_id is not None:
                    if not links_found:
                        sample_links = links.sums_for_sample(host, minute, ts_ms, stored_until)
                        links_found = True
                    if sample_links is not None:
                        add_to_sums(sample_links, link_id, value, value, value, 1)
                    continue
                series_id = self._new_series(host, key, ids, created)
            append((series_id, ts_ms, value))
        return cursor.result(position)

    def _convert_block(
        self,
        host: str,
        block: Block,
        position: HostPosition,
        arrays: list[tuple[Any, ...]],
        minutes: list[tuple[str, int]],
        hours: list[tuple[str, int]],
        links: LinkMinuteWork,
    ) -> tuple[HostPosition, tuple[int, int, int] | None]:
        """The column path (batch_columns.py): per-sample bookkeeping in Python, the values with numpy.
        Appends (series ids, times ms, values) arrays of the raw rows to `arrays`."""
        layout = block.layout
        values = block.matrix()
        reported = ~np.isnan(values)
        has_any = cast(list[bool], reported.any(axis=1).tolist())
        has_link = (
            cast(list[bool], reported[:, layout.link_columns].any(axis=1).tolist())
            if layout.link_ids
            else [False] * len(has_any)
        )
        stored_until = self._positions.get(host, NEW_HOST).last_ts_ms
        cursor = _Cursor(host, position, minutes, hours)
        ts_list: list[int] = []
        link_rows: dict[int, tuple[dict[int, LinkSums], list[int]]] = {}
        for row, (seq, ts) in enumerate(zip(block.seqs, block.times, strict=True)):
            if not has_any[row]:  # nothing reported: the row path never sees the sample either
                ts_list.append(0)
                continue
            ts_ms, minute = cursor.sample(seq, ts)
            ts_list.append(ts_ms)
            if has_link[row]:
                sample_links = links.sums_for_sample(host, minute, ts_ms, stored_until)
                if sample_links is not None:
                    link_rows.setdefault(id(sample_links), (sample_links, []))[1].append(row)
        for sample_links, rows in link_rows.values():
            add_link_sums(layout, values, rows, sample_links)
        keep = np.array(has_any, dtype=bool)
        if layout.raw_ids.size and keep.any():
            arrays.append(raw_rows(layout, values, np.array(ts_list, dtype=np.int64), keep))
        return cursor.result(position)

    def _layout(self, host: str, series: tuple[SeriesKey, ...], created: list[tuple[str, tuple[str, str]]]) -> Layout:
        """The host's layout for these series (made once per layout, new series created in the commit)."""
        known = self._layouts.get(host)
        if known is not None and (known.series is series or known.series == series):
            return known
        ids = self._series.setdefault(host, {})
        link_ids = self._link_series.setdefault(host, {})
        names = [series_name(key) for key in series]
        missing = list(dict.fromkeys(name for name in names if name not in ids and name not in link_ids))
        if missing:  # a new host's ~440 series in a few statements, not one each (bulk_insert.py: the GIL)
            for name, new_id in self._create_series(host, missing).items():
                (link_ids if rollup_only(name[0]) else ids)[name] = new_id
                created.append((host, name))

        def series_id(key: SeriesKey) -> tuple[int, bool]:
            name = series_name(key)
            found = ids.get(name)
            if found is not None:
                return found, False
            return link_ids[name], True

        layout = make_layout(series, series_id)
        self._layouts[host] = layout
        return layout

    def _create_series(self, host: str, names: list[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """Insert `names` of `host` as new series; returns their ids."""
        created: dict[tuple[str, str], int] = {}
        step = chunk_rows(self._connection, 3)
        for part in chunks(names, step):
            sql = (
                "INSERT INTO series (host, device, metric, labels) VALUES "
                + ",".join(["(?, ?, ?, '')"] * len(part))
                + " RETURNING id, device, metric"
            )
            params = [value for device, metric in part for value in (host, device, metric)]
            for series_id, device, metric in self._connection.execute(sql, params).fetchall():
                created[(device, metric)] = series_id
        return created

    def _new_series(
        self,
        host: str,
        key: tuple[str, str],
        ids: dict[tuple[str, str], int],
        created: list[tuple[str, tuple[str, str]]],
    ) -> int:
        series_id = self._connection.execute(_INSERT_SERIES, (host, *key)).lastrowid
        assert series_id is not None
        ids[key] = series_id
        created.append((host, key))
        return series_id


def _host_rows(
    params: list[tuple[int, int, float]], arrays: list[tuple[Any, ...]], stored_until: int
) -> tuple[tuple[int, tuple[Any, Any, Any]] | None, list[Any]]:
    """One host's raw rows split by time. Rows newer than the host's newest stored one cannot be stored
    yet: they are returned as (their count, (series ids, times, values) sorted by series then time, each
    (series, time) once — the first staged wins, as INSERT OR IGNORE would keep it), for the fleet-wide
    insert; SQLite need not say which were new. Older rows (a late sample, a replay) come back flat,
    sorted by series, to be inserted on their own with SQLite counting what it ignored."""
    if params:
        arrays = [
            *arrays,
            (
                np.fromiter((row[0] for row in params), dtype=np.int64, count=len(params)),
                np.fromiter((row[1] for row in params), dtype=np.int64, count=len(params)),
                np.fromiter((row[2] for row in params), dtype=np.float64, count=len(params)),
            ),
        ]
    if not arrays:
        return None, []
    ids = np.concatenate([a[0] for a in arrays])
    times = np.concatenate([a[1] for a in arrays])
    values = np.concatenate([a[2] for a in arrays])
    late: list[Any] = []
    old = times <= stored_until
    if old.any():
        order = np.argsort(ids[old], kind="stable")
        late = [None] * (3 * len(order))
        late[0::3] = ids[old][order].tolist()
        late[1::3] = times[old][order].tolist()
        late[2::3] = values[old][order].tolist()
        new = ~old
        ids, times, values = ids[new], times[new], values[new]
    if not len(ids):
        return None, late
    order = np.lexsort((times, ids))  # stable: equal (series, time) keep their staged order
    ids, times, values = ids[order], times[order], values[order]
    first = np.ones(len(ids), dtype=bool)
    first[1:] = (ids[1:] != ids[:-1]) | (times[1:] != times[:-1])
    return (len(ids), (ids[first], times[first], values[first])), late


class _Cursor:
    """One host's position advanced sample by sample (both conversion paths): the last seq and time, the
    open minute, the minutes and hours that closed (or were reopened by a late sample), and the seqs seen."""

    __slots__ = ("count", "high", "host", "hours", "last_seq", "last_ts", "low", "minutes", "open_minute")

    def __init__(
        self, host: str, position: HostPosition, minutes: list[tuple[str, int]], hours: list[tuple[str, int]]
    ) -> None:
        self.host = host
        self.minutes = minutes
        self.hours = hours
        self.last_seq, self.last_ts, self.open_minute = position.last_seq, position.last_ts_ms, position.open_minute
        self.low = self.high = -1
        self.count = 0

    def sample(self, seq: int, ts: float) -> tuple[int, int]:
        """Count one sample; returns its time in ms and its minute."""
        ts_ms = round(ts * 1000)
        if self.count == 0 or seq < self.low:
            self.low = seq
        if self.count == 0 or seq > self.high:
            self.high = seq
        self.count += 1
        if ts_ms > self.last_ts:  # a newer sample (possibly from a restarted agent with a lower seq)
            self.last_ts = ts_ms
            self.last_seq = seq
        elif seq > self.last_seq:
            self.last_seq = seq
        minute = ts_ms - ts_ms % MINUTE_MS
        open_minute = self.open_minute
        if minute != open_minute:
            host = self.host
            if open_minute is None or minute > open_minute:
                if open_minute is not None:
                    self.minutes.append((host, open_minute))
                    open_hour = open_minute - open_minute % HOUR_MS
                    if minute - minute % HOUR_MS != open_hour:
                        self.hours.append((host, open_hour))
                self.open_minute = minute
            else:  # a late sample: its minute (and maybe its hour) was rolled up already
                self.minutes.append((host, minute))
                hour = minute - minute % HOUR_MS
                if hour != open_minute - open_minute % HOUR_MS:
                    self.hours.append((host, hour))
        return ts_ms, minute

    def result(self, position: HostPosition) -> tuple[HostPosition, tuple[int, int, int] | None]:
        """The new position and (lowest seq, highest seq, samples) seen, or None for no samples."""
        new_position = HostPosition(
            self.last_seq,
            self.last_ts,
            self.open_minute,
            position.samples + self.count,
            position.dropped,
            position.epoch,
        )
        return new_position, (None if self.count == 0 else (self.low, self.high, self.count))


def ingest_positions(db: Database) -> dict[str, HostPosition]:
    """Per host, the last committed sample: the fleet passes `last_seq` as since_seq when it reconnects."""
    with db.read() as connection:
        rows = connection.exec_driver_sql(_SELECT_POSITIONS).all()
    return {row[0]: HostPosition(*row[1:]) for row in rows}
