"""Every per-series chart has a legend table as Grafana's: each curve named by host and device with its last,
minimum and maximum over the window; a click hides or shows a curve (Ctrl+click: only it); the crosshair is
shared by every chart of the dashboard; band charts' legends name each curve once; titles fit."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from gui_helpers import shown
from meshdeck.core.samples import Device, SampleBatch
from meshdeck.services.synthetic_samples import sample_batch
from meshdeck.ui.charts import units
from meshdeck.ui.charts.live_metrics import LiveMetrics
from meshdeck.ui.charts.time_chart import CurveSpec, TimeChart
from meshdeck.ui.views.dashboard.view import DashboardView, dashboard_metrics
from PySide6.QtCore import QPointF, Qt
from PySide6.QtTest import QTest
from wire_samples import GIB, wire_batch, wire_sample

PER_SERIES_CHARTS = ("vram", "utilization", "power", "temperature", "kv_cache")


def _chart(qtbot, curves: int = 2, width: int = 700) -> tuple[TimeChart, list[CurveSpec]]:
    chart = TimeChart("VRAM used per GPU", units.GIB)
    shown(qtbot, chart, width, 420)
    specs = [
        CurveSpec(("node-a", Device.gpu(i), "memory_used_bytes"), f"node-a gpu{i}", "#0072B2") for i in range(curves)
    ]
    chart.set_curves(specs)
    return chart, specs


def test_every_per_series_chart_names_each_curve_by_host_and_gpu_in_its_legend(qtbot, console_context) -> None:
    dashboard = DashboardView(console_context.live)
    shown(qtbot, dashboard, 1400, 900)
    now = time.time()
    for host in ("demo-a", "demo-b"):
        console_context.live.ingest(host, wire_batch(30, now - 30, gpus=2, workers=1))
    dashboard.refresh()
    for name in PER_SERIES_CHARTS:
        chart = dashboard.charts[name]
        assert chart.legend.isVisible(), name
        assert chart.legend_labels == [chart.display_label(spec) for spec in chart.curve_specs], name
    assert dashboard.charts["vram"].legend_labels == ["demo-a gpu0", "demo-a gpu1", "demo-b gpu0", "demo-b gpu1"]
    assert dashboard.charts["kv_cache"].legend_labels == ["demo-a w0 engine 0", "demo-b w0 engine 0"]
    assert dashboard.charts["nvlink"].legend_labels[:2] == ["demo-a gpu0 TX", "demo-a gpu0 RX"]


def test_the_legend_says_last_min_and_max_over_the_window_in_the_charts_unit(qtbot) -> None:
    chart, specs = _chart(qtbot)
    now = 1_800_000_000.0
    x = np.arange(now - 300, now, 1.0)
    values = np.vstack([(40 + 20 * np.sin(x / 30)) * GIB, np.full(x.size, 100.0 * GIB)]).astype(np.float32)
    values[1, 100] = 130 * GIB  # a spike inside the window
    values[1, 5] = 139 * GIB  # one before it: not counted
    chart.update_data(lambda _h, _ids: (x, values), now - 250, now)
    last, low, high = chart.legend_values(specs[1].key)
    assert (last, low, high) == (100 * GIB, 100 * GIB, 130 * GIB)
    inside = values[0][x >= now - 250]
    assert chart.legend_values(specs[0].key) == pytest.approx((values[0][-1], inside.min(), inside.max()))
    model = chart.legend.model_
    assert model.data(model.index(1, 3)) == "130.0 GiB" and model.data(model.index(1, 2)) == "100.0 GiB"


def test_legend_min_and_max_stay_exact_as_samples_arrive_and_the_window_moves(qtbot) -> None:
    """The settled part is reduced once and the tail each refresh: the result equals a full recomputation."""
    chart, specs = _chart(qtbot, curves=3)
    rng = np.random.default_rng(7)
    start = 1_800_000_000.0
    x = start + np.arange(2000, dtype=np.float64)
    values = rng.normal(60, 15, size=(3, x.size)).astype(np.float32) * GIB
    values[:, rng.integers(0, x.size, 40)] = np.nan
    for end in range(200, 2000, 37):  # refreshes; the window steps every 60 points, as the dashboard's
        x_end = start + (end // 60 + 1) * 60
        x_start = x_end - 300
        chart.update_data(lambda _h, _ids, end=end: (x[:end], values[:, :end]), x_start, x_end)
        inside = (x[:end] >= x_start) & (x[:end] <= x_end)
        for row, spec in enumerate(specs):
            _, low, high = chart.legend_values(spec.key)
            assert low == pytest.approx(np.nanmin(values[row, :end][inside]))
            assert high == pytest.approx(np.nanmax(values[row, :end][inside]))


def test_clicking_a_legend_row_hides_its_curve_and_ctrl_click_shows_only_it(qtbot) -> None:
    chart, specs = _chart(qtbot, curves=3)
    now = 1_800_000_000.0
    x = np.arange(now - 300, now, 1.0)
    levels = np.array([20.0, 40.0, 130.0])[:, None] * GIB * np.ones(x.size)
    chart.update_data(lambda _h, _ids: (x, levels.astype(np.float32)), now - 300, now)
    assert chart.plot_item.getViewBox().viewRange()[1][1] == 200  # fitted to 130 GiB

    view = chart.legend
    row_rect = view.visualRect(view.model().index(2, 0))
    QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, row_rect.center())
    assert chart.hidden_curves == {specs[2].key}
    assert [b.ys.shape[0] for b in chart._settled.batches] == [2]  # drawn without it
    assert chart.plot_item.getViewBox().viewRange()[1][1] == 50  # the y range fits the curves shown
    assert chart.readout_at(x[-1], 130.0).split("  ")[1].startswith("node-a gpu1")  # the readout skips it
    QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, row_rect.center())
    assert chart.hidden_curves == set()

    chart._legend_clicked(0, True)  # Ctrl+click: only this one
    assert chart.hidden_curves == {specs[1].key, specs[2].key}
    chart._legend_clicked(0, True)  # again: every curve
    assert chart.hidden_curves == set()


def test_the_crosshair_is_shared_by_every_chart_of_the_dashboard(qtbot, console_context) -> None:
    dashboard = DashboardView(console_context.live)
    shown(qtbot, dashboard, 1400, 900)
    now = time.time()
    console_context.live.ingest("demo-a", wire_batch(120, now - 120, gpus=2, workers=1))
    dashboard.refresh()
    vram = dashboard.charts["vram"]
    x, y = vram.curve_data(vram.curve_specs[0].key)
    at = float(x[60])
    scene = vram.plot_item.getViewBox().mapViewToScene(QPointF(at, float(y[60])))
    vram._on_mouse((scene,))
    stamp = time.strftime("%H:%M:%S", time.localtime(at))
    for name, chart in dashboard.charts.items():
        if not chart.curve_specs:
            continue
        assert chart._cursor.isVisible() and chart._cursor.value() == pytest.approx(at), name
        assert chart.readout.startswith(stamp), name
        assert chart.legend.model_.headerData(1, Qt.Orientation.Horizontal) == f"at {stamp}", name
    assert ": " in vram.readout and "demo-a gpu" in vram.readout  # the chart under the pointer: nearest curve
    assert "highest: demo-a gpu" in dashboard.charts["power"].readout  # the others: their highest at that time
    # the legend's first column shows each curve's value at that time
    power = dashboard.charts["power"]
    px, py = power.curve_data(power.curve_specs[0].key)
    assert power.legend.model_.last[0] == pytest.approx(float(py[np.argmin(np.abs(px - at))]))

    dashboard.crosshair.left()
    assert not any(chart._cursor.isVisible() for chart in dashboard.charts.values())
    assert vram.legend.model_.headerData(1, Qt.Orientation.Horizontal) == "last"


def _engine_fleet(hosts: int) -> LiveMetrics:
    """`hosts` hosts of two vLLM engines each, each host on its own phase of the load (so some stray)."""
    metrics = LiveMetrics(keep_metrics=dashboard_metrics())
    start = time.time() - 40
    for h in range(hosts):
        batch = sample_batch([wire_sample(1, start, gpus=1, nvlinks=1, nics=0, workers=2, phase=h)])
        for second in range(40):
            sample = sample_batch(
                [wire_sample(second + 1, start + second, gpus=1, nvlinks=1, nics=0, workers=2, phase=h * 0.7)]
            )
            metrics.ingest(f"node-{h:02d}", SampleBatch(sample.seqs, sample.times, batch.series, sample.values, True))
    return metrics


def test_band_charts_name_each_curve_once_and_their_titles_fit(qtbot) -> None:
    view = DashboardView(_engine_fleet(9))  # 18 engines x running / waiting: 36 curves, drawn as bands
    shown(qtbot, view, 900, 900)
    view.refresh()
    assert "requests" in view.aggregated and "tokens" in view.aggregated
    assert any("(outlier)" in label for label in view.charts["requests"].legend_labels)
    for name in ("requests", "tokens"):
        labels = view.charts[name].legend_labels
        assert labels
        for label in labels:
            assert not re.search(r"\b(\w+) \1\b", label), label  # not "running running", "prompt prompt"
    requests = view.charts["requests"].legend_labels
    assert "all 9 hosts median of 18 engines running (band: min–max)" in requests
    assert "all 9 hosts median of 18 engines waiting (band: min–max)" in requests

    title = view.charts["requests"].title_label
    assert title.text().endswith("3 outliers") and title.is_elided()  # too long for a 450 px chart: cut with …
    assert title.toolTip() == title.text()  # whole in its tooltip
    assert title.width() <= view.charts["requests"].width()  # the title never widens its chart
