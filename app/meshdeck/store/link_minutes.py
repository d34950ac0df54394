"""Per-link NVLink series: kept as 1-minute rollups, not as raw rows.

An 8-GPU server reports 18 NVLink links per GPU, each a (tx, rx) pair: 288 of the 421 values of one
sample of a simulated 8×H200, and at a 278-host fleet 80,000 of the 117,000 rows written every second.
The dashboard, the fleet view and the exports chart the per-GPU sums (`nvlink_tx_bytes_per_s` of `gpuN`,
which the agent sends beside the links and the store keeps raw); per link a user sees the history at
1-minute resolution: min / max / mean / count per link per minute in rollup_1m (and per hour in rollup_1h,
rolled up from it as for every series), for as long as the minute tier is kept.

The minute still open is summed in memory from the staged rows and written at every commit, in the same
transaction as the raw rows of those samples, to `open_rollup_1m` (one row per series, replaced); when the
minute closes it moves to rollup_1m. A sample is counted once per (host, minute): the minute remembers the
sample times it counted. After a restart, or when a late sample lands in a minute no longer held, the
minute is read back from those tables, and the times it counted are the ones the raw table holds for the
host in that minute (committed together, so the two always agree): a re-delivered sample is never counted
twice and a crash loses nothing that was acknowledged.

A commit works on copies (`LinkMinuteWork`): what it summed is kept only once its transaction committed,
so a failed commit retried with the same staged rows counts them once.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from meshdeck.store.bulk_insert import insert_rows
from meshdeck.store.rollups import MINUTE_MS

_ROLLUP_ONLY_DEVICE = re.compile(r"^gpu\d+/nvlink\d+$")

_SAVE_OPEN = "INSERT OR REPLACE INTO open_rollup_1m (series_id, bucket, vmin, vmax, vsum, n)"
_SAVE_CLOSED = "INSERT OR REPLACE INTO rollup_1m (series_id, bucket, vmin, vmax, vsum, n)"
_CLEAR_OPEN_IDS = 20_000  # series ids (written inline) per DELETE of a closed minute's open rows


def rollup_only(device: str) -> bool:
    """Whether a series of this device (its stored name, core.samples.Device.text) is kept as rollups only."""
    return _ROLLUP_ONLY_DEVICE.match(device) is not None


LinkSums = tuple[float, float, float, int]  # vmin, vmax, vsum, n


@dataclass
class MinuteSums:
    """One host's rollup-only series over one minute: per series (vmin, vmax, vsum, n), and the sample
    times (ms) already counted. The sums are tuples, replaced on every addition: a commit's copy shares
    them instead of copying ~80,000 lists at 278 hosts, and the collector stops tracking a tuple of numbers
    (full collections beside the console scan lists, not these)."""

    counted: set[int] = field(default_factory=set)
    sums: dict[int, LinkSums] = field(default_factory=dict)

    def copy(self) -> MinuteSums:
        return MinuteSums(set(self.counted), dict(self.sums))


def add_to_sums(sums: dict[int, LinkSums], series_id: int, low: float, high: float, total: float, n: int) -> None:
    """Fold `n` values (their min, max and sum) into the series' sums of the minute."""
    entry = sums.get(series_id)
    if entry is None:
        sums[series_id] = (low, high, total, n)
    else:
        sums[series_id] = (
            low if low < entry[0] else entry[0],
            high if high > entry[1] else entry[1],
            entry[2] + total,
            entry[3] + n,
        )


def _id_list(ids: Iterable[int]) -> str:
    return ",".join(str(int(i)) for i in ids)


class LinkMinutes:
    """The minutes held in memory between commits: each host's open minute (single-threaded, the writer's)."""

    def __init__(self) -> None:
        self.held: dict[tuple[str, int], MinuteSums] = {}

    def begin(
        self,
        connection: sqlite3.Connection,
        link_ids: Mapping[str, Mapping[tuple[str, str], int]],
        raw_ids: Mapping[str, Mapping[tuple[str, str], int]],
    ) -> LinkMinuteWork:
        return LinkMinuteWork(self, connection, link_ids, raw_ids)

    def keep(self, touched: Mapping[tuple[str, int], MinuteSums], open_minutes: Mapping[str, int | None]) -> None:
        """After a commit: take what it summed, then forget every minute that is no longer a host's open one."""
        self.held.update(touched)
        self.held = {key: sums for key, sums in self.held.items() if open_minutes.get(key[0]) == key[1]}


class LinkMinuteWork:
    """One commit's minutes: held ones copied on first touch, others read back from the database."""

    def __init__(
        self,
        minutes: LinkMinutes,
        connection: sqlite3.Connection,
        link_ids: Mapping[str, Mapping[tuple[str, str], int]],
        raw_ids: Mapping[str, Mapping[tuple[str, str], int]],
    ) -> None:
        self._minutes = minutes
        self._connection = connection
        self._link_ids = link_ids
        self._raw_ids = raw_ids
        self.touched: dict[tuple[str, int], MinuteSums] = {}

    def minute(self, host: str, minute: int, *, stored_until: int | None = None) -> MinuteSums:
        """The sums of (host, minute); `stored_until` (the host's last committed sample time, ms) spares the
        read of a minute that starts after it: nothing of it can be stored yet."""
        key = (host, minute)
        sums = self.touched.get(key)
        if sums is None:
            held = self._minutes.held.get(key)
            if held is not None:
                sums = held.copy()
            elif stored_until is not None and minute > stored_until:
                sums = MinuteSums()
            else:
                sums = self._load(host, minute)
            self.touched[key] = sums
        return sums

    def sums_for_sample(self, host: str, minute: int, ts_ms: int, stored_until: int) -> dict[int, LinkSums] | None:
        """Where this sample's per-link values are to be added; None when the sample was counted already."""
        sums = self.minute(host, minute, stored_until=stored_until)
        if ts_ms in sums.counted:
            return None
        sums.counted.add(ts_ms)
        return sums.sums

    def _load(self, host: str, minute: int) -> MinuteSums:
        sums = MinuteSums()
        links = _id_list(self._link_ids.get(host, {}).values())
        if links:
            for table in ("rollup_1m", "open_rollup_1m"):
                for series_id, vmin, vmax, vsum, n in self._connection.execute(
                    f"SELECT series_id, vmin, vmax, vsum, n FROM {table} WHERE series_id IN ({links}) AND bucket = ?",
                    (minute,),
                ):
                    sums.sums[series_id] = (vmin, vmax, vsum, n)
        raw = _id_list(self._raw_ids.get(host, {}).values())
        if raw:
            sums.counted.update(
                ts
                for (ts,) in self._connection.execute(
                    f"SELECT DISTINCT ts FROM samples WHERE series_id IN ({raw}) AND ts >= ? AND ts < ?",
                    (minute, minute + MINUTE_MS),
                )
            )
        return sums

    def write(self, open_minutes: Mapping[str, int | None], closing: Iterable[tuple[str, int]]) -> None:
        """Inside the commit's transaction, before the hour rollups: every touched minute, and each minute
        that closes, to open_rollup_1m when it is its host's open minute, else to rollup_1m."""
        for host, minute in set(closing):
            if self._link_ids.get(host):
                self.minute(host, minute)
        opened: list[tuple[int, int, float, float, float, float]] = []
        closed: list[tuple[int, int, float, float, float, float]] = []
        for (host, minute), sums in self.touched.items():
            rows = [(series_id, minute, *entry) for series_id, entry in sums.sums.items()]
            (opened if open_minutes.get(host) == minute else closed).extend(rows)
        # Multi-row statements (bulk_insert.py): at 278 hosts a commit rewrites ~80,000 open sums.
        if opened:
            insert_rows(self._connection, _SAVE_OPEN, 6, opened)
        if closed:
            insert_rows(self._connection, _SAVE_CLOSED, 6, closed)
            by_minute: dict[int, list[int]] = {}
            for row in closed:
                by_minute.setdefault(row[1], []).append(row[0])
            for minute, ids in by_minute.items():
                for start in range(0, len(ids), _CLEAR_OPEN_IDS):
                    self._connection.execute(
                        f"DELETE FROM open_rollup_1m WHERE bucket = ? AND series_id IN "
                        f"({_id_list(ids[start : start + _CLEAR_OPEN_IDS])})",
                        (minute,),
                    )

    def kept(self, open_minutes: Mapping[str, int | None]) -> None:
        """The commit is durable: the held minutes become what it summed."""
        self._minutes.keep(self.touched, open_minutes)
