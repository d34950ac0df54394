"""The one thread that writes metric history: batches from a queue, one transaction per batch.

Callers (the fleet adapter in `services/history.py`, tests, the ingest benchmark) hand it sample
batches (already checked and flattened: core.samples.SampleBatch) or rows per host. The inbox is
bounded (`inbox_cells`, store/inbox.py): a caller returns at once while there is room and waits when
the writer is behind — the one place the sample path waits; the agents' rings hold the samples
meanwhile. The thread stages everything it finds in the inbox and commits when the oldest staged item is as old as the commit interval, when
`max_batch_rows` are staged, or when someone calls `flush()`. Each commit is reported as a
`CommitAck` (which seqs of which host are now durable) to `on_commit` and in `committed_seq()`: the
fleet resumes from there after a restart, and the agent's ring buffer (2 h) covers whatever was still
in flight when the app died.

Why the interval grows with the fleet: samples are keyed (series, time), so one commit rewrites one
B-tree leaf page per series however few rows each got. The default interval is the number of series
/ `series_per_commit_second`, between 2 and 30 s: a 1-host fleet commits every 2 s, 64 hosts × 96
series every 30 s, and the WAL traffic stays near 200 pages a second instead of growing with the
fleet. Measured at 64 hosts: 2.4 MB/s of disk writes committing every 10 s, 0.45 MB/s every 30 s
with the larger auto-checkpoint below (tests/benchmarks/test_bench_store.py prints it). The cap on staged
rows, the page cache and the WAL's checkpoint size follow the series too, so at 278 hosts the interval
still sets the cadence, a commit's pages stay in the cache and a checkpoint spans about two commits
(tests/benchmarks/test_bench_fleet_store.py prints that fleet's numbers).

A failed commit (disk full, a lock held too long) keeps the batch staged and retries after
`retry_s`; nothing is acknowledged until it is durable. A row that no commit could take (a time
beyond 2100, a seq beyond int64, a non-finite value) is refused when it is staged, for its host alone:
counted in `WriterStats.refused_rows` and logged at most once a minute per host (refusal_log.py).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from meshdeck.core.foreground import FOREGROUND, ForegroundGate
from meshdeck.core.samples import SampleBatch
from meshdeck.store.batch_columns import BatchRows as BatchRows  # where the fleet's callers find it
from meshdeck.store.database import Database
from meshdeck.store.events import EventRecord
from meshdeck.store.inbox import BoundedInbox, Empty, InboxClosed
from meshdeck.store.ingest import CommitAck, HostPosition, SampleIngest, SampleRow
from meshdeck.store.raw_tier import RawTierSize, enforce_raw_budget, raw_tier_size
from meshdeck.store.refusal_log import RefusalLog
from meshdeck.store.retention import RetentionPolicy, apply_retention, load_policy
from meshdeck.store.sample_checks import Refused

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WriterSettings:
    commit_interval_s: float | None = None  # None: adaptive, series / series_per_commit_second in [2, 30] s
    series_per_commit_second: float = 200.0
    min_commit_interval_s: float = 2.0
    max_commit_interval_s: float = 30.0
    # Checkpoint the WAL every this many pages: a page rewritten by several commits (each series' last leaf
    # page is, until it is full) reaches the database file once per checkpoint. None sizes it to about two
    # commits of the series stored (`wal_pages_per_series` each), within the bounds: at 278 hosts a commit
    # writes ~32,000 pages, and a WAL smaller than one commit checkpointed every page of every commit.
    wal_autocheckpoint_pages: int | None = None
    wal_pages_per_series: int = 2
    min_wal_pages: int = 20_000  # ~80 MB
    max_wal_pages: int = 131_072  # 512 MB of WAL file at most
    # Staged rows that force a commit: None sizes it to the series (1.5 commit intervals of 1 Hz samples,
    # within the two bounds below) so that the interval, not the cap, sets how often a large fleet commits
    # (a fixed 100,000 made 278 hosts commit every second: each commit rewrites a leaf page per series, so
    # disk writes grew with the square of the fleet). A number fixes it.
    max_batch_rows: int | None = None
    min_batch_rows: int = 100_000
    max_staged_rows: int = 4_000_000  # staged as the batches' floats (8 bytes a value), ~32 MB
    # The writer connection's page cache holds every series' last leaf pages (samples and rollups): it is
    # sized to the series stored, `cache_kib_per_series` each (a rollup-only series has one rollup page,
    # `cache_kib_per_rollup_series`), between the two bounds (a page cache that only grows would hold the
    # maximum for a one-host console). At 278 hosts the commit's pages no longer fit 128 MiB: the writer
    # thread took 64 % of a core per second of data with it, 20 % with 512 MiB.
    cache_kib: int = 384 * 1024
    min_cache_kib: int = 8 * 1024
    cache_kib_per_series: int = 12
    cache_kib_per_rollup_series: int = 4
    retention_every_s: float = 600.0
    seal_idle_s: float = 300.0  # roll up the open buckets of a host silent this long
    retry_s: float = 5.0
    max_pending_rows: int = 5_000_000  # beyond this, a failing database makes the writer drop (and log) data
    # Values (batch cells, rows) the inbox holds before submitters wait: ~30 s of a 278-host fleet (each
    # 8-GPU sample is ~440 values), 8 bytes a value, ~32 MB when full, nothing when the writer keeps up.
    # While a commit runs the thread takes nothing from the inbox; an inbox of a couple of seconds (250,000
    # values) made every host's supervisor wait for each commit at fleet size, and the fleet's delivery
    # stalled with it (delay p99 31-42 s at 278 hosts). A quick stop (`commit_queued=False`, the
    # console's) drops what waits: the agents send it again.
    inbox_cells: int = 4_000_000
    # ...of which one host holds at most this much (~5 min of one 8-GPU host at 1 Hz, ~1 MB): a flooding
    # or replaying agent waits on its own share instead of filling the fleet's.
    inbox_cells_per_host: int = 125_000


@dataclass(frozen=True)
class WriterStats:
    commits: int
    rows: int
    samples: int
    duplicates: int
    events: int
    failures: int
    discarded_rows: int
    cpu_seconds: float  # CPU time of the writer thread
    last_error: str | None
    inbox_waits: int = 0  # submits that waited for room: the writer was behind
    refused_rows: int = 0  # rows refused when staged (unstorable seq, time or value), never committed
    refused_by_host: Mapping[str, int] = field(default_factory=dict)
    raw_tier_rows: int = 0  # rows in the raw table now (every writer run, every host)
    raw_tier_bytes: int = 0  # what they take in the file (raw_tier.py), measured after each commit
    raw_bytes_per_row: float = 0.0
    raw_rows_over_budget: int = 0  # raw rows deleted to keep the raw tier under its size budget

    @property
    def rows_per_sample(self) -> float:
        """Raw rows per sample committed by this writer (`rows` / `samples`): a 8-GPU sample's 133 rows."""
        return self.rows / self.samples if self.samples else 0.0

    @property
    def raw_bytes_per_sample(self) -> float:
        """Bytes a committed sample takes in the raw tier: rows per sample x bytes per row."""
        return self.rows_per_sample * self.raw_bytes_per_row


def cache_kib_for(series: int, settings: WriterSettings, rollup_series: int = 0) -> int:
    """The writer's page cache for `series` raw-kept and `rollup_series` rollup-only series, within
    [min_cache_kib, cache_kib]."""
    wanted = series * settings.cache_kib_per_series + rollup_series * settings.cache_kib_per_rollup_series
    return max(settings.min_cache_kib, min(settings.cache_kib, wanted))


def wal_pages_for(series: int, settings: WriterSettings) -> int:
    """WAL pages between checkpoints for `series` series (all kinds): fixed, or sized within bounds."""
    if settings.wal_autocheckpoint_pages is not None:
        return settings.wal_autocheckpoint_pages
    return max(settings.min_wal_pages, min(settings.max_wal_pages, series * settings.wal_pages_per_series))


def batch_rows_for(series: int, interval_s: float, settings: WriterSettings) -> int:
    """Staged rows that force a commit: fixed, or 1.5 intervals of every series at 1 Hz, within bounds."""
    if settings.max_batch_rows is not None:
        return settings.max_batch_rows
    wanted = math.ceil(series * interval_s * 1.5)
    return min(settings.max_staged_rows, max(settings.min_batch_rows, wanted))


def commit_interval_for(series: int, settings: WriterSettings) -> float:
    """The fixed interval, or series / series_per_commit_second clamped to [min, max] seconds."""
    if settings.commit_interval_s is not None:
        return settings.commit_interval_s
    wanted = series / settings.series_per_commit_second
    return min(settings.max_commit_interval_s, max(settings.min_commit_interval_s, wanted))


class _Flush:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.ok = False


_STOP = object()
_STOP_OPEN = object()  # stop, leaving the open buckets open
DRAIN_ITEMS = 64  # inbox items the writer takes per take of the inbox's lock (one sample batch each, mostly)


class SampleWriter:
    """Owns the database's write side for metric history. Thread-safe to submit to; `start()` then `stop()`."""

    def __init__(
        self,
        db: Database,
        *,
        settings: WriterSettings | None = None,
        retention: RetentionPolicy | None = None,
        on_commit: Callable[[CommitAck], None] | None = None,
        clock: Callable[[], float] = time.time,
        gate: ForegroundGate = FOREGROUND,
    ) -> None:
        self.db = db
        self._gate = gate  # staging and commits step aside while the console redraws (core/foreground.py)
        self.settings = settings or WriterSettings()
        self._retention = retention
        self._on_commit = on_commit
        self._clock = clock
        self._inbox = BoundedInbox(self.settings.inbox_cells, self.settings.inbox_cells_per_host)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._committed: dict[str, int] = {}
        self._positions: dict[str, HostPosition] = {}
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self._commits = self._rows = self._samples = self._duplicates = self._events = 0
        self._failures = self._discarded = 0
        self._refused: dict[str, int] = {}
        self._refusal_log = RefusalLog(clock)
        self._cpu = 0.0
        self._last_error: str | None = None
        self._commit_interval = self.settings.commit_interval_s or self.settings.min_commit_interval_s
        self._batch_rows = batch_rows_for(0, self._commit_interval, self.settings)
        self._cache_kib = self.settings.min_cache_kib
        self._wal_pages = wal_pages_for(0, self.settings)
        self._raw_size = RawTierSize(0, 0.0)
        self._over_budget = 0
        self._policy = retention or RetentionPolicy()

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> SampleWriter:
        if self._thread is not None:
            raise RuntimeError("the sample writer is already started")
        self._thread = threading.Thread(target=self._run, name="meshdeck-sample-writer", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._start_error is not None:
            raise self._start_error
        return self

    def close_inbox(self) -> None:
        """Take nothing more: a submitter waiting for room (a host's supervisor) gets InboxClosed at once,
        so the fleet can stop without waiting on the writer. `stop()` then commits what was taken."""
        self._inbox.close()

    def stop(self, timeout: float = 60.0, *, roll_up_open_buckets: bool = True, commit_queued: bool = True) -> None:
        """Take nothing more (a submitter waiting for room gets InboxClosed at once), commit what was
        submitted, roll up the open minute/hour of every host (unless told not to: the next run then
        continues them), close the connection.

        `commit_queued=False` commits only what the thread has already staged and drops what still waits in
        the inbox, for a quick stop: nothing dropped was acknowledged, so each host's resume point is
        before it and its agent's ring delivers it again at the next start. A flush waiting behind the
        dropped items returns False."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        self._inbox.close()
        if not commit_queued:
            dropped = self._inbox.discard(keep=self._unless_data)
            if dropped:
                log.info("the sample writer stops without %d queued values; the agents send them again", dropped)
        self._inbox.put_token(_STOP if roll_up_open_buckets else _STOP_OPEN, control=True)
        thread.join(timeout)
        if thread.is_alive():
            log.error("the sample writer did not stop within %.0f s", timeout)

    @staticmethod
    def _unless_data(item: Any) -> bool:
        """Keep control tokens when the inbox is emptied at a stop; a flush token fails (its data is gone)."""
        if isinstance(item, _Flush):
            item.ok = False
            item.done.set()
            return False
        return item is _STOP or item is _STOP_OPEN

    def __enter__(self) -> SampleWriter:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def inbox_held(self) -> int:
        """Values (batch cells, rows) waiting in the inbox now: the writer's backlog (`meshdeck bench fleet`)."""
        return self._inbox.held

    # -- submitting ------------------------------------------------------------------------------

    def _put(self, item: Any, cost: int, key: str | None) -> None:
        if not self.running:
            raise InboxClosed("the sample writer is not running")
        self._inbox.put(item, cost, key=key)

    def submit_samples(self, host: str, batch: SampleBatch, dropped: int = 0, epoch: str | None = None) -> None:
        """Samples of one host, seq ascending; `dropped` = samples the agent lost before them; `epoch` =
        the agent's sequence epoch of their seqs (kept with the host's resume point). Waits while the
        inbox is full; raises InboxClosed (a RuntimeError) once the writer is stopping."""
        self._put(("samples", host, batch, dropped, epoch), max(1, batch.cells), host)

    def submit_rows(self, host: str, rows: Sequence[SampleRow]) -> None:
        """Already flattened `(seq, ts_s, device, metric, value)` rows (finite float values), seq ascending."""
        self._put(("rows", host, rows), max(1, len(rows)), host)

    def submit_event(self, record: EventRecord) -> None:
        self._put(("event", record), 1, record.host)

    def flush(self, timeout: float | None = None) -> bool:
        """Commit everything submitted before this call; True once it is durable."""
        token = _Flush()
        if not self.running:
            raise InboxClosed("the sample writer is not running")
        self._inbox.put_token(token)
        return token.done.wait(timeout) and token.ok

    # -- reading state ---------------------------------------------------------------------------

    def committed_seq(self, host: str) -> int | None:
        """The last seq of `host` known durable (across restarts: loaded from the database)."""
        with self._lock:
            return self._committed.get(host)

    def positions(self) -> dict[str, HostPosition]:
        with self._lock:
            return dict(self._positions)

    def stats(self) -> WriterStats:
        with self._lock:
            return WriterStats(
                self._commits,
                self._rows,
                self._samples,
                self._duplicates,
                self._events,
                self._failures,
                self._discarded,
                self._cpu,
                self._last_error,
                inbox_waits=self._inbox.waits,
                refused_rows=sum(self._refused.values()),
                refused_by_host=dict(self._refused),
                raw_tier_rows=self._raw_size.rows,
                raw_tier_bytes=self._raw_size.bytes,
                raw_bytes_per_row=self._raw_size.bytes_per_row,
                raw_rows_over_budget=self._over_budget,
            )

    # -- the thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            connection = self.db.raw_connection(cache_kib=self.settings.min_cache_kib)
            connection.execute(f"PRAGMA wal_autocheckpoint = {wal_pages_for(0, self.settings)}")
            ingest = SampleIngest(connection, self._gate)
            self._size_cache(connection, ingest)
            self._policy = self._retention or load_policy(self.db)
            self._measure_raw(connection)
        except BaseException as exc:
            self._start_error = self.db.problem(exc) or exc
            self._ready.set()
            return
        self._publish(ingest)
        self._ready.set()
        try:
            self._loop(connection, ingest)
        finally:
            connection.close()
            self._refusal_log.close()

    def _publish(self, ingest: SampleIngest) -> None:
        positions = ingest.positions()
        with self._lock:
            self._positions = positions
            self._committed = {host: p.last_seq for host, p in positions.items() if p.last_seq >= 0}

    def _loop(self, connection: Any, ingest: SampleIngest) -> None:
        settings = self.settings
        deadline: float | None = None
        next_retention = time.monotonic() + min(60.0, settings.retention_every_s)
        flushes: list[_Flush] = []
        stopping = seal = False
        held: deque[Any] = deque()  # taken from the inbox in one drain, not staged yet (at most DRAIN_ITEMS)
        while not stopping:
            if not held:
                timeout = next_retention - time.monotonic()
                if deadline is not None:
                    timeout = min(timeout, deadline - time.monotonic())
                held.extend(self._drain(max(0.0, timeout)))
            cpu_start = time.thread_time()
            while held:
                item = held.popleft()
                if item is _STOP or item is _STOP_OPEN:
                    stopping = True
                    seal = item is _STOP
                elif isinstance(item, _Flush):
                    flushes.append(item)
                else:
                    self._gate.step_aside()
                    self._stage(ingest, item)
                if ingest.pending_rows >= self._batch_rows:
                    break  # what is held waits for the commit: staged first in the next round
                if not held:
                    held.extend(self._drain(0.0))
            now = time.monotonic()
            if ingest.has_pending and deadline is None:
                deadline = now + self._interval(ingest)
            if seal:
                ingest.seal()
            due = deadline is not None and now >= deadline
            if ingest.has_pending and (due or flushes or stopping or ingest.pending_rows >= self._batch_rows):
                ok = self._commit(ingest)
                deadline = None if ok else now + settings.retry_s
                if ok:
                    self._size_cache(connection, ingest)
                    self._keep_raw_budget(connection)
                if ok or stopping:
                    for token in flushes:
                        token.ok = ok
                        token.done.set()
                    flushes = []
            elif flushes:
                for token in flushes:
                    token.ok = True  # nothing staged: everything submitted before it is committed
                    token.done.set()
                flushes = []
            if now >= next_retention and not stopping:
                self._retain(connection, ingest)
                next_retention = time.monotonic() + settings.retention_every_s
            with self._lock:
                self._cpu += time.thread_time() - cpu_start

    def _drain(self, timeout: float) -> list[Any]:
        """What the inbox has, up to DRAIN_ITEMS items in one take of its lock (waiting up to `timeout` for the
        first); nothing after the timeout."""
        try:
            return self._inbox.get_many(DRAIN_ITEMS, timeout=timeout)
        except Empty:
            return []

    def _size_cache(self, connection: Any, ingest: SampleIngest) -> None:
        """Fit the page cache and the WAL to the series stored (changed only when a quarter off)."""
        raw, everything = ingest.series_count(), ingest.all_series_count()
        wanted = cache_kib_for(raw, self.settings, everything - raw)
        if abs(wanted - self._cache_kib) * 4 > self._cache_kib:
            connection.execute(f"PRAGMA cache_size = -{wanted}")
            self._cache_kib = wanted
        pages = wal_pages_for(everything, self.settings)
        if abs(pages - self._wal_pages) * 4 > self._wal_pages:
            connection.execute(f"PRAGMA wal_autocheckpoint = {pages}")
            self._wal_pages = pages

    def _measure_raw(self, connection: Any) -> None:
        try:
            size = raw_tier_size(connection)
        except Exception as exc:  # dbstat missing from this SQLite build, a read error: the size stays unknown
            log.debug("the raw tier's size could not be measured (%s)", exc)
            return
        with self._lock:
            self._raw_size = size

    def _keep_raw_budget(self, connection: Any) -> None:
        """After a commit: measure the raw tier and, over its budget, delete its oldest samples (one pass)."""
        self._measure_raw(connection)
        budget = self._policy.raw_max_bytes
        if budget is None or self._raw_size.bytes <= budget:
            return
        try:
            deleted = enforce_raw_budget(connection, budget)
        except Exception as exc:
            log.warning("keeping the raw tier under its budget failed (%s); will retry", exc)
            return
        with self._lock:
            self._over_budget += deleted
        self._measure_raw(connection)

    def _interval(self, ingest: SampleIngest) -> float:
        interval = commit_interval_for(ingest.series_count(), self.settings)
        batch_rows = batch_rows_for(ingest.all_series_count(), interval, self.settings)
        with self._lock:
            self._commit_interval = interval
            self._batch_rows = batch_rows
        return interval

    def commit_interval(self) -> float:
        """Seconds between commits at the moment (fixed, or adapted to the number of series)."""
        with self._lock:
            return self._commit_interval

    def _stage(self, ingest: SampleIngest, item: tuple[Any, ...]) -> None:
        kind = item[0]
        try:
            if kind == "samples":
                _, host, batch, dropped, epoch = item
                self._refuse(host, ingest.add_batch(host, batch, epoch))
                if dropped:
                    problem = ingest.add_dropped(host, dropped)
                    if problem is not None:
                        self._refuse(host, Refused(0, problem))
                    else:
                        ingest.add_event(
                            EventRecord("samples_dropped", self._clock(), host=host, data={"dropped": dropped})
                        )
            elif kind == "rows":
                self._refuse(item[1], ingest.add_rows(item[1], item[2]))
            elif kind == "event":
                ingest.add_event(item[1])
        except Exception:  # a malformed batch must not take the writer down
            log.exception("the sample writer dropped a malformed %s batch", kind)

    def _refuse(self, host: str, refused: Refused | None) -> None:
        if refused is None:
            return
        if refused.rows:
            with self._lock:
                self._refused[host] = self._refused.get(host, 0) + refused.rows
        self._refusal_log.refused(host, refused)

    def _commit(self, ingest: SampleIngest) -> bool:
        try:
            ack = ingest.commit()
        except Exception as exc:
            problem = self.db.problem(exc)  # a full disk, a read-only or damaged file: said as such
            error = str(problem) if problem is not None else f"{type(exc).__name__}: {exc}"
            with self._lock:
                self._failures += 1
                self._last_error = error
            if ingest.pending_rows > self.settings.max_pending_rows:
                lost = ingest.discard_pending()
                with self._lock:
                    self._discarded += lost
                log.error("history commit failed (%s); dropped %d staged rows to bound memory", error, lost)
            else:
                log.warning("history commit failed (%s); retrying in %.0f s", error, self.settings.retry_s)
            return False
        if ack is None:
            return True
        with self._lock:
            self._commits += 1
            self._rows += ack.rows
            self._samples += sum(r.samples for r in ack.ranges)
            self._duplicates += ack.duplicates
            self._events += ack.events
            self._last_error = None
            for committed in ack.ranges:
                self._committed[committed.host] = committed.last_seq
        self._publish_positions(ingest)
        if self._on_commit is not None:
            try:
                self._on_commit(ack)
            except Exception:
                log.exception("on_commit callback failed")
        return True

    def _publish_positions(self, ingest: SampleIngest) -> None:
        positions = ingest.positions()
        with self._lock:
            self._positions = positions

    def _retain(self, connection: Any, ingest: SampleIngest) -> None:
        """Roll up idle hosts' open buckets, then delete what the policy (re-read each time, so a change
        from `meshdeck history retention` applies to a running app) no longer keeps."""
        now = self._clock()
        idle = ingest.idle_hosts(int(now * 1000), int(self.settings.seal_idle_s * 1000))
        if idle:
            ingest.seal(idle)
            if not self._commit(ingest):
                return
        try:
            self._policy = self._retention or load_policy(self.db)
            result = apply_retention(connection, self._policy, now)
        except Exception as exc:
            log.warning("retention failed (%s); will retry", exc)
            return
        self._measure_raw(connection)
        if result.over_budget:
            with self._lock:
                self._over_budget += result.over_budget
        if result.samples or result.rollup_1m or result.rollup_1h:
            log.info(
                "retention deleted %d raw samples, %d minute and %d hour rollups",
                result.samples,
                result.rollup_1m,
                result.rollup_1h,
            )
