"""Dashboard benchmark: 64 GPUs × 6 series × 1 h of 1 Hz samples, offscreen.

Prints (medians, no wall-time assertions):
- update + render time per refresh: one new wire sample per host is ingested, the dashboard
  redraws from its rings and the whole window is rendered to an image (targets: < 50 ms);
- the same with every curve redrawn from scratch (what happens when the time axis steps, once a
  minute in the 1 h window, instead of drawing only the newest points over the cached picture);
- the same refresh on an empty dashboard (baseline: widgets, axes, no curves) and the ratio;
- the same 384 curves drawn the stock pyqtgraph way (one PlotDataItem per curve with
  setDownsampling(mode='peak') and setClipToView(True)) for comparison, and the ratio;
- GUI-thread CPU while samples arrive at 1 Hz and the dashboard's own timer redraws (target < 25 %
  of a core), next to the same loop with the dashboard hidden (baseline).

The six per-GPU series: memory used, utilization, power, temperature, NVLink TX, NVLink RX.
Run: `make bench` or `pytest tests/benchmarks/test_bench_dashboard.py -s`.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gui"))

import numpy as np
import pyqtgraph as pg
from meshdeck.services.synthetic_samples import sample_batch
from meshdeck.ui.charts.live_metrics import LiveMetrics
from meshdeck.ui.views.dashboard.view import DashboardView, dashboard_metrics
from PySide6.QtCore import QEventLoop, QTimer
from wire_samples import wire_sample

HOSTS = 8
GPUS_PER_HOST = 8
SECONDS = 3600
WINDOW_S = 3600.0
SIZE = (1600, 1000)


def _six_series_sample(seq: int, ts: float, phase: float) -> dict:
    """A wire sample whose GPUs report exactly the six benchmarked series (others null)."""
    sample = wire_sample(seq, ts, gpus=GPUS_PER_HOST, nics=0, workers=0, phase=phase)
    for gpu in sample["gpus"]:
        gpu["pcie_tx_bytes_per_s"] = gpu["pcie_rx_bytes_per_s"] = None
    return sample


def _filled_metrics(start: float) -> LiveMetrics:
    metrics = LiveMetrics(keep_metrics=dashboard_metrics())
    for host in range(HOSTS):
        metrics.ingest(
            f"node-{host:02d}", sample_batch([_six_series_sample(seq + 1, start + seq, host) for seq in range(SECONDS)])
        )
    return metrics


def _render(widget) -> None:
    widget.grab()  # paints every visible child into a pixmap, as an expose would


def _feed_one_second(metrics: LiveMetrics) -> None:
    """One new sample per host, one second after the newest: the hour-long history stays contiguous."""
    ts = metrics.latest_time() + 1.0
    for host in range(HOSTS):
        metrics.ingest(f"node-{host:02d}", sample_batch([_six_series_sample(int(ts), ts, host)]))


def _time_refreshes(
    view: DashboardView, metrics: LiveMetrics, repeats: int, *, full: bool = False
) -> tuple[list[float], list[float]]:
    """(wall seconds, GUI-thread CPU seconds) per refresh: ingest one sample per host, redraw, render.

    `full`: every refresh redraws every curve from scratch, as when the x range steps (once a minute
    in the 1 h window) instead of only the newest points over the cached picture."""
    walls, cpus = [], []
    for _ in range(repeats):
        if metrics.hosts:
            _feed_one_second(metrics)
        if full:
            for chart in view.charts.values():
                chart._settled_range = None  # forget the cached part: the next update redraws all
        wall, cpu = time.perf_counter(), time.thread_time()
        view.refresh()
        _render(view)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.thread_time() - cpu)
    return walls, cpus


def _stock_pyqtgraph_refresh(metrics: LiveMetrics, widget: pg.GraphicsLayoutWidget, repeats: int) -> list[float]:
    """The same six series drawn with one PlotDataItem per curve (pyqtgraph's own peak/clip)."""
    charts = [
        ("memory_used_bytes",),
        ("utilization_pct",),
        ("power_w",),
        ("temperature_c",),
        ("nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s"),
    ]
    items = []
    for index, metric_names in enumerate(charts):
        plot = widget.addPlot(row=index // 2, col=index % 2)
        plot.setDownsampling(auto=True, mode="peak")
        plot.setClipToView(True)
        for host in metrics.hosts:
            for gpu in range(GPUS_PER_HOST):
                for metric in metric_names:
                    items.append((plot.plot(), host, f"gpu{gpu}", metric))
    end = metrics.latest_time()
    timings = []
    for _ in range(repeats):
        began = time.perf_counter()
        for curve, host, device, metric in items:
            x, y = metrics.window(host, [(device, metric)], WINDOW_S, end)
            curve.setData(x, y[0])
        _render(widget)
        timings.append(time.perf_counter() - began)
    return timings


def _gui_cpu_at_1hz(qapp, view: DashboardView, metrics: LiveMetrics, seconds: float) -> tuple[float, int]:
    """(GUI-thread CPU share, redraws) while one sample per host arrives every second (real timers)."""
    redraws = [0]
    view.refreshed.connect(lambda _points: redraws.__setitem__(0, redraws[0] + 1))
    feeder = QTimer()
    feeder.setInterval(1000)
    feeder.timeout.connect(lambda: _feed_one_second(metrics))
    loop = QEventLoop()
    QTimer.singleShot(int(seconds * 1000), loop.quit)
    cpu_before, wall_before = time.thread_time(), time.perf_counter()
    feeder.start()
    loop.exec()
    feeder.stop()
    return (time.thread_time() - cpu_before) / (time.perf_counter() - wall_before), redraws[0]


@pytest.mark.slow
def test_bench_dashboard_64_gpus_6_series_1h(qapp) -> None:
    start = time.time() - SECONDS - 60
    ingest_began = time.perf_counter()
    metrics = _filled_metrics(start)
    ingest_s = time.perf_counter() - ingest_began
    assert len(metrics.hosts) == HOSTS

    view = DashboardView(metrics)
    view.timer.stop()
    view.resize(*SIZE)
    view.set_window(WINDOW_S)
    view.show()
    qapp.processEvents()
    refresh, refresh_cpu = _time_refreshes(view, metrics, repeats=21)
    full, full_cpu = _time_refreshes(view, metrics, repeats=11, full=True)
    drawn = view.charts["vram"].curve_specs
    # 64 GPUs are drawn as each host's median with its min-max band, plus the outliers (fleet-scale's bands)
    assert sum(1 for spec in drawn if "median of" in spec.label) == HOSTS

    empty_view = DashboardView(LiveMetrics(keep_metrics=dashboard_metrics()))
    empty_view.timer.stop()
    empty_view.resize(*SIZE)
    empty_view.show()
    qapp.processEvents()
    baseline, baseline_cpu = _time_refreshes(empty_view, empty_view.metrics, repeats=21)
    empty_view.close()

    stock_widget = pg.GraphicsLayoutWidget()
    stock_widget.resize(*SIZE)
    stock = _stock_pyqtgraph_refresh(metrics, stock_widget, repeats=5)
    stock_widget.close()

    view.timer.start()
    cpu_visible, redraws_visible = _gui_cpu_at_1hz(qapp, view, metrics, seconds=20)
    view.hide()
    cpu_hidden, redraws_hidden = _gui_cpu_at_1hz(qapp, view, metrics, seconds=10)
    view.timer.stop()
    view.close()

    median_refresh = statistics.median(refresh) * 1e3
    median_refresh_cpu = statistics.median(refresh_cpu) * 1e3
    median_baseline = statistics.median(baseline) * 1e3
    median_baseline_cpu = statistics.median(baseline_cpu) * 1e3
    median_stock = statistics.median(stock) * 1e3
    print()
    print(f"dashboard bench: {HOSTS} hosts × {GPUS_PER_HOST} GPUs × 6 series × {SECONDS} s at 1 Hz, window {SIZE}")
    print(f"  VRAM chart: {len(drawn)} curves (a median + min–max band per host, and outliers), legend tables on")
    print(
        f"  initial ingest of {HOSTS * SECONDS} wire samples: {ingest_s:.1f} s; ring memory {metrics.nbytes / 2**20:.0f} MiB"
    )
    print(
        f"  update + render per refresh, median: {median_refresh:.1f} ms wall, {median_refresh_cpu:.1f} ms "
        "GUI-thread CPU (target < 50 ms; wall includes waiting for a core on a shared machine)"
    )
    print(
        f"  full redraw (the view stepped; no cached part), median: {statistics.median(full) * 1e3:.1f} ms wall, "
        f"{statistics.median(full_cpu) * 1e3:.1f} ms CPU"
    )
    print(
        f"  baseline (empty dashboard) median: {median_baseline:.1f} ms wall, {median_baseline_cpu:.1f} ms CPU; "
        f"ratio {median_refresh / median_baseline:.1f}x wall, {median_refresh_cpu / median_baseline_cpu:.1f}x CPU"
    )
    print(
        f"  stock pyqtgraph (PlotDataItem per curve, peak + clipToView) median: {median_stock:.1f} ms; "
        f"ours is {median_stock / median_refresh:.1f}x faster"
    )
    print(
        f"  GUI-thread CPU at 1 Hz, dashboard visible: {100 * cpu_visible:.1f} % of a core with {redraws_visible} "
        "redraws in 20 s (target < 25 %; a 1 h window redraws at most once a second)"
    )
    print(f"  GUI-thread CPU at 1 Hz, dashboard hidden (baseline): {100 * cpu_hidden:.1f} %, {redraws_hidden} redraws")
    assert redraws_visible >= 5, "the visible dashboard must really redraw while samples arrive"
    assert redraws_hidden == 0, "a hidden dashboard must not redraw"
    assert np.isfinite(median_refresh)
