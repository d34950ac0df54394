"""Units say what a value is, as the metric registry gives it; peak downsampling never hides an extreme."""

from __future__ import annotations

import numpy as np
from meshdeck.services import metrics
from meshdeck.ui.charts.multi_curve import CurveBatch, peak_reduce, y_bounds
from meshdeck.ui.charts.units import (
    BYTES_PER_S,
    CELSIUS,
    CHART_UNITS,
    COUNT,
    FRACTION_AS_PERCENT,
    GIB,
    chart_unit,
    nice_ceiling,
)
from meshdeck.ui.views.dashboard.charts import DASHBOARD_CHARTS


def test_memory_is_binary_and_link_rates_are_decimal() -> None:
    assert GIB.format(80.78 * 2**30) == "80.8 GiB"
    assert BYTES_PER_S.format(450e9) == "450.00 GB/s"
    assert FRACTION_AS_PERCENT.format(0.4123) == "41.2 %"
    assert CELSIUS.format(71.6) == "72 °C"
    assert GIB.format(float("nan")) == "—"


def test_nice_ceiling_rounds_up_to_1_2_2_5_5_steps() -> None:
    assert [nice_ceiling(v) for v in (0.0, 0.9, 1.0, 1.7, 2.2, 3.0, 7.0, 141.0)] == [1, 1, 1, 2, 2.5, 5, 10, 200]


def test_peak_reduce_keeps_every_minimum_and_maximum_and_the_newest_point() -> None:
    x = np.arange(1000.0)
    ys = np.zeros((2, 1000), dtype=np.float32)
    ys[0, 333] = 50.0
    ys[1, 777] = -20.0
    ys[:, -1] = 7.0
    out_x, out_y = peak_reduce(x, ys, columns=100)
    assert out_x.shape[0] == 200
    assert out_y[0].max() == 50.0
    assert out_y[1].min() == -20.0
    assert out_x[-1] == 999.0 and out_y[0, -1] == 7.0


def test_peak_reduce_keeps_nan_gaps_without_warnings() -> None:
    x = np.arange(100.0)
    ys = np.ones((1, 100), dtype=np.float32)
    ys[0, 20:40] = np.nan
    _, out_y = peak_reduce(x, ys, columns=10)
    assert np.isnan(out_y).sum() == 4  # two all-NaN buckets (min and max each); the others ignore NaN


def test_y_bounds_cover_only_the_visible_range() -> None:
    batch = CurveBatch(np.arange(10.0), np.arange(10.0, dtype=np.float32)[None, :], (0,))
    assert y_bounds([batch], 2.0, 5.0) == (2.0, 5.0)
    assert y_bounds([batch], 20.0, 30.0) is None


def test_every_dashboard_chart_draws_its_metrics_in_their_registry_unit() -> None:
    for definition in DASHBOARD_CHARTS:
        registry_units = {metrics.unit_of(definition.device_kind, pick.metric) for pick in definition.picks}
        assert len(registry_units) == 1, definition.name  # one axis, one unit
        assert all(metrics.is_registered(definition.device_kind, pick.metric) for pick in definition.picks)
        assert definition.unit == CHART_UNITS[registry_units.pop()], definition.name
    by_name = {definition.name: definition.unit for definition in DASHBOARD_CHARTS}
    assert by_name["vram"] == GIB and by_name["nvlink"] == BYTES_PER_S and by_name["kv_cache"] == FRACTION_AS_PERCENT
    assert by_name["temperature"] == CELSIUS


def test_every_registry_unit_has_a_chart_unit_and_an_unknown_metric_is_a_plain_count() -> None:
    assert set(CHART_UNITS) == set(metrics.UNITS)
    assert chart_unit("worker", "ttft_p99_s").format(0.25) == "250.0 ms"
    assert chart_unit("gpu", "sm_clock_mhz").format(1980) == "1980 MHz"
    assert chart_unit("worker", "vllm_next_thing") == COUNT
