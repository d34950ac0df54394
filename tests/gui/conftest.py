"""Fixtures for the console's tests (pytest-qt, offscreen).

- Every test fails if it leaves a thread or a QThread running (the console must stop its jobs,
  bridges and fleets), after a grace period for threads that are already finishing.
- Qt warnings printed while a test runs fail it, except the offscreen platform's own notices.
- QSettings go to a temporary folder, never to the developer's real console settings.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # wire_samples, helpers

from PySide6.QtCore import QSettings, QThread

THREAD_GRACE_S = 5.0
# Notices of the offscreen / minimal platform plugins, not of our code.
IGNORED_QT_MESSAGES = ("This plugin does not support",)


@pytest.fixture(autouse=True)
def no_thread_left_running(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    started: list[QThread] = []
    original_start = QThread.start

    def recording_start(self: QThread, *args: object) -> None:
        started.append(self)
        original_start(self, *args)

    monkeypatch.setattr(QThread, "start", recording_start)
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + THREAD_GRACE_S
    while True:
        threads = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        qthreads = [t for t in started if t.isRunning()]
        if not threads and not qthreads:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    names = [t.name for t in threads] + [f"QThread {t.objectName() or hex(id(t))}" for t in qthreads]
    pytest.fail(f"test left threads running: {', '.join(names)}")


@pytest.fixture(autouse=True)
def no_qt_warnings(qtlog) -> Iterator[None]:  # type: ignore[no-untyped-def]
    yield
    from PySide6.QtCore import QtMsgType

    bad = [
        record.message
        for record in qtlog.records
        if record.type in (QtMsgType.QtWarningMsg, QtMsgType.QtCriticalMsg, QtMsgType.QtFatalMsg)
        and not record.message.startswith(IGNORED_QT_MESSAGES)
    ]
    if bad:
        pytest.fail("Qt warnings during the test:\n" + "\n".join(bad))


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("qsettings")
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(folder))
    yield folder


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.gui)


@pytest.fixture(scope="session")
def simulated_inventory() -> dict:
    """A real simulated agent's inventory (`meshdeck-agent inventory --simulate 8xH200 --json`)."""
    from gui_helpers import simulated_inventory_wire

    return simulated_inventory_wire()


GC_POLICY_TESTS = "test_collector"  # the console's own collection policy: these need CPython's automatic collector


@pytest.fixture(autouse=True)
def _collect_only_between_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    """Python's cyclic garbage collector runs between GUI tests, never inside Qt's event processing: a collection
    that frees a widget's Python wrapper while Qt is painting it crashes the process (pyqtgraph's
    GraphicsView.paintEvent, from pytest-qt's event processing after a test: seen in ~1 run of 3 here). The
    console itself runs its full collections on the GUI thread between refreshes (ui/collector.py)."""
    if request.module.__name__.rsplit(".", 1)[-1] == GC_POLICY_TESTS:
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


@pytest.fixture
def console_context(qtbot, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A ConsoleContext without fleet or database: views fed by posting events to its bridge."""
    from gui_helpers import bare_context

    context = bare_context(str(tmp_path / "console.ini"))
    yield context
    context.shutdown()


# Real sshd servers and the real agent zipapp, from the fleet engineer's fixtures (tests/ is on sys.path).
from integration.remote.remote_agent_fixtures import agent_pyz, remote_agent  # noqa: E402, F401
from slurm_fixtures import slurm_cluster  # noqa: E402, F401  (the real Slurm cluster, for the console's Slurm tests)
from sshd import ssh_client_key, sshd, sshd_factory  # noqa: E402, F401
