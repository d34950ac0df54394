"""What the live charts read: every host's samples, as the sample gate flattened them, in fixed memory.

Samples arrive as `SampleBatch`es (core.samples: checked and flattened once, right after the
connection), the same batches the store ingests, so live and history charts name series identically:
(Device, metric). Per host there is a fine ring (every sample, about an hour at 1 Hz) for the 5 min
and 1 h windows and a min/max bucket ring for the 24 h window.

Per-link NVLink series (`gpu3/nvlink7`) are not kept: the charts show per-GPU sums, and 18 links per
GPU would multiply memory by ten. `keep_metrics` limits the series to what the charts draw. Rates
(tokens/s) come from the agent, which computes them between its scrapes; nothing here derives them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from meshdeck.core.samples import Device, SampleBatch, SeriesKey
from meshdeck.ui.charts.ring import BucketRing, SeriesRing

FINE_CAPACITY = 4096  # samples: 1 h at 1 Hz plus a margin
# 24 h in 1-minute min/max buckets: 1,440 columns, about one per pixel of a chart, and half the memory
# 30 s buckets took (the rings were ~10 MB a host, 2.8 GB for a 278-host fleet).
COARSE_BUCKET_S = 60.0
COARSE_CAPACITY = 24 * 3600 // 60 + 16
FINE_WINDOW_LIMIT_S = 3600.0  # windows up to this read the fine ring; longer ones the buckets

SeriesId = SeriesKey  # (device, metric)


@dataclass
class _Layout:
    """Where one batch layout's kept columns go in a host's rings (-1: the series has not reported yet)."""

    series: tuple[SeriesKey, ...]
    columns: np.ndarray  # the kept columns of the batch
    keys: list[SeriesId]
    fine_rows: np.ndarray
    coarse_rows: np.ndarray


@dataclass
class _HostSeries:
    fine: SeriesRing[SeriesId]
    coarse: BucketRing[SeriesId]
    simulated: bool = False
    out_of_order: int = 0
    layout: _Layout | None = None


class LiveMetrics:
    """In-memory series for the dashboard: ingest sample batches, read (times, values) per series."""

    def __init__(
        self,
        fine_capacity: int = FINE_CAPACITY,
        coarse_bucket_s: float = COARSE_BUCKET_S,
        coarse_capacity: int = COARSE_CAPACITY,
        keep_metrics: frozenset[str] | None = None,
    ) -> None:
        self._keep = keep_metrics
        self._fine_capacity = fine_capacity
        self._coarse_bucket_s = coarse_bucket_s
        self._coarse_capacity = coarse_capacity
        self._hosts: dict[str, _HostSeries] = {}
        self.version = 0  # bumps when a host or series appears: views rebuild their curves
        self.generation = 0  # bumps on every ingest: views know there is something new to draw

    def _host(self, host: str) -> _HostSeries:
        series = self._hosts.get(host)
        if series is None:
            series = _HostSeries(
                SeriesRing(self._fine_capacity, initial_rows=16),
                BucketRing(self._coarse_bucket_s, self._coarse_capacity, initial_rows=16),
            )
            self._hosts[host] = series
            self.version += 1
        return series

    def wants(self, key: SeriesId) -> bool:
        """Whether a series is kept (the bridge drops the others before they queue for the GUI thread)."""
        return key[0].kind != "nvlink" and (self._keep is None or key[1] in self._keep)

    def _layout(self, series: _HostSeries, batch: SampleBatch) -> _Layout:
        """The host's layout for this batch's series, worked out once per layout (a fleet's batches share
        their series tuple): at 278 hosts a per-value Python loop here took ~0.3 ms per sample of the GUI
        thread; with the layout a sample is a few numpy calls."""
        layout = series.layout
        if layout is not None and (layout.series is batch.series or layout.series == batch.series):
            return layout
        kept = [(column, key) for column, key in enumerate(batch.series) if self.wants(key)]
        keys = [key for _, key in kept]
        held = series.fine.rows_of(keys)
        coarse = np.array(
            [series.coarse.row_of(key) if row >= 0 else -1 for key, row in zip(keys, held.tolist(), strict=True)],
            dtype=np.intp,
        )
        layout = _Layout(batch.series, np.array([c for c, _ in kept], dtype=np.intp), keys, held, coarse)
        series.layout = layout
        return layout

    def ingest(self, host: str, batch: SampleBatch, *, gap_before: bool = False) -> int:
        """Add a batch of one host's samples (seq ascending). Returns how many were kept.

        `gap_before`: samples are missing right before this batch (the agent lost them, or the console
        skipped them): a row of NaN keeps the charts from drawing a line across the missing span."""
        series = self._host(host)
        layout = self._layout(series, batch)
        if gap_before and batch.times and math.isfinite(series.fine.last_time):
            gap_ts = (series.fine.last_time + batch.times[0]) / 2
            if series.fine.last_time < gap_ts < batch.times[0]:
                series.fine.append(gap_ts, {})
        matrix = np.frombuffer(batch.values, dtype=np.float64).reshape(len(batch.times), batch.width)
        kept = 0
        for i, ts in enumerate(batch.times):
            if ts <= series.fine.last_time:  # a clock step back: the time axis must stay sorted
                series.out_of_order += 1
                continue
            values = matrix[i, layout.columns]
            absent = layout.fine_rows < 0
            if absent.any():
                self._add_rows(series, layout, absent & ~np.isnan(values))
            held = layout.fine_rows >= 0
            series.fine.append_rows(ts, layout.fine_rows[held], values[held])
            series.coarse.append_rows(ts, layout.coarse_rows[held], values[held])
            kept += 1
        if kept:
            series.simulated = series.simulated or batch.simulated
            self.generation += 1
        return kept

    def _add_rows(self, series: _HostSeries, layout: _Layout, reported: np.ndarray) -> None:
        """Series of the layout reporting for the first time get their rows (a new series: views rebuild)."""
        for index in np.flatnonzero(reported).tolist():
            key = layout.keys[index]
            layout.fine_rows[index] = series.fine.row_of(key)
            layout.coarse_rows[index] = series.coarse.row_of(key)
        if reported.any():
            self.version += 1

    # ------------------------------------------------------------------ reading

    @property
    def hosts(self) -> list[str]:
        return list(self._hosts)

    def is_simulated(self, host: str) -> bool:
        series = self._hosts.get(host)
        return bool(series and series.simulated)

    def series_ids(self, host: str) -> list[SeriesId]:
        series = self._hosts.get(host)
        return list(series.fine.keys) if series else []

    def gpu_indices(self, host: str) -> list[int]:
        return sorted({device.index for device, _ in self.series_ids(host) if device.kind == "gpu"})

    def devices(self, host: str, kind: str) -> list[Device]:
        return sorted({device for device, _ in self.series_ids(host) if device.kind == kind})

    def latest_time(self) -> float:
        times = [s.fine.last_time for s in self._hosts.values() if len(s.fine)]
        return max(times) if times else math.nan

    def latest(self, host: str, device: Device, metric: str) -> float:
        series = self._hosts.get(host)
        return series.fine.latest((device, metric)) if series else math.nan

    def series_count(self, host: str) -> int:
        """How many series of `host` are kept (grows as devices appear; see `rows_of`)."""
        series = self._hosts.get(host)
        return series.fine.series_count if series else 0

    def last_time(self, host: str) -> float:
        """When `host`'s newest kept sample was taken (NaN: none yet)."""
        series = self._hosts.get(host)
        return series.fine.last_time if series else math.nan

    def rows_of(self, host: str, keys: list[SeriesId]) -> np.ndarray:
        """Where `keys` live in `host`'s ring (-1: not kept); valid until `series_count(host)` changes."""
        series = self._hosts.get(host)
        return series.fine.rows_of(keys) if series else np.full(len(keys), -1, dtype=np.intp)

    def newest_column(self, host: str) -> np.ndarray | None:
        """`host`'s newest sample, one value per ring row (`rows_of`), as a view; None before any sample.
        The fleet view reads its 2,224 GPUs this way, one numpy gather per host: a Python call per value
        would cost ~30 ms per refresh."""
        series = self._hosts.get(host)
        return series.fine.newest_column() if series else None

    def window(
        self, host: str, series_ids: list[SeriesId], window_s: float, end: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """(times, values[len(series_ids), n]) of one host over [end - window_s, end].

        Windows over an hour come from the min/max buckets (a peak envelope, two points a bucket)."""
        series = self._hosts.get(host)
        if series is None:
            return np.empty(0), np.full((len(series_ids), 0), np.nan)
        since = end - window_s
        if window_s <= FINE_WINDOW_LIMIT_S:
            return series.fine.matrix(list(series_ids), since)
        return series.coarse.envelope(list(series_ids), since)

    def between(self, host: str, series_ids: list[SeriesId], start: float, end: float) -> tuple[np.ndarray, np.ndarray]:
        """(times, values[len(series_ids), n]) of one host from `start` on (a range of the past the time keys
        chose; what is after `end` is clipped by the chart). The fine ring when the range is short and the ring
        still holds its start (or every sample so far), else the min/max buckets."""
        series = self._hosts.get(host)
        if series is None:
            return np.empty(0), np.full((len(series_ids), 0), np.nan)
        fine = series.fine
        if end - start <= FINE_WINDOW_LIMIT_S and (len(fine) < fine.capacity or fine.first_time <= start):
            return series.fine.matrix(list(series_ids), start)
        return series.coarse.envelope(list(series_ids), start)

    @property
    def nbytes(self) -> int:
        return sum(s.fine.nbytes + s.coarse.nbytes for s in self._hosts.values())
