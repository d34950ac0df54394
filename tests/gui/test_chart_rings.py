"""The chart rings keep the newest samples in fixed memory, each value once, and hand out ordered spans."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from meshdeck.ui.charts.ring import BucketRing, SeriesRing


def test_series_ring_returns_the_newest_points_oldest_first_after_wrapping() -> None:
    ring = SeriesRing(capacity=5)
    for step in range(12):
        ring.append(float(step), {"a": step * 10.0})
    times, values = ring.series("a")
    assert times.tolist() == [7.0, 8.0, 9.0, 10.0, 11.0]
    assert values.tolist() == [70.0, 80.0, 90.0, 100.0, 110.0]
    for step in range(12, 15):  # the newest sample at the buffer's end: the span does not wrap
        ring.append(float(step), {"a": step * 10.0})
    times, values = ring.series("a")
    assert times.tolist() == [10.0, 11.0, 12.0, 13.0, 14.0]
    assert times.base is not None and values.base is not None  # views, not copies


def _expected_row(kept: list[tuple[float, dict[str, float]]], key: str) -> list[float]:
    """One series over the kept samples, NaN where a sample did not report it."""
    return [values.get(key, math.nan) for _, values in kept]


@given(
    capacity=st.integers(2, 9),
    steps=st.integers(0, 30),
    since=st.floats(-1.0, 31.0),
    keys=st.lists(st.sampled_from(["a", "b", "c", "zz"]), max_size=4),
)
def test_series_ring_reads_match_a_plain_list_of_the_newest_samples(
    capacity: int, steps: int, since: float, keys: list[str]
) -> None:
    ring: SeriesRing[str] = SeriesRing(capacity=capacity, initial_rows=1)
    model: list[tuple[float, dict[str, float]]] = []
    for step in range(steps):
        values = {"a": step * 1.0} if step % 3 else {"a": step * 1.0, "b": -step * 1.0}
        ring.append(float(step), values)
        model = [*model, (float(step), values)][-capacity:]
    kept = [(ts, values) for ts, values in model if ts >= since]
    times, matrix = ring.matrix(keys, since)
    assert times.tolist() == [ts for ts, _ in kept] == ring.times(since).tolist()
    expected = [_expected_row(kept, key) for key in keys]
    assert np.array_equal(matrix, np.array(expected, dtype=np.float32).reshape(len(keys), len(kept)), equal_nan=True)
    for key in ("a", "b"):
        series_times, series_values = ring.series(key, since)
        if key in ring.keys:
            assert series_times.tolist() == [ts for ts, _ in kept]
            assert np.array_equal(series_values, np.array(_expected_row(kept, key), dtype=np.float32), equal_nan=True)


def test_a_ring_holds_each_value_once() -> None:
    ring: SeriesRing[str] = SeriesRing(capacity=4096, initial_rows=128)
    assert ring.nbytes == 4096 * 8 + 128 * 4096 * 4  # float64 times, float32 values, no second copy


def test_series_ring_fills_gaps_with_nan_for_series_missing_from_a_sample() -> None:
    ring = SeriesRing(capacity=8)
    ring.append(1.0, {"a": 1.0})
    ring.append(2.0, {"a": 2.0, "b": 20.0})
    ring.append(3.0, {"b": 30.0})
    assert np.isnan(ring.series("b")[1][0])
    assert np.isnan(ring.series("a")[1][2])
    assert ring.series("b")[1][1:].tolist() == [20.0, 30.0]


def test_series_ring_grows_rows_for_new_series_without_losing_old_ones() -> None:
    ring = SeriesRing(capacity=4, initial_rows=1)
    ring.append(1.0, {f"s{i}": float(i) for i in range(40)})
    assert [ring.latest(f"s{i}") for i in (0, 17, 39)] == [0.0, 17.0, 39.0]


def test_series_ring_matrix_reads_several_series_from_a_time_and_nan_for_unknown_keys() -> None:
    ring = SeriesRing(capacity=10)
    for step in range(6):
        ring.append(float(step), {"a": step, "b": -step})
    times, values = ring.matrix(["b", "missing", "a"], since=3.0)
    assert times.tolist() == [3.0, 4.0, 5.0]
    assert values[0].tolist() == [-3.0, -4.0, -5.0]
    assert np.isnan(values[1]).all()
    assert values[2].tolist() == [3.0, 4.0, 5.0]


def test_series_ring_rejects_a_capacity_too_small_to_draw_a_line() -> None:
    with pytest.raises(ValueError, match="capacity"):
        SeriesRing(capacity=1)


def test_bucket_ring_keeps_each_buckets_minimum_and_maximum_so_spikes_survive() -> None:
    ring = BucketRing(bucket_s=10.0, capacity=100)
    values = [5.0] * 30
    values[13] = 99.0  # a one-second spike in the second bucket
    values[25] = -1.0
    for second, value in enumerate(values):
        ring.append(float(second), {"gpu0": value})
    x, y = ring.envelope(["gpu0"])
    assert x.tolist() == [5.0, 5.0, 15.0, 15.0, 25.0, 25.0]  # bucket middles, twice each
    assert y[0].tolist() == [5.0, 5.0, 5.0, 99.0, -1.0, 5.0]  # min, max per bucket


def test_bucket_ring_envelope_honours_since_and_unknown_series() -> None:
    ring = BucketRing(bucket_s=10.0, capacity=100)
    for second in range(50):
        ring.append(float(second), {"a": float(second)})
    x, y = ring.envelope(["a", "nope"], since=30.0)
    assert x.min() >= 30.0
    assert y[0].tolist() == [30.0, 39.0, 40.0, 49.0]
    assert np.isnan(y[1]).all()


def test_bucket_ring_ignores_nan_values_inside_a_bucket() -> None:
    ring = BucketRing(bucket_s=10.0, capacity=10)
    ring.append(1.0, {"a": math.nan})
    ring.append(2.0, {"a": 4.0})
    _, y = ring.envelope(["a"])
    assert y[0].tolist() == [4.0, 4.0]
