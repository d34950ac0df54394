"""The live dashboard draws what agents send, honours filters, windows and pause, and reads out units."""

from __future__ import annotations

import time

import numpy as np
import pytest
from meshdeck.core.errors import InputError
from meshdeck.core.foreground import FOREGROUND
from meshdeck.core.samples import Device
from meshdeck.remote.events import SamplesReceived
from meshdeck.ui.views.dashboard.charts import parse_gpu_filter
from meshdeck.ui.views.dashboard.view import DashboardView, min_redraw_interval_s
from wire_samples import GIB, wire_batch

GPU0 = Device.gpu(0)
GPU1 = Device.gpu(1)
GPU2 = Device.gpu(2)
GPU7 = Device.gpu(7)


@pytest.fixture
def dashboard(qtbot, console_context):
    view = DashboardView(console_context.live)
    qtbot.addWidget(view)
    view.resize(1400, 900)
    view.show()
    return view


def _post(context, host: str, count: int, start: float, **kwargs) -> None:
    context.bridge.post(SamplesReceived(host, wire_batch(count, start, **kwargs)))


def test_charts_update_from_agent_sample_events(qtbot, console_context, dashboard) -> None:
    now = time.time()
    _post(console_context, "demo-a", 30, now - 30, gpus=2)
    _post(console_context, "demo-b", 30, now - 30, gpus=2, memory_used_bytes=60 * GIB)
    qtbot.waitUntil(lambda: bool(dashboard.charts["vram"].curve_specs), timeout=30000)
    labels = [spec.label for spec in dashboard.charts["vram"].curve_specs]
    assert labels == ["demo-a gpu0", "demo-a gpu1", "demo-b gpu0", "demo-b gpu1"]
    x, y = dashboard.charts["vram"].curve_data(("demo-b", GPU1, "memory_used_bytes"))
    assert len(x) == 30
    assert np.nanmax(y) == pytest.approx(60, rel=0.01)  # drawn in GiB
    _, rx = dashboard.charts["nvlink"].curve_data(("demo-a", GPU0, "nvlink_rx_bytes_per_s"))
    assert np.nanmax(rx) < 0  # receive is mirrored below zero
    _, tokens = dashboard.charts["tokens"].curve_data(("demo-a", Device.worker("w0", "0"), "generation_tokens_per_s"))
    assert np.nanmax(tokens) == pytest.approx(2500.0)
    assert dashboard.simulated_badge.isVisible()

    before = dashboard.metrics.generation
    _post(console_context, "demo-a", 1, now + 1, gpus=2)
    qtbot.waitUntil(lambda: dashboard.metrics.generation > before, timeout=30000)
    qtbot.waitUntil(
        lambda: len(dashboard.charts["vram"].curve_data(("demo-a", GPU0, "memory_used_bytes"))[0]) == 31,
        timeout=30000,
    )


def test_host_and_gpu_filters_choose_the_curves(qtbot, console_context, dashboard) -> None:
    now = time.time()
    _post(console_context, "demo-a", 5, now - 5, gpus=8)
    _post(console_context, "demo-b", 5, now - 5, gpus=8)
    qtbot.waitUntil(lambda: len(dashboard.charts["vram"].curve_specs) == 16, timeout=30000)
    dashboard.host_filter.setCurrentIndex(dashboard.host_filter.findData("demo-b"))
    dashboard.gpu_filter.setText("0-2,7")
    dashboard.gpu_filter.editingFinished.emit()
    dashboard.refresh()
    keys = [spec.key[:2] for spec in dashboard.charts["vram"].curve_specs]
    assert keys == [("demo-b", GPU0), ("demo-b", GPU1), ("demo-b", GPU2), ("demo-b", GPU7)]
    dashboard.gpu_filter.setText("3-1")
    dashboard.gpu_filter.editingFinished.emit()
    assert dashboard.gpu_filter.property("invalid") is True
    assert "backwards" in dashboard.gpu_filter.toolTip()


def test_pause_holds_the_charts_while_data_keeps_arriving(qtbot, console_context, dashboard) -> None:
    now = time.time()
    _post(console_context, "demo-a", 10, now - 10, gpus=1)
    qtbot.waitUntil(lambda: bool(dashboard.charts["vram"].curve_specs), timeout=30000)
    dashboard.refresh()
    dashboard.pause_button.click()
    assert dashboard.paused and dashboard.pause_button.text() == "Resume"
    drawn = len(dashboard.charts["vram"].curve_data(("demo-a", GPU0, "memory_used_bytes"))[0])
    _post(console_context, "demo-a", 3, now + 1, gpus=1)
    qtbot.waitUntil(lambda: console_context.live.latest_time() >= now + 3, timeout=30000)
    ticks: list[None] = []
    dashboard.timer.timeout.connect(lambda: ticks.append(None))  # runs after the view's own slot
    qtbot.waitUntil(lambda: len(ticks) >= 2, timeout=30000)  # two redraw ticks passed with new data
    assert len(dashboard.charts["vram"].curve_data(("demo-a", GPU0, "memory_used_bytes"))[0]) == drawn
    dashboard.pause_button.click()
    qtbot.waitUntil(
        lambda: len(dashboard.charts["vram"].curve_data(("demo-a", GPU0, "memory_used_bytes"))[0]) == drawn + 3,
        timeout=5000,
    )


def test_window_choice_and_plan_line_and_cursor_readout_with_units(qtbot, console_context, dashboard) -> None:
    now = time.time()
    _post(console_context, "demo-a", 600, now - 600, gpus=1, memory_used_bytes=100 * GIB)
    qtbot.waitUntil(lambda: console_context.live.latest_time() > now - 2, timeout=30000)
    dashboard.set_window(300)
    dashboard.refresh()
    x, _ = dashboard.charts["vram"].curve_data(("demo-a", GPU0, "memory_used_bytes"))
    assert x[-1] - x[0] <= 300
    dashboard.set_window(3600)
    dashboard.refresh()
    x, _ = dashboard.charts["vram"].curve_data(("demo-a", GPU0, "memory_used_bytes"))
    assert len(x) == 600
    with pytest.raises(InputError, match="window"):
        dashboard.set_window(42)

    dashboard.set_planned_memory({("demo-a", 0): 130 * GIB})
    dashboard.refresh()
    assert dashboard.charts["vram"].reference_values == [pytest.approx(130 * GIB)]
    readout = dashboard.charts["vram"].readout_at(x[-1], 100.0)
    assert readout.endswith(" GiB") and "  demo-a gpu0: " in readout
    assert float(readout.split(": ")[1].split()[0]) == pytest.approx(100, abs=0.5)  # the samples wobble 0.2 %
    nvlink = dashboard.charts["nvlink"]
    _, rx = nvlink.curve_data(("demo-a", GPU0, "nvlink_rx_bytes_per_s"))
    rx_readout = nvlink.readout_at(x[-1], float(rx[-1]))
    assert " RX: " in rx_readout
    # the simulated rate wanders around 1 GB/s: the unit follows the value (RX is drawn below the axis)
    number, unit = rx_readout.split(" RX: ")[1].split()
    assert float(number) * {"kB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9}[unit] == pytest.approx(abs(float(rx[-1])), rel=0.01)


def test_redraw_rate_is_at_most_twice_a_second_and_slower_for_long_windows() -> None:
    assert min_redraw_interval_s(300) == 0.5
    assert min_redraw_interval_s(3600) == 1.0
    assert min_redraw_interval_s(86400) == 5.0


@pytest.mark.parametrize("text, expected", [("", None), ("all", None), ("3", {3}), ("0-2, 6", {0, 1, 2, 6})])
def test_gpu_filter_spelling(text: str, expected) -> None:
    assert parse_gpu_filter(text) == (None if expected is None else frozenset(expected))


@pytest.mark.parametrize("text", ["x", "1-", "-3", "5-2", "0-99999"])
def test_gpu_filter_rejects_what_is_not_an_index_or_range(text: str) -> None:
    with pytest.raises(InputError, match="GPU filter"):
        parse_gpu_filter(text)


def test_each_refresh_keeps_its_update_and_paint_time_in_a_bounded_record(console_context, dashboard) -> None:
    now = time.time()
    console_context.live.ingest("demo-a", wire_batch(30, now - 30, gpus=2))
    dashboard.timer.stop()  # only the refreshes this test asks for
    before = len(dashboard.refresh_durations_ms())
    dashboard.refresh()
    dashboard.refresh()
    durations = dashboard.refresh_durations_ms()
    assert len(durations) == before + 2
    assert all(ms > 0 for ms in durations[-2:])
    kept = dashboard._refresh_ms.maxlen
    assert kept == 4096
    for _ in range(kept - len(durations) + 5):
        dashboard._refresh_ms.append(1.0)
    assert len(dashboard.refresh_durations_ms()) == kept  # the oldest go first: memory stays bounded


def test_a_refresh_holds_the_foreground_gate_while_it_updates_and_paints(
    console_context, dashboard, monkeypatch
) -> None:
    """The sample pump and the writer step aside meanwhile (core/foreground.py)."""
    console_context.live.ingest("demo-a", wire_batch(5, time.time() - 5, gpus=2))
    dashboard.timer.stop()
    held: list[tuple[str, bool]] = []
    update, paint = dashboard._update_charts, dashboard._paint_now
    monkeypatch.setattr(dashboard, "_update_charts", lambda: held.append(("update", FOREGROUND.held)) or update())
    monkeypatch.setattr(dashboard, "_paint_now", lambda: held.append(("paint", FOREGROUND.held)) or paint())
    dashboard.refresh()
    assert held == [("update", True), ("paint", True)] and not FOREGROUND.held
