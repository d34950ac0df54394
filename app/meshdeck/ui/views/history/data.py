"""History query results shaped for the charts (no Qt): one time axis per host, series as rows.

The store returns one `SeriesRange` per (device, metric), each with its own timestamps (raw
samples) or bucket starts (1 min / 1 h rollups). Charts of one host want a shared x axis, so the
series are aligned on the union of their times (NaN where a series has no point). Rolled-up
buckets are drawn like the live 24 h window: min then max at the bucket's middle, an envelope
that shows every spike the bucket saw, never a mean that hides it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from meshdeck.core.samples import Device, SeriesKey
from meshdeck.services.history import SeriesRange

SeriesId = SeriesKey  # (device, metric), as the live charts key their series


@dataclass(frozen=True)
class HistoryFrame:
    """Aligned history of one host: x (n,), values (k, n) for `series` (k ids), and the tier read."""

    host: str
    series: tuple[SeriesId, ...]
    x: np.ndarray
    values: np.ndarray
    tier: str
    step_s: float

    def rows(self, wanted: Sequence[SeriesId]) -> tuple[np.ndarray, np.ndarray]:
        index = {sid: i for i, sid in enumerate(self.series)}
        out = np.full((len(wanted), self.x.shape[0]), np.nan)
        for row, sid in enumerate(wanted):
            if sid in index:
                out[row] = self.values[index[sid]]
        return self.x, out


def _points(series: SeriesRange) -> tuple[np.ndarray, np.ndarray]:
    ts = np.asarray(series.ts, dtype=float)
    if series.tier == "raw" or series.step_s <= 0:
        return ts, np.asarray(series.mean, dtype=float)
    middle = ts + series.step_s / 2
    x = np.repeat(middle, 2)
    y = np.empty(x.shape[0])
    y[0::2] = series.minimum
    y[1::2] = series.maximum
    return x, y


def _device(text: str) -> Device | None:
    try:
        return Device.from_text(text)
    except ValueError:  # not a name meshdeck writes: nothing charts it
        return None


def history_frame(host: str, ranges: Sequence[SeriesRange]) -> HistoryFrame:
    """Align every range of `host` (any metrics) on one sorted time axis."""
    ranges = [r for r in ranges if r.series.host == host and _device(r.series.device) is not None]
    pieces = [_points(r) for r in ranges]
    x = np.unique(np.concatenate([p[0] for p in pieces])) if pieces else np.empty(0)
    # With envelopes every x appears twice per bucket: keep both (min then max) by aligning on pairs.
    if ranges and ranges[0].tier != "raw":
        x = np.repeat(np.unique(x), 2)
    values = np.full((len(pieces), x.shape[0]), np.nan)
    for row, (px, py) in enumerate(pieces):
        if ranges[row].tier == "raw":
            values[row, np.searchsorted(x, px)] = py
        else:
            slots = np.searchsorted(x, px[0::2], side="left")
            values[row, slots] = py[0::2]
            values[row, slots + 1] = py[1::2]
    series = tuple((Device.from_text(r.series.device), r.series.metric) for r in ranges)
    tier = ranges[0].tier if ranges else "raw"
    step = ranges[0].step_s if ranges else 0.0
    return HistoryFrame(host, series, x, values, tier, step)
