"""The raw tier's size, and deleting its oldest samples: what the retention policy's size budget needs.

Rows: each host's `raw_rows` in ingest_state, moved by every commit (rows it added) and every deletion
(rows it took away) in the same transaction, so the sum is exact without counting a table that may hold
billions of rows. Bytes per row: measured on the table's first leaf pages through SQLite's dbstat
(`LIMIT`ed, a few hundred page reads however large the table): the samples are keyed (series, time),
so those pages have the layout every series has, its partly filled last page included. The size is
their product: what the raw tier takes in the file, give or take the sample's spread.

Over budget, the oldest samples go first: from the oldest sample stored, at most `max_span_s` of history
per pass and a few passes (the writer enforces after each commit, so the work stays short and the
catch-up steady),
cut where the rows are expected to bring the tier to 95 % of the budget, rows assumed spread evenly in
time; never into a minute still open (it is rolled up from its raw samples when it closes).
"""

from __future__ import annotations

import logging
import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

SAMPLE_PAGES = 256  # leaf pages read to measure bytes per row
HEADROOM = 0.05  # over budget, delete down to 95 % of it: the next commits do not cross it again at once
log = logging.getLogger(__name__)
_WARNED = False


@dataclass(frozen=True)
class RawTierSize:
    rows: int
    bytes_per_row: float  # 0.0 while the table is empty

    @property
    def bytes(self) -> int:
        return round(self.rows * self.bytes_per_row)


def raw_series(connection: sqlite3.Connection) -> list[tuple[str, int]]:
    """(host, series id) of every series, in id order (a host's series are mostly neighbours)."""
    return [(host, series_id) for series_id, host in connection.execute("SELECT id, host FROM series ORDER BY id")]


def raw_rows(connection: sqlite3.Connection) -> int:
    return int(connection.execute("SELECT coalesce(sum(raw_rows), 0) FROM ingest_state").fetchone()[0])


def bytes_per_row(connection: sqlite3.Connection) -> float:
    """Page bytes per row on the raw table's first SAMPLE_PAGES leaf pages (0.0 for an empty table)."""
    try:
        pages, cells = connection.execute(
            "SELECT coalesce(sum(pgsize), 0), coalesce(sum(ncell), 0) FROM "
            f"(SELECT pgsize, ncell FROM dbstat WHERE name = 'samples' AND pagetype = 'leaf' LIMIT {SAMPLE_PAGES})"
        ).fetchone()
    except sqlite3.OperationalError as exc:
        if "dbstat" not in str(exc):
            raise
        global _WARNED
        if not _WARNED:
            log.warning("this SQLite has no dbstat table: the raw tier's size (and its budget) is not measured")
            _WARNED = True
        return 0.0
    return pages / cells if cells else 0.0


def raw_tier_size(connection: sqlite3.Connection) -> RawTierSize:
    return RawTierSize(raw_rows(connection), bytes_per_row(connection))


def delete_raw_before(
    connection: sqlite3.Connection, series: Sequence[tuple[str, int]], cutoff_ms: int, series_per_transaction: int
) -> int:
    """Delete raw samples older than `cutoff_ms`, a transaction per `series_per_transaction` series, each
    taking what it deleted off its hosts' raw_rows; returns the rows deleted."""
    deleted = 0
    for start in range(0, len(series), series_per_transaction):
        per_host: dict[str, int] = {}
        connection.execute("BEGIN IMMEDIATE")
        try:
            for host, series_id in series[start : start + series_per_transaction]:
                before = connection.total_changes
                connection.execute("DELETE FROM samples WHERE series_id = ? AND ts < ?", (series_id, cutoff_ms))
                gone = connection.total_changes - before
                if gone:
                    per_host[host] = per_host.get(host, 0) + gone
            connection.executemany(
                "UPDATE ingest_state SET raw_rows = max(0, raw_rows - ?) WHERE host = ?",
                [(count, host) for host, count in per_host.items()],
            )
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        deleted += sum(per_host.values())
    return deleted


def _oldest_ms(connection: sqlite3.Connection, series: Sequence[tuple[str, int]]) -> int | None:
    """The oldest raw sample's time: a seek per series on the primary key."""
    oldest = None
    for _, series_id in series:
        first = connection.execute("SELECT min(ts) FROM samples WHERE series_id = ?", (series_id,)).fetchone()[0]
        if first is not None and (oldest is None or first < oldest):
            oldest = first
    return oldest


def enforce_raw_budget(
    connection: sqlite3.Connection,
    max_bytes: int,
    *,
    max_span_s: float = 300.0,
    passes: int = 4,
    series_per_transaction: int = 512,
) -> int:
    """Delete the oldest raw samples while the raw tier is over `max_bytes`: up to `passes` passes of at most
    `max_span_s` of history each, re-measured after each (the pages a deletion leaves part-filled still
    take their room); returns the rows deleted."""
    deleted = 0
    for _ in range(passes):
        gone = _delete_oldest(connection, max_bytes, max_span_s, series_per_transaction)
        if not gone:
            break
        deleted += gone
    return deleted


def _delete_oldest(
    connection: sqlite3.Connection, max_bytes: int, max_span_s: float, series_per_transaction: int
) -> int:
    size = raw_tier_size(connection)
    if size.bytes <= max_bytes or size.rows == 0:
        return 0
    series = raw_series(connection)
    oldest = _oldest_ms(connection, series)
    newest = connection.execute("SELECT max(last_ts) FROM ingest_state").fetchone()[0]
    if oldest is None or newest is None:
        return 0
    target = max_bytes * (1 - HEADROOM)
    share = (size.bytes - target) / size.bytes  # of the rows, so of the span if they are spread evenly
    span = max(1, newest - oldest)
    cut = oldest + min(max(1, math.ceil(span * share)), round(max_span_s * 1000))
    open_minute = connection.execute("SELECT min(open_minute) FROM ingest_state").fetchone()[0]
    if open_minute is not None:
        cut = min(cut, open_minute)  # a minute still open is rolled up from its raw samples when it closes
    if cut <= oldest:
        return 0
    return delete_raw_before(connection, series, cut, series_per_transaction)
