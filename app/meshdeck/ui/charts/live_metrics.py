"""What the live charts read: every host's samples, flattened by the wire protocol, in fixed memory.

Samples arrive as wire SAMPLE dicts (meshdeck_agent.protocol); `protocol.flatten_sample` turns
each into (device, metric, value) rows, the same shape the store ingests, so live and history
charts name series identically. Per host there is a fine ring (every sample, about an hour at
1 Hz) for the 5 min and 1 h windows and a min/max bucket ring for the 24 h window.

Per-link NVLink rows (`gpu3/nvlink7`) are not kept: the charts show per-GPU sums, and 18 links
per GPU would multiply memory by ten (they are dropped before flattening, which is also most of
its cost). `keep_metrics` limits the series to what the charts draw. Prometheus counters
(`*_total`) also get a rate series (`*_per_s`), computed between consecutive samples in float64
and left out across a counter reset.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from meshdeck_agent.protocol import flatten_sample

from meshdeck.ui.charts.ring import BucketRing, SeriesRing

FINE_CAPACITY = 4096  # samples: 1 h at 1 Hz plus a margin
COARSE_BUCKET_S = 30.0
COARSE_CAPACITY = 24 * 3600 // 30 + 16
FINE_WINDOW_LIMIT_S = 3600.0  # windows up to this read the fine ring; longer ones the buckets

_GPU_DEVICE = re.compile(r"^gpu(\d+)$")

SeriesId = tuple[str, str]  # (device, metric)


def rate_metric(counter_metric: str) -> str:
    """`generation_tokens_total` -> `generation_tokens_per_s`."""
    return counter_metric[: -len("_total")] + "_per_s"


def _without_link_detail(sample: Mapping[str, Any]) -> dict[str, Any]:
    """The sample with per-link NVLink lists removed from each GPU (per-GPU sums stay)."""
    gpus = sample.get("gpus")
    if not isinstance(gpus, list):
        return dict(sample)
    stripped = [{k: v for k, v in g.items() if k != "nvlink_links"} if isinstance(g, dict) else g for g in gpus]
    return {**sample, "gpus": stripped}


def gpu_index(device: str) -> int | None:
    match = _GPU_DEVICE.match(device)
    return int(match.group(1)) if match else None


@dataclass
class _HostSeries:
    fine: SeriesRing
    coarse: BucketRing
    simulated: bool = False
    counters: dict[SeriesId, tuple[float, float]] = field(default_factory=dict)  # last (ts, value)
    out_of_order: int = 0


class LiveMetrics:
    """In-memory series for the dashboard: ingest wire samples, read (times, values) per series."""

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
                SeriesRing(self._fine_capacity, initial_rows=64),
                BucketRing(self._coarse_bucket_s, self._coarse_capacity, initial_rows=64),
            )
            self._hosts[host] = series
            self.version += 1
        return series

    def ingest(self, host: str, samples: Iterable[Mapping[str, Any]]) -> int:
        """Add wire samples (seq ascending) of one host. Returns how many were kept."""
        series = self._host(host)
        kept = 0
        for sample in samples:
            ts = sample.get("ts")
            if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
                continue
            if ts <= series.fine.last_time:  # a clock step back: the time axis must stay sorted
                series.out_of_order += 1
                continue
            values = self._values_of(series, float(ts), sample)
            known = len(series.fine.keys)
            series.fine.append(float(ts), values)
            series.coarse.append(float(ts), values)
            if len(series.fine.keys) != known:
                self.version += 1
            series.simulated = bool(sample.get("simulated")) or series.simulated
            kept += 1
        if kept:
            self.generation += 1
        return kept

    def _values_of(self, series: _HostSeries, ts: float, sample: Mapping[str, Any]) -> dict[SeriesId, float]:
        keep = self._keep
        values: dict[SeriesId, float] = {}
        for device, metric, value in flatten_sample(_without_link_detail(sample)):
            if metric.endswith("_total"):
                key = (device, metric)
                previous = series.counters.get(key)
                series.counters[key] = (ts, value)
                if previous is not None and value >= previous[1] and ts > previous[0]:
                    rate = rate_metric(metric)
                    if keep is None or rate in keep:
                        values[(device, rate)] = (value - previous[1]) / (ts - previous[0])
            if keep is None or metric in keep:
                values[(device, metric)] = value
        return values

    # ------------------------------------------------------------------ reading

    @property
    def hosts(self) -> list[str]:
        return list(self._hosts)

    def is_simulated(self, host: str) -> bool:
        series = self._hosts.get(host)
        return bool(series and series.simulated)

    def series_ids(self, host: str) -> list[SeriesId]:
        series = self._hosts.get(host)
        return list(series.fine.keys) if series else []  # type: ignore[arg-type]

    def gpu_indices(self, host: str) -> list[int]:
        found = {gpu_index(device) for device, _ in self.series_ids(host)}
        return sorted(i for i in found if i is not None)

    def devices(self, host: str, prefix: str) -> list[str]:
        return sorted({device for device, _ in self.series_ids(host) if device.startswith(prefix)})

    def latest_time(self) -> float:
        times = [s.fine.last_time for s in self._hosts.values() if len(s.fine)]
        return max(times) if times else math.nan

    def latest(self, host: str, device: str, metric: str) -> float:
        series = self._hosts.get(host)
        return series.fine.latest((device, metric)) if series else math.nan

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

    @property
    def nbytes(self) -> int:
        return sum(s.fine.nbytes + s.coarse.nbytes for s in self._hosts.values())
