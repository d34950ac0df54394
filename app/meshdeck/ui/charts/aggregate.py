"""Charts at fleet scale: thousands of series reduced to a median with a min–max band per group, plus
the few series that stray furthest from their group (the outliers), drawn as curves of their own.

2,224 GPUs drawn as 2,224 curves are unreadable and cost seconds per refresh. Hosts sample on their own
clocks, so the series are first put on one time grid: buckets of `window / GRID_POINTS` seconds, each
series' value in a bucket being its last sample there (none: NaN, a gap). The grid is anchored to
absolute time, so a bucket, once complete, never changes: each refresh reads and reduces only the
buckets that are new or still filling (a handful), keeping a 2-D matrix (series × buckets) and the
per-group statistics of every bucket. A full recompute (~GRID_POINTS buckets) happens only when the
window or the series change.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from meshdeck.core.samples import SeriesKey

GRID_POINTS = 150  # buckets per window: 2 s at 5 min; a median curve needs no more than that
REFRESHED_BUCKETS = 2  # the last buckets are read again on each refresh: their samples may still arrive

# (host, series, since) -> (times (n,), values (k, n)) of that host from `since` on
WindowReader = Callable[[str, list[SeriesKey], float], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class AggregateSeries:
    """One series that goes into an aggregate: its host and key, and the slot (a chart's group and pick,
    e.g. "deployment A, TX") whose median and band it is part of."""

    host: str
    key: SeriesKey
    slot: int


@dataclass(frozen=True)
class GroupStats:
    """Per slot, per bucket: median, lowest and highest of the slot's series (NaN: none)."""

    median: np.ndarray  # (slots, buckets)
    low: np.ndarray
    high: np.ndarray


def bucket_values(x: np.ndarray, ys: np.ndarray, starts: np.ndarray, step: float) -> np.ndarray:
    """Each series' last value in each bucket [start, start + step) (NaN where it has none): (k, buckets)."""
    if x.size == 0:
        return np.full((ys.shape[0], starts.shape[0]), np.nan, dtype=np.float32)
    last = np.searchsorted(x, starts + step, side="left") - 1
    inside = (last >= 0) & (x[np.maximum(last, 0)] >= starts)
    values = ys[:, np.maximum(last, 0)].astype(np.float32, copy=True)
    values[:, ~inside] = np.nan
    return values


def column_stats(values: np.ndarray, rows_of_group: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    """(median, low, high) of each group's rows, per column; NaN where a group has no value."""
    groups, columns = len(rows_of_group), values.shape[1]
    median = np.full((groups, columns), np.nan, dtype=np.float32)
    low, high = median.copy(), median.copy()
    for g, rows in enumerate(rows_of_group):
        if rows.size == 0 or columns == 0:
            continue
        block = np.sort(values[rows], axis=0)  # NaN sorts last
        count = np.isfinite(block).sum(axis=0)
        has = count > 0
        index = np.arange(columns)
        lower = np.maximum((count - 1) // 2, 0)
        upper = np.maximum(count // 2, 0)
        middle = (block[lower, index] + block[np.minimum(upper, rows.size - 1), index]) / 2
        median[g, has] = middle[has]
        low[g, has] = block[0, has]
        high[g, has] = block[np.maximum(count - 1, 0), index][has]
    return median, low, high


class FleetAggregate:
    """The bucketed matrix of many series and their slots' statistics, updated bucket by bucket. One
    serves every aggregated chart of a view, so each host is read once per refresh."""

    def __init__(self, series: Sequence[AggregateSeries], slots: int) -> None:
        self.series = list(series)
        self.slot_of_row = np.asarray([s.slot for s in self.series], dtype=np.intp)
        order = np.argsort(self.slot_of_row, kind="stable")
        bounds = np.searchsorted(self.slot_of_row[order], np.arange(slots + 1))
        self._rows_of_group = [order[bounds[i] : bounds[i + 1]] for i in range(slots)]
        by_host: dict[str, list[int]] = {}
        for i, s in enumerate(self.series):
            by_host.setdefault(s.host, []).append(i)
        self._hosts = [
            (host, np.asarray(rows, dtype=np.intp), [self.series[r].key for r in rows])
            for host, rows in by_host.items()
        ]
        self.step = math.nan
        self.first_bucket = 0  # the bucket number of column 0
        self.values = np.empty((len(self.series), 0), dtype=np.float32)
        self.stats = GroupStats(*(np.empty((slots, 0), dtype=np.float32) for _ in range(3)))
        self._centers: np.ndarray = np.empty(0)
        self._strays = np.empty(0, dtype=np.float32)  # per row: its largest distance from its slot's median

    @property
    def centers(self) -> np.ndarray:
        """The middle of each bucket (Unix seconds): the x of every aggregate curve."""
        return self._centers

    def update(self, read: WindowReader, window_s: float, end: float) -> None:
        """Bring the matrix to the buckets of [end - window_s, end]: shift it, read the new buckets."""
        step = window_s / GRID_POINTS
        first = math.floor((end - window_s) / step)
        last = math.floor(end / step)  # the bucket `end` falls in (still filling)
        columns = last - first + 1
        if step != self.step:  # another window: start over
            self.step = step
            self.first_bucket, self.values = first, np.full((len(self.series), 0), np.nan, dtype=np.float32)
        old = self.values
        kept_from = first - self.first_bucket
        values = np.full((len(self.series), columns), np.nan, dtype=np.float32)
        overlap = max(0, min(old.shape[1] - kept_from, columns))
        if overlap > 0 and kept_from >= 0:
            values[:, :overlap] = old[:, kept_from : kept_from + overlap]
        fresh_from = max(0, overlap - REFRESHED_BUCKETS) if kept_from >= 0 else 0
        starts = (first + np.arange(fresh_from, columns)) * step
        for host, rows, keys in self._hosts:
            x, ys = read(host, keys, float(starts[0]) if starts.size else end)
            values[rows, fresh_from:] = bucket_values(x, ys, starts, step)
        stats_old = self.stats
        median, low, high = column_stats(values[:, fresh_from:], self._rows_of_group)
        new_stats = []
        for previous, part in zip((stats_old.median, stats_old.low, stats_old.high), (median, low, high), strict=True):
            combined = np.full((len(self._rows_of_group), columns), np.nan, dtype=np.float32)
            if fresh_from and kept_from >= 0:
                combined[:, :fresh_from] = previous[:, kept_from : kept_from + fresh_from]
            combined[:, fresh_from:] = part
            new_stats.append(combined)
        self.stats = GroupStats(*new_stats)
        self.values, self.first_bucket = values, first
        self._centers = (first + np.arange(columns) + 0.5) * step
        self._strays = self._stray_scores()

    def _stray_scores(self) -> np.ndarray:
        """How far each series strayed from its slot's median over the window (-inf: never, or alone)."""
        if not self.series or self.values.shape[1] == 0:
            return np.full(len(self.series), -np.inf, dtype=np.float32)
        with np.errstate(invalid="ignore"):
            distance = np.abs(self.values - self.stats.median[self.slot_of_row])
        distance[~np.isfinite(distance)] = -np.inf
        score: np.ndarray = distance.max(axis=1)
        sizes = np.asarray([rows.size for rows in self._rows_of_group])
        score[sizes[self.slot_of_row] < 2] = -np.inf
        return score

    def slot_size(self, slot: int) -> int:
        return int(self._rows_of_group[slot].size)

    def outliers(self, rows: np.ndarray, count: int) -> list[int]:
        """Of `rows`, the `count` series that strayed furthest from their slot's median over the window
        (the only series of its slot is no outlier), furthest first."""
        if count <= 0 or rows.size == 0 or self._strays.shape[0] != len(self.series):
            return []
        score = self._strays[rows]
        order = np.argsort(-score, kind="stable")[:count]
        return [int(rows[i]) for i in order if score[i] > 0]
