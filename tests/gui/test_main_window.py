"""The console window: keyboard navigation between views, remembered layout, status bar summary."""

from __future__ import annotations

from gui_helpers import connect_hosts, press
from meshdeck.remote.events import HostStateChanged
from meshdeck.ui.main_window import MainWindow, ViewEntry
from meshdeck.ui.views.dashboard.view import DashboardView
from meshdeck.ui.views.planner.view import PlannerView
from PySide6.QtCore import Qt


def _window(qtbot, context) -> MainWindow:
    window = MainWindow(
        context,
        [
            ViewEntry("planner", "Planner", PlannerView(context)),
            ViewEntry("dashboard", "Dashboard", DashboardView(context.live)),
        ],
    )
    qtbot.addWidget(window)
    window.show()
    window.activateWindow()
    qtbot.waitActive(window)  # shortcuts reach only the active window
    return window


def test_ctrl_number_and_ctrl_page_keys_switch_views(qtbot, console_context) -> None:
    window = _window(qtbot, console_context)
    assert window.current_view_key() == "planner"
    press(window, Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)
    assert window.current_view_key() == "dashboard"
    press(window, Qt.Key.Key_PageDown, Qt.KeyboardModifier.ControlModifier)
    assert window.current_view_key() == "planner"  # wraps around
    window.navigation.setFocus()
    qtbot.keyClick(window.navigation, Qt.Key.Key_Down)
    assert window.current_view_key() == "dashboard"


def test_the_last_view_and_geometry_come_back_next_time(qtbot, console_context) -> None:
    window = _window(qtbot, console_context)
    window.show_view("dashboard")
    window.resize(701, 503)  # the offscreen screen is 800 x 800
    window.save_settings()
    again = _window(qtbot, console_context)
    assert again.current_view_key() == "dashboard"
    assert again.size().width() == 701


def test_status_bar_counts_connected_hosts_and_flags_simulated_ones(
    qtbot, console_context, simulated_inventory
) -> None:
    window = _window(qtbot, console_context)
    assert "no hosts yet" in window.hosts_summary.text()
    assert not window.simulated_badge.isVisibleTo(window)
    connect_hosts(qtbot, console_context, {"demo-a": simulated_inventory})
    console_context.bridge.post(HostStateChanged("gpu-x", "failed", "gpu-x: unknown host key"))
    qtbot.waitUntil(lambda: "failed: gpu-x" in window.hosts_summary.text(), timeout=30000)
    assert window.hosts_summary.text().startswith("1 of 2 host(s) connected")
    assert window.simulated_badge.isVisibleTo(window)


def test_charts_follow_a_switch_to_a_dark_palette(qtbot, console_context) -> None:
    from meshdeck.ui.app import repaint_charts
    from meshdeck.ui.charts.time_chart import TimeChart
    from meshdeck.ui.theme import ThemeWatcher, is_dark
    from PySide6.QtGui import QColor, QPalette
    from PySide6.QtWidgets import QApplication

    window = _window(qtbot, console_context)
    app = QApplication.instance()
    watcher = ThemeWatcher(app)
    watcher.changed.connect(lambda: repaint_charts(window))
    original = app.palette()
    dark = QPalette(original)
    for role, colour in (
        (QPalette.ColorRole.Window, "#202124"),
        (QPalette.ColorRole.Base, "#17181a"),
        (QPalette.ColorRole.Text, "#e8eaed"),
    ):
        dark.setColor(role, QColor(colour))
    try:
        app.setPalette(dark)
        qtbot.waitUntil(lambda: is_dark(), timeout=30000)
        chart = window.findChildren(TimeChart)[0]
        qtbot.waitUntil(lambda: chart.plot_widget.backgroundBrush().color() == QColor("#17181a"), timeout=30000)
        assert chart.plot_item.getAxis("left").textPen().color() == QColor("#e8eaed")
    finally:
        app.setPalette(original)
        watcher.deleteLater()


def test_dashboard_choices_are_kept(qtbot, console_context) -> None:
    window = _window(qtbot, console_context)
    dashboard = window.show_view("dashboard")
    dashboard.set_window(3600)
    dashboard.gpu_filter.setText("0-3")
    window.save_settings()
    again = _window(qtbot, console_context)
    restored = again.views[again.view_keys().index("dashboard")].widget
    assert restored.window_s == 3600 and restored.gpu_filter.text() == "0-3"
    assert restored.selection.gpus == frozenset({0, 1, 2, 3})
