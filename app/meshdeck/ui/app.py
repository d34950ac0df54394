"""Starting the console: the QApplication, the services, the views, and an orderly shutdown.

    meshdeck --demo                                   # two simulated 8×H200 agents, a plan, a launch
    meshdeck --demo --screenshots DIR --quit-after 60 # one PNG per view once the demo settled
    meshdeck                                          # (with a display) the console on your hosts

Closing the window, File > Quit (Ctrl+Q), Ctrl+C in the terminal, SIGTERM and SIGHUP all end in the same
orderly shutdown (ui/quitting.py): the demo's agents, engines and folder go, an operator's deployments keep
running on their agents. After a signal the exit status is 128 + its number (130 for Ctrl+C, 143 for SIGTERM).

Without --demo the console opens the database (`--db` or the platform data dir) and supervises
every stored host over SSH. Everything that talks to a host or the disk after the window is up
runs in the fleet's threads or as a job; the GUI thread only draws.
"""

from __future__ import annotations

import argparse
import linecache
import logging
import sys
from collections.abc import Callable

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QApplication

from meshdeck.services.console import ConsoleServices
from meshdeck.ui.bridge import FleetBridge
from meshdeck.ui.charts.serving_front import ServingFrontChart
from meshdeck.ui.charts.time_chart import TimeChart
from meshdeck.ui.collector import CollectorPolicy
from meshdeck.ui.context import ConsoleContext
from meshdeck.ui.demo_tour import DemoTour
from meshdeck.ui.gil import favour_the_gui_thread
from meshdeck.ui.jobs import JobRunner
from meshdeck.ui.main_window import MainWindow, ViewEntry
from meshdeck.ui.quitting import SignalWatcher, quit_on_signal
from meshdeck.ui.screenshots import save_screenshots
from meshdeck.ui.theme import apply_theme
from meshdeck.ui.views.dashboard.view import DashboardView
from meshdeck.ui.views.deployments.view import DeploymentsView
from meshdeck.ui.views.fleet.groups import deployment_of_host
from meshdeck.ui.views.fleet.view import FleetView
from meshdeck.ui.views.history.view import HistoryView
from meshdeck.ui.views.hosts.view import HostsView
from meshdeck.ui.views.planner.view import PlannerView
from meshdeck.ui.views.processes import ProcessesView
from meshdeck.ui.views.profiles import ProfilesView
from meshdeck.ui.views.topology import TopologyView

log = logging.getLogger(__name__)

SCREENSHOT_MARGIN_S = 4.0  # screenshots are taken this long before --quit-after, at the latest
SETTLE_AFTER_TOUR_MS = 12_000  # ... or this long after the demo tour finished, if that is sooner


class _Once:
    def __init__(self, action: Callable[[], None]) -> None:
        self.action: Callable[[], None] | None = action

    def __call__(self) -> None:
        action, self.action = self.action, None
        if action is not None:
            action()


def repaint_charts(window: MainWindow) -> None:
    """The system switched light/dark: charts take their colours from the new palette."""
    for chart in window.findChildren(TimeChart):
        chart.apply_palette()
    for front in window.findChildren(ServingFrontChart):
        front.apply_palette()


def wire_window(window: MainWindow) -> None:
    """Cross-view navigation that needs the window: Launch… in Profiles opens Deployments; a GPU clicked
    in Fleet opens its host (its row in Hosts, its topology shown)."""
    window.view_of(ProfilesView).launch_requested.connect(lambda _name: window.show_view("deployments"))
    window.view_of(FleetView).host_opened.connect(lambda host: open_host(window, host))


def open_host(window: MainWindow, host: str) -> None:
    """Show one host: its row selected in Hosts and its GPUs, links and NICs in Topology (shown)."""
    window.view_of(HostsView).select_host(host)
    window.view_of(TopologyView).select_host(host)
    window.show_view("topology")


def application() -> QApplication:
    app = QApplication.instance()
    if app is None:
        app = QApplication([sys.argv[0] if sys.argv else "meshdeck"])
    assert isinstance(app, QApplication)
    favour_the_gui_thread()  # the GUI thread waits ~1 ms, not 5, for the GIL beside a busy fleet (ui/gil.py)
    app.setOrganizationName("meshdeck")
    app.setApplicationName("meshdeck")
    app.setApplicationDisplayName("meshdeck")
    app.setDesktopFileName("meshdeck")
    return app


VIEW_KEYS = ("hosts", "topology", "planner", "deployments", "dashboard", "fleet", "history", "profiles", "processes")


def drop_import_sources() -> None:
    """Forget the source text PySide6 read while the console imported its modules.

    PySide6's import hook (shibokensupport's `feature_imported`) reads the source of every module imported
    after PySide6 to see whether it uses PySide, through `inspect.getsource`, and `linecache` keeps it all:
    the console's imports leave ~580 files, ~214,000 lines, in memory (measured: the soak's peak RSS
    286 MB -> 272 MB without them). Nothing needs them afterwards; a traceback reads its lines again."""
    linecache.clearcache()


def build_views(context: ConsoleContext) -> list[ViewEntry]:
    """Every view of the console, in navigation order (keys as in VIEW_KEYS), wired to each other."""
    planner = PlannerView(context)
    profiles = ProfilesView(context)
    deployments = DeploymentsView(context)
    dashboard = DashboardView(context.live)
    fleet = FleetView(context)
    fleet.selection_changed.connect(dashboard.show_selection)  # the GPUs picked in Fleet are the dashboard's
    planner.profiles_saved.connect(lambda names: profiles.reload(names[0] if names else None))
    planner.profiles_saved.connect(lambda names: deployments.reload_profiles(names[0] if names else None))
    profiles.launch_requested.connect(deployments.choose_profile)
    assert context.deployments is not None
    context.deployments.planned_memory.connect(dashboard.set_planned_memory)  # whichever view is shown
    deployments_model = context.deployments
    deployments_model.changed.connect(
        lambda _id: dashboard.set_deployment_of_host(deployment_of_host(deployments_model.snapshots.values()))
    )
    deployments_model.changed.connect(lambda _id: dashboard.set_deployments(deployments_model.snapshots.values()))
    views = [
        ViewEntry("hosts", "Hosts", HostsView(context)),
        ViewEntry("topology", "Topology", TopologyView(context)),
        ViewEntry("planner", "Planner", planner),
        ViewEntry("deployments", "Deployments", deployments),
        ViewEntry("dashboard", "Dashboard", dashboard),
        ViewEntry("fleet", "Fleet", fleet),
        ViewEntry("history", "History", HistoryView(context)),
        ViewEntry("profiles", "Profiles", profiles),
        ViewEntry("processes", "Processes", ProcessesView(context)),  # nvitop's process table, per host and GPU
    ]
    assert tuple(v.key for v in views) == VIEW_KEYS
    return views


def build_context(args: argparse.Namespace, settings: QSettings) -> ConsoleContext:
    """Services for the console (the demo cluster, or the stored hosts over SSH), seen through the bridge."""
    bridge = FleetBridge()
    real_vllm = None
    if getattr(args, "real_vllm", False):
        from meshdeck.services.vllm_local import find_vllm_executable

        real_vllm = find_vllm_executable()  # VllmNotInstalled says how to make it
    services = ConsoleServices.start(demo=args.demo, db_path=args.db, real_vllm=real_vllm)
    context = ConsoleContext(
        fleet=services.fleet, db=services.db, bridge=bridge, jobs=JobRunner(), settings=settings, simulated=args.demo
    )
    context.demo = services.demo
    context.on_shutdown.append(services.shutdown)
    context.use_deploy(services.deploy)  # its events reach the views through the bridge
    if services.slurm is not None:
        context.use_slurm(services.slurm)
    context.on_shutdown.append(services.fleet.subscribe(bridge.post))
    services.connect_hosts()
    return context


def run_console(args: argparse.Namespace) -> int:
    app = application()
    theme_watcher = apply_theme(app)
    # The demo keeps its own window layout and choices: it must not rearrange the real console's.
    settings = QSettings("meshdeck", "console-demo" if args.demo else "console")
    signals = SignalWatcher()  # from here a signal is held until the window can close in order
    try:
        context = build_context(args, settings)
    except BaseException:
        signals.close()
        raise
    try:
        window = MainWindow(context, build_views(context))
        signals.received.connect(lambda signum: quit_on_signal(window, signum))
        signals.received.connect(lambda _signum: app.quit())  # whatever else is open
        wire_window(window)
        theme_watcher.changed.connect(lambda: repaint_charts(window))
        if args.screenshots:
            window.fit_to_screen(*args.window_size)  # a known size (or the screen's), whatever the last session left
        window.show()
        drop_import_sources()  # every view is built: the imports are done
        collector = CollectorPolicy(window).start()  # short full collections beside a big fleet (ui/collector.py)
        tour = None
        if context.demo is not None:  # --demo
            tour = DemoTour(window, context.demo.hosts)
            tour.start()
        if args.screenshots:
            shoot = _Once(lambda: _screenshots_then_quit(window, args))
            latest = max(1.0, (args.quit_after or 90.0) - SCREENSHOT_MARGIN_S)
            QTimer.singleShot(int(latest * 1000), shoot)
            if tour is not None:  # the demo has settled: its charts have some data
                tour.finished.connect(lambda: QTimer.singleShot(SETTLE_AFTER_TOUR_MS, shoot))
        elif args.quit_after is not None:
            QTimer.singleShot(int(args.quit_after * 1000), window.quit_now)
        status = app.exec()
        collector.stop()
        window.save_settings()
        return signals.exit_status(status)
    finally:
        context.shutdown()
        signals.close()


def _screenshots_then_quit(window: MainWindow, args: argparse.Namespace) -> None:
    try:
        written = save_screenshots(window, args.screenshots)
        print(f"meshdeck: {len(written)} screenshots in {args.screenshots}")  # noqa: T201 (the CLI's answer)
    except OSError as exc:
        log.error("screenshots failed: %s", exc)
        QApplication.exit(1)
        return
    if args.quit_after is not None:
        window.close()
