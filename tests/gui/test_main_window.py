"""The console window: keyboard navigation between views, remembered layout, status bar summary."""

from __future__ import annotations

from gui_helpers import connect_hosts, press
from meshdeck.remote.events import HostStateChanged
from meshdeck.ui.main_window import MainWindow, ViewEntry
from meshdeck.ui.views.dashboard.view import DashboardView
from meshdeck.ui.views.planner.view import PlannerView
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication


def window_of_two_views(qtbot, context) -> MainWindow:
    window = MainWindow(
        context,
        [
            ViewEntry("planner", "Planner", PlannerView(context)),
            ViewEntry("dashboard", "Dashboard", DashboardView(context.live)),
        ],
    )
    qtbot.addWidget(window)
    window.show()
    activate(qtbot, window)
    return window


def activate(qtbot, window: MainWindow) -> None:
    window.activateWindow()
    qtbot.waitActive(window)  # shortcuts reach only the active window ...
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window)  # ... once the widgets know it is


def test_ctrl_number_and_ctrl_page_keys_switch_views(qtbot, console_context) -> None:
    window = window_of_two_views(qtbot, console_context)
    assert window.current_view_key() == "planner"
    press(window, Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)
    assert window.current_view_key() == "dashboard"
    press(window, Qt.Key.Key_PageDown, Qt.KeyboardModifier.ControlModifier)
    assert window.current_view_key() == "planner"  # wraps around
    window.navigation.setFocus()
    qtbot.keyClick(window.navigation, Qt.Key.Key_Down)
    assert window.current_view_key() == "dashboard"


def test_the_last_view_and_geometry_come_back_next_time(qtbot, console_context) -> None:
    window = window_of_two_views(qtbot, console_context)
    window.show_view("dashboard")
    window.resize(701, 503)  # the offscreen screen is 800 x 800
    window.save_settings()
    again = window_of_two_views(qtbot, console_context)
    assert again.current_view_key() == "dashboard"
    assert again.size().width() == 701


def test_status_bar_counts_connected_hosts_and_flags_simulated_ones(
    qtbot, console_context, simulated_inventory
) -> None:
    window = window_of_two_views(qtbot, console_context)
    assert "no hosts yet" in window.hosts_summary.text()
    assert not window.simulated_badge.isVisibleTo(window)
    connect_hosts(qtbot, console_context, {"demo-a": simulated_inventory})
    console_context.bridge.post(HostStateChanged("gpu-x", "failed", "gpu-x: unknown host key"))
    qtbot.waitUntil(lambda: "failed: gpu-x" in window.hosts_summary.text(), timeout=30000)
    assert window.hosts_summary.text().startswith("1 of 2 hosts connected")
    assert window.simulated_badge.isVisibleTo(window)


def test_charts_follow_a_switch_to_a_dark_palette(qtbot, console_context) -> None:
    from meshdeck.ui.app import repaint_charts
    from meshdeck.ui.charts.time_chart import TimeChart
    from meshdeck.ui.theme import ThemeWatcher, is_dark
    from PySide6.QtGui import QColor, QPalette
    from PySide6.QtWidgets import QApplication

    window = window_of_two_views(qtbot, console_context)
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
    window = window_of_two_views(qtbot, console_context)
    dashboard = window.show_view("dashboard")
    dashboard.set_window(3600)
    dashboard.gpu_filter.setText("0-3")
    window.save_settings()
    again = window_of_two_views(qtbot, console_context)
    restored = again.views[again.view_keys().index("dashboard")].widget
    assert restored.window_s == 3600 and restored.gpu_filter.text() == "0-3"
    assert restored.selection.gpus == frozenset({0, 1, 2, 3})


def _full_window(qtbot, context, width: int, height: int) -> MainWindow:
    """Every view of the console, as `meshdeck` builds them, in a window of `width` x `height`."""
    from meshdeck.ui.app import build_views

    window = MainWindow(context, build_views(context))
    qtbot.addWidget(window)
    window.resize(width, height)
    window.show()
    qtbot.waitExposed(window)
    return window


def test_at_1280_by_800_the_views_list_shows_whole_titles_and_every_view_fits(
    qtbot, console_context, simulated_inventory
) -> None:
    connect_hosts(qtbot, console_context, {"demo-a": simulated_inventory})
    window = _full_window(qtbot, console_context, 1280, 800)
    navigation = window.navigation
    metrics = navigation.fontMetrics()
    for key in window.view_keys():
        window.show_view(key)
        qtbot.wait(10)
        assert window.width() == 1280, f"{key}: the window grew to {window.width()} px to fit the view"
        view = window.stack.currentWidget()
        assert view.minimumSizeHint().width() <= window.stack.width(), f"{key} is cut on the right"
        for row in range(navigation.count()):
            item = navigation.item(row)
            text_width = metrics.horizontalAdvance(item.text())
            assert navigation.visualItemRect(item).width() >= text_width, f"{item.text()!r} is cut"
            assert navigation.viewport().width() >= text_width
    window.splitter.setSizes([10, 1270])  # dragged as far as it goes: the list still shows its titles
    assert navigation.width() >= max(metrics.horizontalAdvance(window.views[i].title) for i in range(len(window.views)))


def test_the_topology_legend_wraps_inside_the_view_at_1280_by_800(qtbot, console_context, simulated_inventory) -> None:
    from meshdeck.ui.views.topology import LEGEND, TopologyView

    connect_hosts(qtbot, console_context, {"demo-a": simulated_inventory})
    window = _full_window(qtbot, console_context, 1280, 800)
    topology = window.view_of(TopologyView)
    window.show_view("topology")
    qtbot.wait(10)
    legend = topology.legend
    assert legend.geometry().right() <= topology.width()
    assert legend.height() >= legend.heightForWidth(legend.width())  # all of its lines shown
    for _key, code, meaning in LEGEND:
        assert code in legend.text() and meaning.replace(" ", "&nbsp;") in legend.text()


def test_at_1280_by_800_every_rank_tile_and_its_text_fits_or_scrolls(
    qtbot, console_context, simulated_inventory
) -> None:
    from meshdeck.ui.views.planner.view import PlannerView
    from meshdeck.ui.widgets.rank_map import rank_labels
    from PySide6.QtWidgets import QScrollArea

    connect_hosts(qtbot, console_context, {"demo-a": simulated_inventory, "demo-b": simulated_inventory})
    window = _full_window(qtbot, console_context, 1280, 800)
    planner = window.view_of(PlannerView)
    window.show_view("planner")
    qtbot.waitUntil(lambda: planner.form.gpu.count() > 0, timeout=30000)
    with qtbot.waitSignal(planner.planned, timeout=30000):
        planner.form.plan_button.click()
    rank_map = planner.rank_map
    result = planner.result
    assert result is not None
    # the longest labels: two instances with expert parallelism ("rank 3 · inst 1", "DP 3 · EP 3")
    row = next(i for i, plan in enumerate(result.layouts) if plan.expert_parallel and plan.instances > 1)
    planner.table.selectRow(row)
    layout = planner.selected_layout()
    assert layout is result.layouts[row]
    qtbot.wait(10)
    tiles = rank_map.tile_rects()
    assert len(tiles) == 16
    metrics = rank_map.fontMetrics()
    placed = rank_map.placements()
    for (node, gpu), rect in tiles.items():
        assert rect.right() <= rank_map.width() and rect.bottom() <= rank_map.height(), f"GPU {gpu} of {node} clipped"
        for line in rank_labels(placed[(node, gpu)], layout):
            assert metrics.horizontalAdvance(line) <= rect.width() - 2 * rank_map.PAD, f"{line!r} cut"
    scroll = next(w for w in (rank_map.parentWidget(), *_ancestors(rank_map)) if isinstance(w, QScrollArea))
    visible = scroll.viewport().width()
    bar = scroll.horizontalScrollBar()
    assert rank_map.width() <= visible or bar.maximum() > 0  # fits, or the area scrolls to the rest


def _ancestors(widget):  # type: ignore[no-untyped-def]
    parent = widget.parentWidget()
    while parent is not None:
        yield parent
        parent = parent.parentWidget()


def test_long_status_messages_are_cut_with_their_whole_text_in_the_tooltip_not_run_together(
    qtbot, console_context
) -> None:
    import threading

    from PySide6.QtWidgets import QLabel

    window = window_of_two_views(qtbot, console_context)
    window.resize(1280, 800)
    for index in range(60):
        console_context.bridge.post(HostStateChanged(f"gpu-node-{index:03d}", "failed", "no route to host"))
    console_context.bridge.drain()
    release = threading.Event()
    step = "uploading the agent (412 KiB) through bastion.example.org, then probing python3 and the driver"

    def work(progress) -> None:  # type: ignore[no-untyped-def]
        progress.report(None, step)
        release.wait(30)

    job = console_context.jobs.start("test connection to gpu-node-017.cluster.example.org", work)
    try:
        jobs_label = window.jobs_indicator.label
        qtbot.waitUntil(lambda: step in jobs_label.text(), timeout=10000)
        qtbot.wait(10)
        assert window.width() == 1280  # the messages did not widen the window past the screen
        status = window.statusBar()

        def placed(label: QLabel):  # type: ignore[no-untyped-def]
            return label.geometry().translated(label.parentWidget().mapTo(status, label.pos()) - label.pos())

        summary = window.hosts_summary
        for label in (summary, jobs_label):
            assert placed(label).right() <= status.width()
            assert label.toolTip() == label.text()  # cut: the whole text is one hover away
        for other in status.findChildren(QLabel):
            if other is not summary and other.isVisible():
                assert not placed(other).intersects(placed(summary)), f"{other.text()!r} is laid over the summary"
    finally:
        release.set()
    qtbot.waitUntil(lambda: not window.jobs_indicator.isVisibleTo(window), timeout=10000)
    assert job is not None
