"""Fixed-memory time series for live charts: a fine ring (every sample) and a coarse min/max ring.

One `SeriesRing` holds all series of one host, because every series of a host shares the sample's
timestamp. Each value is written once: a read of a span that does not wrap the buffer's end is a numpy
view, one that wraps is copied (only the series and the span a chart asks for). The rings used to write
every value twice so that every read was a view; at 278 hosts that second copy was ~1 GB of the console's
memory (3.5 MB of 7 MB per host).

The 24-hour window cannot keep every 1 Hz sample of 64 GPUs in memory (about 0.9 GB), so
`BucketRing` keeps per-bucket minimum and maximum instead. Drawn as an interleaved min/max
envelope, that is exactly what peak downsampling would show of the raw data: spikes stay visible.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import Generic, TypeVar

import numpy as np

SeriesKey = TypeVar("SeriesKey", bound=Hashable)  # what names a series: the live charts use (device, metric)
# float32 halves memory and copy time; its 24-bit mantissa is ~1e-7 relative, far below a pixel.
# Times stay float64 (unix seconds need it). Rates are derived in float64 before storing.
VALUE_DTYPE = np.float32


def _grow_rows(values: np.ndarray, rows: int) -> np.ndarray:
    grown = np.full((rows, values.shape[1]), np.nan, dtype=values.dtype)
    grown[: values.shape[0]] = values
    return grown


class SeriesRing(Generic[SeriesKey]):
    """The last `capacity` samples of many series that share one time axis."""

    def __init__(self, capacity: int, initial_rows: int = 16) -> None:
        if capacity < 2:
            raise ValueError(f"capacity must be at least 2, got {capacity}")
        self.capacity = capacity
        self._times = np.full(capacity, np.nan)
        self._values = np.full((max(1, initial_rows), capacity), np.nan, dtype=VALUE_DTYPE)
        self._rows: dict[SeriesKey, int] = {}
        self._head = 0  # next write position, in [0, capacity)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @property
    def keys(self) -> list[SeriesKey]:
        return list(self._rows)

    @property
    def first_time(self) -> float:
        """The oldest sample's time (NaN: none)."""
        if not self._count:
            return math.nan
        return float(self._times[(self._head - self._count) % self.capacity])

    @property
    def last_time(self) -> float:
        if not self._count:
            return math.nan
        return float(self._times[(self._head - 1) % self.capacity])

    def row_of(self, key: SeriesKey) -> int:
        """The row of `key`, added (all NaN so far) if it is new."""
        row = self._rows.get(key)
        if row is None:
            row = len(self._rows)
            if row >= self._values.shape[0]:
                # grow by a quarter (at least 16 rows): a host's series appear in a burst at its first
                # sample, and doubling would leave up to half of a host's chart memory unused
                self._values = _grow_rows(self._values, self._values.shape[0] + max(16, self._values.shape[0] // 4))
            self._rows[key] = row
        return row

    def append(self, ts: float, values: Mapping[SeriesKey, float]) -> None:
        """One sample: series missing from `values` get NaN (a gap) at this time."""
        rows = [self.row_of(key) for key in values]  # may grow the buffer: map keys first
        self.append_rows(ts, np.array(rows, dtype=np.intp), np.array(list(values.values()), dtype=VALUE_DTYPE))

    def append_rows(self, ts: float, rows: np.ndarray, values: np.ndarray) -> None:
        """One sample given as rows (from `row_of`) and their values; every other row gets NaN."""
        column = np.full(self._values.shape[0], np.nan, dtype=VALUE_DTYPE)
        column[rows] = values
        head = self._head
        self._times[head] = ts
        self._values[:, head] = column
        self._head = (head + 1) % self.capacity
        self._count = min(self._count + 1, self.capacity)

    def _span(self, first: int = 0) -> tuple[int, int]:
        """Where the samples from the `first`-th oldest on start in the buffer, and how many there are."""
        return (self._head - self._count + first) % self.capacity, self._count - first

    def _columns(self, array: np.ndarray, first: int = 0, rows: np.ndarray | None = None) -> np.ndarray:
        """`array`'s columns (its last axis) of the samples from the `first`-th oldest on, oldest first, of
        `rows` only when given (a copy of those rows' span alone): a view when they do not wrap the buffer's
        end, else a copy."""
        start, count = self._span(first)
        pick = (Ellipsis,) if rows is None else (rows,)
        if start + count <= self.capacity:
            return array[(*pick, slice(start, start + count))]
        tail = array[(*pick, slice(start, None))]
        return np.concatenate((tail, array[(*pick, slice(0, start + count - self.capacity))]), axis=-1)

    def _first_since(self, since: float) -> tuple[np.ndarray, int]:
        """Every time, oldest first, and the position of the first at or after `since`."""
        times = self._columns(self._times)
        return times, int(np.searchsorted(times, since, side="left")) if since > -math.inf else 0

    def times(self, since: float = -math.inf) -> np.ndarray:
        times, first = self._first_since(since)
        return times[first:]

    def series(self, key: SeriesKey, since: float = -math.inf) -> tuple[np.ndarray, np.ndarray]:
        """(times, values) of one series, oldest first, from `since` on (views unless the span wraps the
        buffer: read them, don't keep them). Unknown key: empty."""
        times, first = self._first_since(since)
        row = self._rows.get(key)
        if row is None:
            return times[:0], times[:0]
        return times[first:], self._columns(self._values[row], first)

    def matrix(self, keys: list[SeriesKey], since: float = -math.inf) -> tuple[np.ndarray, np.ndarray]:
        """(times, values[len(keys), n]) from `since` on, values copied; an unknown key gives a row of NaN."""
        times, first = self._first_since(since)
        rows = [self._rows.get(key, -1) for key in keys]
        if not rows:
            return times[first:], np.empty((0, len(times) - first), dtype=VALUE_DTYPE)
        values = self._columns(self._values, first, np.maximum(rows, 0))  # fancy indexing: a copy
        missing = [i for i, row in enumerate(rows) if row < 0]
        if missing:
            values[missing] = np.nan  # a copy: safe to write
        return times[first:], values

    @property
    def series_count(self) -> int:
        """How many series the ring holds; rows are never taken back, so row numbers stay valid."""
        return len(self._rows)

    def rows_of(self, keys: list[SeriesKey]) -> np.ndarray:
        """The row of each key (-1: not held), for `newest_column`: a reader that asks for the same keys on
        every refresh looks them up once and again only when `series_count` grew."""
        return np.fromiter((self._rows.get(key, -1) for key in keys), dtype=np.intp, count=len(keys))

    def newest_column(self) -> np.ndarray | None:
        """Every series' value in the newest sample, by row (a view: read it, don't keep it); None when empty."""
        if not self._count:
            return None
        return self._values[:, (self._head - 1) % self.capacity]

    def latest(self, key: SeriesKey) -> float:
        row = self._rows.get(key)
        if row is None or not self._count:
            return math.nan
        return float(self._values[row, (self._head - 1) % self.capacity])

    @property
    def nbytes(self) -> int:
        return self._times.nbytes + self._values.nbytes


class BucketRing(Generic[SeriesKey]):
    """Per-bucket min and max of many series over a long window (e.g. 24 h in 1-minute buckets)."""

    def __init__(self, bucket_s: float, capacity: int, initial_rows: int = 16) -> None:
        if bucket_s <= 0:
            raise ValueError(f"bucket_s must be positive, got {bucket_s}")
        self.bucket_s = bucket_s
        self._mins: SeriesRing[SeriesKey] = SeriesRing(capacity, initial_rows)
        self._maxs: SeriesRing[SeriesKey] = SeriesRing(capacity, initial_rows)
        self._open_bucket = math.nan  # start time of the bucket being filled
        # The open bucket's min and max per row (rows as in both rings: keys are always added to both).
        self._open_min = np.full(max(1, initial_rows), np.nan, dtype=VALUE_DTYPE)
        self._open_max = np.full(max(1, initial_rows), np.nan, dtype=VALUE_DTYPE)
        self._open_any = False

    def row_of(self, key: SeriesKey) -> int:
        """The row of `key` in both rings and the open bucket (added if new)."""
        row = self._mins.row_of(key)
        self._maxs.row_of(key)
        if row >= self._open_min.shape[0]:
            grown = max(row + 1, self._open_min.shape[0] + max(16, self._open_min.shape[0] // 4))
            self._open_min = np.concatenate([self._open_min, np.full(grown - self._open_min.shape[0], np.nan)]).astype(
                VALUE_DTYPE
            )
            self._open_max = np.concatenate([self._open_max, np.full(grown - self._open_max.shape[0], np.nan)]).astype(
                VALUE_DTYPE
            )
        return row

    def append(self, ts: float, values: Mapping[SeriesKey, float]) -> None:
        rows = [self.row_of(key) for key, value in values.items() if value == value]  # NaN: nothing to fold in
        kept = [value for value in values.values() if value == value]
        self.append_rows(ts, np.array(rows, dtype=np.intp), np.array(kept, dtype=VALUE_DTYPE))

    def append_rows(self, ts: float, rows: np.ndarray, values: np.ndarray) -> None:
        """One sample as rows (from `row_of`) and values; NaN values are not folded in."""
        bucket = math.floor(ts / self.bucket_s) * self.bucket_s
        if bucket != self._open_bucket:
            self._close()
            self._open_bucket = bucket
        if rows.size:
            self._open_min[rows] = np.fmin(self._open_min[rows], values)
            self._open_max[rows] = np.fmax(self._open_max[rows], values)
            self._open_any = self._open_any or not bool(np.isnan(values).all())

    def _close(self) -> None:
        if self._open_bucket == self._open_bucket and self._open_any:
            middle = self._open_bucket + self.bucket_s / 2
            rows = self._mins.series_count
            every = np.arange(rows, dtype=np.intp)
            self._mins.append_rows(middle, every, self._open_min[:rows])
            self._maxs.append_rows(middle, every, self._open_max[:rows])
        self._open_min.fill(np.nan)
        self._open_max.fill(np.nan)
        self._open_any = False

    def envelope(self, keys: list[SeriesKey], since: float = -math.inf) -> tuple[np.ndarray, np.ndarray]:
        """(times, values[len(keys), 2n]): each bucket as its min then its max at the bucket's middle.

        That interleaving is a peak envelope: drawn as a line it covers every value the bucket saw."""
        times, lows = self._mins.matrix(keys, since)
        _, highs = self._maxs.matrix(keys, since)
        middle = self._open_bucket + self.bucket_s / 2
        if self._open_any and middle >= since:
            times = np.append(times, middle)
            rows = self._mins.rows_of(keys)
            known = rows >= 0
            open_lows = np.full(len(keys), np.nan, dtype=VALUE_DTYPE)
            open_highs = np.full(len(keys), np.nan, dtype=VALUE_DTYPE)
            open_lows[known] = self._open_min[rows[known]]
            open_highs[known] = self._open_max[rows[known]]
            lows = np.column_stack([lows, open_lows]) if keys else lows
            highs = np.column_stack([highs, open_highs]) if keys else highs
        x = np.repeat(times, 2)
        y = np.empty((len(keys), x.shape[0]), dtype=VALUE_DTYPE)
        y[:, 0::2] = lows
        y[:, 1::2] = highs
        return x, y

    @property
    def nbytes(self) -> int:
        return self._mins.nbytes + self._maxs.nbytes
