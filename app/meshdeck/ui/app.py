"""Starting the console: the QApplication, the services, the views, and an orderly shutdown.

    meshdeck --demo                                   # two simulated 8×H200 agents, a plan, a launch
    meshdeck --demo --screenshots DIR --quit-after 60 # one PNG per view once the demo settled
    meshdeck                                          # (with a display) the console on your hosts

Without --demo the console opens the database (`--db` or the platform data dir) and supervises
every stored host over SSH. Everything that talks to a host or the disk after the window is up
runs in the fleet's threads or as a job; the GUI thread only draws.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QApplication

from meshdeck.services.deploy import DeployService
from meshdeck.services.fleet import FleetService
from meshdeck.services.history import HistoryRecorder, resume_points
from meshdeck.services.profiles import StoreDeploymentRecorder
from meshdeck.store.database import open_database
from meshdeck.store.hosts import list_hosts
from meshdeck.store.writer import SampleWriter, WriterSettings
from meshdeck.ui.bridge import FleetBridge
from meshdeck.ui.charts.time_chart import TimeChart
from meshdeck.ui.context import ConsoleContext
from meshdeck.ui.demo_tour import DemoTour
from meshdeck.ui.jobs import JobRunner
from meshdeck.ui.main_window import MainWindow, ViewEntry
from meshdeck.ui.screenshots import save_screenshots
from meshdeck.ui.theme import apply_theme
from meshdeck.ui.views.dashboard import DashboardView
from meshdeck.ui.views.deployments import DeploymentsView
from meshdeck.ui.views.history import HistoryView
from meshdeck.ui.views.hosts import HostsView
from meshdeck.ui.views.planner import PlannerView
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


def wire_window(window: MainWindow) -> None:
    """Cross-view navigation that needs the window: Launch… in Profiles opens Deployments."""
    profiles = window.views[window.view_keys().index("profiles")].widget
    profiles.launch_requested.connect(lambda _name: window.show_view("deployments"))


def application() -> QApplication:
    app = QApplication.instance()
    if app is None:
        app = QApplication([sys.argv[0] if sys.argv else "meshdeck"])
    assert isinstance(app, QApplication)
    app.setOrganizationName("meshdeck")
    app.setApplicationName("meshdeck")
    app.setApplicationDisplayName("meshdeck")
    app.setDesktopFileName("meshdeck")
    return app


VIEW_KEYS = ("hosts", "topology", "planner", "deployments", "dashboard", "history", "profiles")


def build_views(context: ConsoleContext) -> list[ViewEntry]:
    """Every view of the console, in navigation order (keys as in VIEW_KEYS), wired to each other."""
    planner = PlannerView(context)
    profiles = ProfilesView(context)
    deployments = DeploymentsView(context)
    dashboard = DashboardView(context.live)
    planner.profiles_saved.connect(lambda names: profiles.reload(names[0] if names else None))
    planner.profiles_saved.connect(lambda names: deployments.reload_profiles(names[0] if names else None))
    profiles.launch_requested.connect(deployments.choose_profile)
    deployments.planned_memory.connect(dashboard.set_planned_memory)
    views = [
        ViewEntry("hosts", "Hosts", HostsView(context)),
        ViewEntry("topology", "Topology", TopologyView(context)),
        ViewEntry("planner", "Planner", planner),
        ViewEntry("deployments", "Deployments", deployments),
        ViewEntry("dashboard", "Dashboard", dashboard),
        ViewEntry("history", "History", HistoryView(context)),
        ViewEntry("profiles", "Profiles", profiles),
    ]
    assert tuple(v.key for v in views) == VIEW_KEYS
    return views


def build_context(args: argparse.Namespace, settings: QSettings) -> ConsoleContext:
    """Services for the console: the demo cluster, or the stored hosts over SSH."""
    bridge = FleetBridge()
    jobs = JobRunner()
    if args.demo:
        from meshdeck.services.demo import DemoCluster
        from meshdeck.services.vllm_local import find_vllm_executable

        real_vllm = find_vllm_executable() if args.real_vllm else None  # VllmNotInstalled says how to make it
        demo = DemoCluster.start(db_path=args.db, real_vllm=real_vllm)
        context = ConsoleContext(
            fleet=demo.fleet, db=demo.db, bridge=bridge, jobs=jobs, settings=settings, simulated=True
        )
        context.on_shutdown.append(demo.shutdown)
        context.demo = demo
    else:
        db = open_database(args.db)
        fleet = FleetService()
        context = ConsoleContext(fleet=fleet, db=db, bridge=bridge, jobs=jobs, settings=settings)
        context.on_shutdown.append(db.close)
        context.on_shutdown.append(fleet.close)
    assert context.fleet is not None and context.db is not None
    context.deploy = DeployService(context.fleet, recorder=StoreDeploymentRecorder(context.db))
    context.on_shutdown.append(context.deploy.close)  # deployments keep running on the agents
    # Every sample and event goes to the store (history) as well as to the window.
    # The demo commits every 2 s so its history view fills while the tour runs; the real console lets
    # the writer adapt its interval to the number of series (store/writer.py: 2-30 s).
    writer_settings = WriterSettings(commit_interval_s=2.0) if args.demo else WriterSettings()
    writer = SampleWriter(context.db, settings=writer_settings).start()
    # Shutdown runs these last-in first-out: the writer stops taking samples (a supervisor waiting for
    # room is released at once), the fleet stops (closing it again later is a no-op), then the writer
    # commits what it had staged; what still waited in its inbox was never acknowledged, so the agents'
    # rings deliver it again at the next start. The open minute of each host is left open (rolled up at
    # the next start, read from the raw samples meanwhile): rolling it up costs as much as the rows it
    # holds, which a flooding agent makes many. So closing the window takes about a second, whatever comes in.
    context.on_shutdown.append(lambda: writer.stop(roll_up_open_buckets=False, commit_queued=False))
    context.on_shutdown.append(context.fleet.close)
    context.on_shutdown.append(writer.close_inbox)
    context.on_shutdown.append(context.fleet.subscribe(HistoryRecorder(writer).handle))
    unsubscribe: Callable[[], None] = context.fleet.subscribe(bridge.post)
    context.on_shutdown.append(unsubscribe)
    if not args.demo:
        resume = resume_points(context.db)  # the last stored seq per host and the sequence epoch it belongs to
        for record in list_hosts(context.db):
            point = resume.get(record.name)
            if point is None:
                context.fleet.add_record(record)
            else:
                context.fleet.add_record(record, since_seq=point.seq, since_epoch=point.epoch)
    return context


def run_console(args: argparse.Namespace) -> int:
    app = application()
    theme_watcher = apply_theme(app)
    # The demo keeps its own window layout and choices: it must not rearrange the real console's.
    settings = QSettings("meshdeck", "console-demo" if args.demo else "console")
    context = build_context(args, settings)
    try:
        window = MainWindow(context, build_views(context))
        wire_window(window)
        theme_watcher.changed.connect(lambda: repaint_charts(window))
        if args.screenshots:
            window.resize(1500, 950)  # pictures of a known size, whatever the last session left
        window.show()
        tour = None
        if args.demo:
            tour = DemoTour(window, context.demo.hosts)
            tour.start()
        if args.screenshots:
            shoot = _Once(lambda: _screenshots_then_quit(window, args))
            latest = max(1.0, (args.quit_after or 90.0) - SCREENSHOT_MARGIN_S)
            QTimer.singleShot(int(latest * 1000), shoot)
            if tour is not None:  # the demo has settled: its charts have some data
                tour.finished.connect(lambda: QTimer.singleShot(SETTLE_AFTER_TOUR_MS, shoot))
        elif args.quit_after is not None:
            QTimer.singleShot(int(args.quit_after * 1000), window.close)
        status = app.exec()
        window.save_settings()
        return status
    finally:
        context.shutdown()


def _screenshots_then_quit(window: MainWindow, args: argparse.Namespace) -> None:
    try:
        written = save_screenshots(window, args.screenshots)
        print(f"meshdeck: {len(written)} screenshots in {args.screenshots}")  # noqa: T201 (the CLI's answer)
    except OSError as exc:
        log.error("screenshots failed: %s", exc)
        QApplication.instance().exit(1)  # type: ignore[union-attr]
        return
    if args.quit_after is not None:
        window.close()
