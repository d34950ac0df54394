"""The dashboard follows the conventions of the tools operators use: a refresh-interval choice kept in the
settings, + / − / ← / → / Home time keys (listed for the help dialog), deployment start / stop markers, time
axes that name their zone, and an empty GPU chart of a CPU host that says why."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from gui_helpers import press, shown
from meshdeck.core.errors import InputError
from meshdeck.services.deployments.model import DeploymentSnapshot, WorkerSnapshot
from meshdeck.ui.charts.chart_parts import time_axis_label, zone_name
from meshdeck.ui.charts.navigation import CHART_SHORTCUTS, shifted, zoomed
from meshdeck.ui.views.dashboard.view import DashboardView
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QShortcut
from wire_samples import wire_batch


@pytest.fixture
def dashboard(qtbot, console_context):
    view = DashboardView(console_context.live)
    shown(qtbot, view, 1400, 900)
    view.timer.stop()  # only the refreshes a test asks for
    return view


def test_the_refresh_interval_choice_paces_redraws_and_is_kept_in_the_settings(
    qtbot, console_context, dashboard, tmp_path
) -> None:
    assert [dashboard.refresh_choice.itemText(i) for i in range(dashboard.refresh_choice.count())] == [
        "auto",
        "1 s",
        "2 s",
        "5 s",
        "10 s",
    ]
    now = time.time()
    console_context.live.ingest("demo-a", wire_batch(10, now - 10, gpus=1))
    refreshes: list[int] = []
    dashboard.refreshed.connect(refreshes.append)
    dashboard.set_refresh_interval(5.0)
    assert dashboard.redraw_interval_s() == 5.0
    dashboard._last_refresh = time.monotonic() - 2.0  # redrawn 2 s ago, new samples since
    dashboard._on_timer()
    assert refreshes == []  # not due for 5 s
    dashboard.set_refresh_interval(0.0)  # auto: the 5-minute window is worth a redraw every 0.5 s
    dashboard._on_timer()
    assert len(refreshes) == 1
    with pytest.raises(InputError, match="refresh interval"):
        dashboard.set_refresh_interval(3.0)

    dashboard.set_refresh_interval(10.0)
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    dashboard.save_settings(settings)
    again = DashboardView(console_context.live)
    qtbot.addWidget(again)
    again.restore_settings(settings)
    assert again.refresh_s == 10.0 and again.refresh_choice.currentText() == "10 s"


def test_time_keys_zoom_shift_and_home_goes_back_to_live(qtbot, console_context, dashboard) -> None:
    assert [key for key, _ in CHART_SHORTCUTS] == ["+", "−", "←", "→", "Home"]
    described = {shortcut.whatsThis() for shortcut in dashboard.findChildren(QShortcut)}
    assert {description for _, description in CHART_SHORTCUTS} <= described  # the shortcuts help reads them
    now = time.time()
    console_context.live.ingest("demo-a", wire_batch(1800, now - 1800, gpus=1))
    dashboard.refresh()
    start, end = dashboard.shown_range()
    assert end - start == 300 and dashboard.held_range is None
    dashboard.setFocus()
    vram = dashboard.charts["vram"]

    press(dashboard, Qt.Key.Key_Plus)  # zoom in: half the range around its middle
    assert dashboard.held_range == pytest.approx((start + 75, end - 75))
    assert vram.plot_item.getViewBox().viewRange()[0] == pytest.approx([start + 75, end - 75])
    assert "Home: back to live" in dashboard.status.text()
    press(dashboard, Qt.Key.Key_Minus)
    press(dashboard, Qt.Key.Key_Minus)  # out: twice as long
    assert dashboard.held_range == pytest.approx((start - 150, end + 150))
    press(dashboard, Qt.Key.Key_Left)  # back by half the span
    held = dashboard.held_range
    assert held == pytest.approx((start - 450, end - 150))
    x, _ = vram.curve_data(vram.curve_specs[0].key)
    assert x.min() <= held[0] + 1 and x[(x >= held[0]) & (x <= held[1])].size >= 590  # drawn from the rings
    press(dashboard, Qt.Key.Key_Right)
    press(dashboard, Qt.Key.Key_Right)  # not past the newest sample
    assert dashboard.held_range[1] <= max(end + 150, console_context.live.latest_time()) + 1e-6

    dashboard.set_paused(True)
    press(dashboard, Qt.Key.Key_Home)  # live again, and out of pause
    assert dashboard.held_range is None and not dashboard.paused
    assert vram.plot_item.getViewBox().viewRange()[0] == pytest.approx([start, end])
    assert "Home" in vram.legend.toolTip() and "+" in dashboard.window_choice.toolTip()


def test_zoom_and_shift_arithmetic() -> None:
    assert zoomed(100.0, 400.0, 0.5) == (175.0, 325.0)
    assert zoomed(100.0, 110.0, 0.5, min_span=30.0) == (90.0, 120.0)
    assert zoomed(0.0, 80000.0, 2.0, max_span=86400.0) == (-3200.0, 83200.0)
    assert shifted(100.0, 400.0, -0.5) == (-50.0, 250.0)
    assert shifted(100.0, 400.0, 0.5, latest=450.0) == (150.0, 450.0)


def _deployment(state: str, started_at: float) -> DeploymentSnapshot:
    worker = WorkerSnapshot("vllm-node0", "demo-a", "w-1", 0, "running")
    return DeploymentSnapshot("dep-1", "ds32-prod", "vllm", state, "", (worker,), started_at)


def test_deployment_starts_and_stops_are_markers_on_the_charts_of_their_hosts(
    qtbot, console_context, dashboard, monkeypatch
) -> None:
    now = time.time()
    console_context.live.ingest("demo-a", wire_batch(200, now - 200, gpus=1))
    console_context.live.ingest("demo-b", wire_batch(200, now - 200, gpus=1))
    running = _deployment("running", now - 120)
    dashboard.set_deployments([running])
    dashboard.refresh()
    for chart in dashboard.charts.values():
        assert [(m.label, m.ts) for m in chart.markers] == [("▶ ds32-prod", now - 120)]
    dashboard.set_deployments([replace(running, state="stopped")])
    dashboard.refresh()
    labels = [m.label for m in dashboard.charts["vram"].markers]
    assert labels == ["▶ ds32-prod", "■ ds32-prod stopped"]
    stop = dashboard.charts["vram"].markers[1]
    assert now <= stop.ts <= time.time() and stop.color != dashboard.charts["vram"].markers[0].color

    dashboard.host_filter.setCurrentIndex(dashboard.host_filter.findData("demo-b"))  # not its host
    dashboard.refresh()
    assert dashboard.charts["vram"].markers == []


def test_time_axes_name_their_zone(qtbot, dashboard, monkeypatch) -> None:
    axis = dashboard.charts["vram"].plot_item.getAxis("bottom")
    assert axis.labelText == time_axis_label() and axis.labelText.startswith("time (UTC")
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    try:
        assert zone_name(1_767_225_600.0) == "UTC+01:00"  # 2026-01-01: winter time
        assert zone_name(1_782_864_000.0) == "UTC+02:00"  # 2026-07-01: summer time
        monkeypatch.setenv("TZ", "America/St_Johns")
        time.tzset()
        assert zone_name(1_767_225_600.0) == "UTC−03:30"
        monkeypatch.setenv("TZ", "UTC")
        time.tzset()
        assert zone_name(1_767_225_600.0) == "UTC"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_an_empty_gpu_chart_of_a_cpu_host_says_its_agent_reports_no_gpu(qtbot, console_context, dashboard) -> None:
    now = time.time()
    console_context.live.ingest("cpu-a", wire_batch(10, now - 10, gpus=0, workers=1))
    dashboard.refresh()
    vram = dashboard.charts["vram"]
    assert not vram.curve_specs
    assert vram.overlay.isVisible() and vram.overlay.text() == "no GPU on cpu-a: its agent reports none"
    assert dashboard.charts["utilization"].overlay.text() == "no GPU on cpu-a: its agent reports none"
    assert not dashboard.charts["kv_cache"].overlay.isVisible()  # its engine reports

    console_context.live.ingest("gpu-b", wire_batch(10, now - 10, gpus=2))
    dashboard.refresh()
    assert vram.curve_specs and not vram.overlay.isVisible()  # gpu-b's GPUs are drawn
    dashboard.host_filter.setCurrentIndex(dashboard.host_filter.findData("cpu-a"))
    dashboard.refresh()
    assert vram.overlay.isVisible() and "cpu-a" in vram.overlay.text()
