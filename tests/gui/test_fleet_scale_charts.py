"""Dashboard charts at fleet scale: over AGGREGATE_ABOVE curves a chart draws per group a median with a
min–max band and the top outliers as curves, and names every one (legend, readout); at or under it
draws every series as before. The incremental bucket aggregate equals a recomputation from scratch."""

from __future__ import annotations

import math
import time

import numpy as np
from gui_helpers import shown
from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck.core.samples import Device, SampleBatch
from meshdeck.services.synthetic_samples import sample_batch
from meshdeck.ui.charts.aggregate import AggregateSeries, FleetAggregate, column_stats
from meshdeck.ui.charts.live_metrics import LiveMetrics
from meshdeck.ui.views.dashboard.fleet_scale import AGGREGATE_ABOVE, HOST_GROUPS_MAX, NOT_DEPLOYED
from meshdeck.ui.views.dashboard.view import DashboardView, dashboard_metrics
from wire_samples import GIB, wire_sample

SECONDS = 40


def _metrics(hosts: int, gpus: int = 8, hot: tuple[str, int] | None = None) -> LiveMetrics:
    """`hosts` hosts whose GPU g uses (60 + g) GiB, for SECONDS seconds; `hot` (host, gpu) uses 139 GiB."""
    metrics = LiveMetrics(keep_metrics=dashboard_metrics())
    start = time.time() - SECONDS
    template = wire_sample(1, start, gpus=gpus, nvlinks=1, nics=0, workers=0)
    for h in range(hosts):
        host = f"node-{h:02d}"
        sample = dict(template, gpus=[dict(g) for g in template["gpus"]])
        for g, gpu in enumerate(sample["gpus"]):
            gpu["memory_used_bytes"] = (139 if (host, g) == hot else 60 + g) * GIB
        batch = sample_batch([sample])
        for second in range(SECONDS):
            metrics.ingest(host, SampleBatch(batch.seqs, (start + second,), batch.series, batch.values, True))
    return metrics


def _dashboard(qtbot, metrics: LiveMetrics) -> DashboardView:
    view = DashboardView(metrics)
    shown(qtbot, view, 1200, 900)
    view.refresh()
    return view


def test_a_chart_with_more_curves_than_the_threshold_draws_medians_bands_and_named_outliers(qtbot) -> None:
    view = _dashboard(qtbot, _metrics(6, hot=("node-03", 5)))  # 48 GPU curves > 32
    assert AGGREGATE_ABOVE < 6 * 8 and "vram" in view.aggregated
    chart = view.charts["vram"]
    labels = [chart.display_label(spec) for spec in chart.curve_specs]
    medians = [label for label in labels if "median" in label]
    # 6 hosts <= HOST_GROUPS_MAX: per host
    assert medians == [f"node-{h:02d} median of 8 GPUs (band: min–max)" for h in range(6)]
    assert labels[len(medians)] == "node-03 gpu5 (outlier)"  # the furthest from its group's median comes first
    assert len(labels) == 6 + 3
    assert chart.legend_labels == labels  # one legend row per curve, in their order
    assert chart.legend.isVisible()
    assert "48 series: median + min–max per host, 3 outliers" in chart.title_text

    # the medians and bands are those of the GPUs' values: 60..67 GiB (node-03: 60..64, 139, 66, 67)
    x, median = chart.curve_data(chart.curve_specs[0].key)
    finite = np.isfinite(median)
    assert finite.sum() >= 10
    assert np.allclose(median[finite], 63.5)
    bands = chart.bands
    assert len(bands) == 6
    assert np.allclose(bands[0].low[np.isfinite(bands[0].low)], 60) and np.allclose(
        bands[3].high[np.isfinite(bands[3].high)], 139
    )
    _, hot = chart.curve_data(chart.curve_specs[6].key)
    assert np.allclose(hot[np.isfinite(hot)], 139)

    # the readout under the cursor names the median curve it is on
    at = float(x[finite][-1])
    assert "node-00 median of 8 GPUs (band: min–max): 63.5 GiB" in chart.readout_at(at, 63.5)


def test_a_chart_at_the_threshold_draws_every_series_as_before(qtbot) -> None:
    view = _dashboard(qtbot, _metrics(4))  # exactly 32 GPU curves
    assert "vram" not in view.aggregated
    chart = view.charts["vram"]
    assert len(chart.curve_specs) == 32 and not chart.bands
    assert all("median" not in spec.label for spec in chart.curve_specs)
    assert chart.legend_labels[:2] == ["node-00 gpu0", "node-00 gpu1"]  # every curve named in the legend


def test_over_many_hosts_the_groups_are_the_running_deployments(qtbot) -> None:
    hosts = HOST_GROUPS_MAX + 4
    view = _dashboard(qtbot, _metrics(hosts))
    view.set_deployment_of_host({f"node-{h:02d}": "ds32-prod" for h in range(5)})
    view.refresh()
    chart = view.charts["vram"]
    medians = [spec.label for spec in chart.curve_specs if "median" in spec.label]
    assert medians == ["ds32-prod median of 40 GPUs", f"{NOT_DEPLOYED} median of {8 * (hosts - 5)} GPUs"]
    assert "per deployment" in chart.title_text

    view.set_deployment_of_host({})  # no deployment: one group of every host
    view.refresh()
    medians = [spec.label for spec in chart.curve_specs if "median" in spec.label]
    assert medians == [f"all {hosts} hosts median of {8 * hosts} GPUs"]


def test_going_back_under_the_threshold_removes_the_aggregates(qtbot) -> None:
    from meshdeck.ui.views.dashboard.charts import Selection

    view = _dashboard(qtbot, _metrics(6))
    assert "vram" in view.aggregated
    view.show_selection(Selection(hosts=frozenset({"node-01", "node-02"})))
    view.refresh()
    chart = view.charts["vram"]
    assert "vram" not in view.aggregated
    assert len(chart.curve_specs) == 16 and not chart.bands and len(chart.legend_labels) == 16
    assert "median" not in chart.title_text


def test_column_stats_skip_gaps_and_leave_empty_columns_empty() -> None:
    values = np.array([[1, np.nan, np.nan], [5, 2, np.nan], [3, np.nan, np.nan], [4, 8, np.nan]], dtype=np.float32)
    median, low, high = column_stats(values, [np.arange(4)])
    assert median[0, 0] == 3.5 and low[0, 0] == 1 and high[0, 0] == 5
    assert median[0, 1] == 5 and low[0, 1] == 2 and high[0, 1] == 8
    assert math.isnan(median[0, 2]) and math.isnan(low[0, 2]) and math.isnan(high[0, 2])


@settings(deadline=None, max_examples=200)
@given(
    samples=st.lists(
        st.tuples(st.integers(0, 2), st.floats(0.0, 0.999), st.floats(-1e6, 1e6, allow_nan=False, width=32)),
        min_size=1,
        max_size=60,
    ),
    cuts=st.lists(st.integers(1, 40), min_size=1, max_size=5),
)
def test_the_incremental_aggregate_equals_one_computed_from_scratch(samples, cuts) -> None:
    """Samples of 3 series (2 slots) arrive over time; updating at each cut gives what one update at the
    end gives (complete buckets never change; the still-filling ones are read again)."""
    window, step_count = 60.0, 150
    step = window / step_count
    rows: dict[int, list[tuple[float, float]]] = {0: [], 1: [], 2: []}
    base = 1.7e9
    for i, (series, offset, value) in enumerate(samples):
        rows[series].append((base + i * 0.7 + offset * 0.5, value))
    for series in rows:
        rows[series].sort()
    spec = [AggregateSeries(f"h{s}", (Device.gpu(s), "power_w"), 0 if s < 2 else 1) for s in range(3)]
    ends = sorted({base + c for c in cuts} | {base + 45.0})

    def reader(until: float):
        def read(host: str, keys, since: float):
            points = [(t, v) for t, v in rows[int(host[1:])] if since <= t <= until]
            x = np.array([t for t, _ in points])
            return x, np.array([[v for _, v in points]], dtype=np.float32).reshape(1, -1)

        return read

    incremental = FleetAggregate(spec, 2)
    for end in ends:
        incremental.update(reader(end), window, end)
    scratch = FleetAggregate(spec, 2)
    scratch.update(reader(ends[-1]), window, ends[-1])
    assert incremental.first_bucket == scratch.first_bucket and step == incremental.step
    np.testing.assert_array_equal(incremental.values, scratch.values)
    for mine, theirs in zip(incremental.stats.__dict__.values(), scratch.stats.__dict__.values(), strict=True):
        np.testing.assert_array_equal(mine, theirs)


def test_the_running_deployments_name_the_groups_of_their_hosts() -> None:
    from meshdeck.services.deployments.model import DeploymentSnapshot, PlannedNumbers, WorkerSnapshot
    from meshdeck.ui.views.fleet.groups import deployment_of_host

    def snapshot(name: str, state: str, started: float, hosts: tuple[str, ...], planned: bool) -> DeploymentSnapshot:
        workers = tuple(WorkerSnapshot(f"vllm-{h}", h, f"{name}.vllm-{h}", 0, "running") for h in hosts)
        plan = PlannedNumbers({}, None, tuple((h, 0) for h in hosts)) if planned else None
        return DeploymentSnapshot(name, name, "vllm", state, "", workers, started, planned=plan)

    named = deployment_of_host(
        [
            snapshot("old", "running", 1.0, ("a", "b"), planned=True),
            snapshot("new", "running", 2.0, ("b", "c"), planned=False),  # found on the agents: its workers' hosts
            snapshot("gone", "stopped", 3.0, ("d",), planned=True),
        ]
    )
    assert named == {"b": "new", "c": "new", "a": "old"}
