"""The console's window beside `meshdeck bench fleet --console`: the real window, offscreen, in this process.

Built the way `ui/app.py` builds the console on its services (bridge, context, every view, the window), on
the benchmark's `ConsoleServices`, with its settings in a throwaway folder. The fleet view (key "fleet") is shown.
While the benchmark waits, the GUI's event loop runs (`wait`), so the
bridge drains and the shown view refreshes as in the console; `refresh_record` holds that view's own
update + paint times. The console's collector policy (ui/collector.py) runs as in the console.
Implements `meshdeck.services.fleet_benchmark.ConsoleProbe`.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEventLoop, QSettings, QTimer

from meshdeck.services.console import ConsoleServices
from meshdeck.ui.app import application, build_views, drop_import_sources
from meshdeck.ui.bridge import FleetBridge
from meshdeck.ui.collector import CollectorPolicy
from meshdeck.ui.context import ConsoleContext
from meshdeck.ui.jobs import JobRunner
from meshdeck.ui.main_window import MainWindow

WAIT_SLICE_MS = 100  # the event loop runs this long between checks of what the benchmark waits for
SHOWN_VIEW = "fleet"


class OffscreenConsole:
    def __init__(self) -> None:
        self.view_key = SHOWN_VIEW
        self._folder = Path(tempfile.mkdtemp(prefix="meshdeck-bench-console-"))
        self._context: ConsoleContext | None = None
        self._window: MainWindow | None = None
        self._view: Any = None
        self._collector: CollectorPolicy | None = None
        self._bridge: FleetBridge | None = None

    def attach(self, services: ConsoleServices) -> None:
        self._app = application()
        bridge = self._bridge = FleetBridge()
        settings = QSettings(str(self._folder / "console.ini"), QSettings.Format.IniFormat)
        context = ConsoleContext(
            fleet=services.fleet, db=services.db, bridge=bridge, jobs=JobRunner(), settings=settings
        )
        context.use_deploy(services.deploy)
        context.on_shutdown.append(services.fleet.subscribe(bridge.post))
        self._context = context
        window = MainWindow(context, build_views(context))
        window.resize(1500, 950)
        window.show()
        self._view = window.show_view(self.view_key)
        self._window = window
        drop_import_sources()
        self._collector = CollectorPolicy(window).start()  # as the console runs (ui/collector.py)

    def wait(self, ready: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        loop = QEventLoop()
        while not ready():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            QTimer.singleShot(max(1, min(WAIT_SLICE_MS, int(left * 1000))), loop.quit)
            loop.exec()
        return True

    def refresh_record(self) -> tuple[int, list[float]]:
        if self._view is None:
            return 0, []
        return self._view.refreshes, list(self._view.refresh_durations_ms())

    def collection_record(self) -> tuple[int, list[float]]:
        if self._collector is None:
            return 0, []
        return self._collector.collections, list(self._collector.pauses_ms)

    def backlog(self) -> int:
        """Events waiting for the GUI thread in the console's bridge."""
        return 0 if self._bridge is None else self._bridge.backlog

    def close(self) -> None:
        if self._collector is not None:
            self._collector.stop()
            self._collector = None
        if self._window is not None:
            self._window.close()
            self._window.deleteLater()
            self._window = None
        if self._context is not None:
            self._context.shutdown()
            self._context = None
        shutil.rmtree(self._folder, ignore_errors=True)
