"""The numbers of a chart's legend, per curve: the last value, the minimum and the maximum over the window shown.

They come from the data a refresh already holds, kept as the chart keeps its picture (time_chart.py): the part
of the curves that no longer changes (the settled part) is reduced once, when it is redrawn, and each refresh
reduces only the newest points (the tail) and folds them in. A refresh therefore costs the tail's few
points per curve, not the window's thousands; the y range is fitted from the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

from meshdeck.ui.charts.multi_curve import CurveBatch


def row_bounds(batch: CurveBatch, x_low: float, x_high: float, after: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Each row's (min, max) over the points with x in [x_low, x_high] ((x_low, x_high] when `after`); NaN for a
    row without a finite value there (no warning)."""
    side: Literal["left", "right"] = "right" if after else "left"
    first = int(np.searchsorted(batch.x, x_low, side=side)) if math.isfinite(x_low) else 0
    last = int(np.searchsorted(batch.x, x_high, side="right"))
    rows = batch.ys.shape[0]
    if last <= first:
        return np.full(rows, np.nan), np.full(rows, np.nan)
    block = batch.ys[:, first:last]
    return np.fmin.reduce(block, axis=1).astype(np.float64), np.fmax.reduce(block, axis=1).astype(np.float64)


def last_values(batch: CurveBatch, x_high: float) -> np.ndarray:
    """Each row's value at the newest point at or before `x_high` (NaN: that sample lacks it, or none)."""
    index = int(np.searchsorted(batch.x, x_high, side="right")) - 1
    if index < 0:
        return np.full(batch.ys.shape[0], np.nan)
    return batch.ys[:, index].astype(np.float64)


def values_at(batch: CurveBatch, x: float) -> np.ndarray:
    """Each row's value at the point nearest to `x` (NaN: none)."""
    if batch.x.size == 0:
        return np.full(batch.ys.shape[0], np.nan)
    index = int(np.clip(np.searchsorted(batch.x, x), 0, batch.x.size - 1))
    if index > 0 and abs(batch.x[index - 1] - x) < abs(batch.x[index] - x):
        index -= 1
    return batch.ys[:, index].astype(np.float64)


def scatter(per_batch: Sequence[np.ndarray], rows: Sequence[np.ndarray], size: int) -> np.ndarray:
    """Per-batch row values put at their curves' positions (`rows[b][i]`: the curve of batch b's row i)."""
    out = np.full(size, np.nan)
    for values, where in zip(per_batch, rows, strict=True):
        out[where] = values
    return out


def to_raw(values: np.ndarray, factors: np.ndarray) -> np.ndarray:
    """Axis units back to raw wire units (a mirrored curve's factor is negative)."""
    with np.errstate(invalid="ignore"):
        raw: np.ndarray = values / factors
    return raw


def raw_bounds(low: np.ndarray, high: np.ndarray, factors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(min, max) in axis units -> (min, max) in raw units: a mirrored curve's (drawn below zero) swap."""
    a, b = to_raw(low, factors), to_raw(high, factors)
    return np.fmin(a, b), np.fmax(a, b)
