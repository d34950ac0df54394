"""Quitting the console: the menu bar (File > Quit on Ctrl+Q, View, Help), the question asked while deployments
run (naming them, saying what becomes of them), the shortcuts help on `?`, and signals that close the window
like Quit. The demo's processes going away on SIGTERM / SIGINT is proved on a real `meshdeck --demo` in
test_demo_shutdown.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gui_helpers import press
from meshdeck.services.deployments.events import DeploymentChanged
from meshdeck.services.deployments.model import DeploymentSnapshot, WorkerSnapshot
from meshdeck.ui.main_window import MainWindow
from meshdeck.ui.menus import ShortcutsDialog, shortcut_rows
from meshdeck.ui.quitting import SignalWatcher, quit_on_signal
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox
from test_main_window import activate, window_of_two_views


def _running(context, name: str, hosts: tuple[str, ...], state: str = "running") -> None:
    workers = tuple(WorkerSnapshot(f"vllm serve {name}", host, f"w-{host}", 0, "running") for host in hosts)
    snapshot = DeploymentSnapshot(f"{name}-1", name, "vllm", state, "", workers, time.time())
    context.bridge.post(DeploymentChanged(snapshot))
    context.bridge.drain()


class Answer:
    """Answers the quit question when it opens (it is modal: the test waits inside its exec())."""

    def __init__(self, button: str) -> None:
        self.button = button
        self.text = ""
        self.details = ""
        self.asked = 0
        self._timer = QTimer()
        self._timer.timeout.connect(self._look)
        self._timer.start(20)

    def _look(self) -> None:
        box = QApplication.activeModalWidget()
        if isinstance(box, QMessageBox) and box.objectName() == "quitQuestion":
            self.asked += 1
            self.text, self.details = box.text(), box.informativeText()
            if self.button == "quit":
                box.findChild(type(box.defaultButton()), "quitButton").click()
            else:
                box.button(QMessageBox.StandardButton.Cancel).click()

    def __enter__(self) -> Answer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._timer.stop()


def _ctrl_q_closes(qtbot, window: MainWindow) -> None:
    press(window, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=10000)


def test_the_menu_bar_has_file_view_and_help_with_their_shortcuts(qtbot, console_context) -> None:
    window = window_of_two_views(qtbot, console_context)
    menus = [action.text().replace("&", "") for action in window.menuBar().actions()]
    assert menus == ["File", "View", "Help"]
    rows = {(row.keys, row.action) for row in shortcut_rows(window)}
    assert {("Ctrl+Q", "Quit"), ("Ctrl+1", "Show Planner"), ("Ctrl+2", "Show Dashboard")} <= rows
    assert {("Ctrl+PgDown", "Next view"), ("Ctrl+PgUp", "Previous view"), ("?, F1", "Keyboard shortcuts")} <= rows


def test_ctrl_q_quits_at_once_when_nothing_runs(qtbot, console_context) -> None:
    window = window_of_two_views(qtbot, console_context)
    with Answer("cancel") as answer:
        _ctrl_q_closes(qtbot, window)
    assert answer.asked == 0


def test_ctrl_q_asks_while_deployments_run_names_them_and_says_they_keep_running(qtbot, console_context) -> None:
    window = window_of_two_views(qtbot, console_context)
    _running(console_context, "ds32", ("gpu-a", "gpu-b"))
    _running(console_context, "old", ("gpu-c",), state="failed")  # ended: not named
    with Answer("cancel") as answer:
        press(window, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
        qtbot.waitUntil(lambda: answer.asked == 1, timeout=10000)
        assert window.isVisible()  # Cancel: still open
        assert "1 deployment is running" in answer.text
        assert "ds32 (running on gpu-a, gpu-b)" in answer.text and "old" not in answer.text
        assert "keep running after meshdeck quits" in answer.details and "agents own them" in answer.details
        answer.button = "quit"
        activate(qtbot, window)
        _ctrl_q_closes(qtbot, window)
    assert answer.asked == 2


@pytest.mark.slow
def test_the_window_close_button_asks_too() -> None:
    """A window manager's close (X11 WM_DELETE_WINDOW under Xvfb): asked, Cancel keeps it, Quit closes it."""
    xvfb_run = shutil.which("xvfb-run")
    if xvfb_run is None:
        pytest.skip("xvfb-run is not installed (apt-get install xvfb xauth)")
    script = Path(__file__).resolve().parent / "wm_close.py"
    argv = [xvfb_run, "-a", "-s", "-screen 0 1280x800x24", sys.executable, str(script)]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, env={**os.environ, "QT_QPA_PLATFORM": "xcb"}
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines == [
        "asked: Quit meshdeck? 1 deployment is running: | • ds32 (running on gpu-a)",
        "open after cancel: True",
        "asked: Quit meshdeck? 1 deployment is running: | • ds32 (running on gpu-a)",
        "closed",
    ], done.stdout + done.stderr[-3000:]


def test_in_the_demo_the_question_says_its_deployments_stop_with_it(qtbot, console_context) -> None:
    console_context.demo = object()  # (only its presence matters to the question)
    window = window_of_two_views(qtbot, console_context)
    _running(console_context, "demo-deepseek-v3.2", ("demo-a", "demo-b"))
    try:
        with Answer("quit") as answer:
            _ctrl_q_closes(qtbot, window)
    finally:
        console_context.demo = None
    assert "Quit the demo?" in answer.text and "demo-deepseek-v3.2" in answer.text
    assert "stop with the demo" in answer.details and "temporary folder" in answer.details


def test_a_signal_closes_the_window_without_asking(qtbot, console_context) -> None:
    window = window_of_two_views(qtbot, console_context)
    _running(console_context, "ds32", ("gpu-a",))
    with Answer("cancel") as answer, SignalWatcher() as watcher:
        watcher.received.connect(lambda signum: quit_on_signal(window, signum))
        with qtbot.waitSignal(watcher.received, timeout=10000) as blocker:
            os.kill(os.getpid(), signal.SIGTERM)  # reaches Python only through the wake-up socket
        qtbot.waitUntil(lambda: not window.isVisible(), timeout=10000)
    assert blocker.args == [signal.SIGTERM] and answer.asked == 0
    assert watcher.exit_status(0) == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # put back


def test_question_mark_lists_every_shortcut_and_pause_is_ctrl_shift_p(qtbot, console_context) -> None:
    window = window_of_two_views(qtbot, console_context)
    window.navigation.setFocus()  # (in a text field ? is typed; F1 opens the help there)
    press(window, Qt.Key.Key_Question)
    dialog = window.findChild(ShortcutsDialog)
    assert dialog is not None and dialog.isVisible()
    rows = dialog.rows()
    assert ("Planner", "Ctrl+Return", "Plan: rank every layout") in rows
    assert ("Dashboard", "Ctrl+Shift+P", "Pause or resume the charts (data keeps arriving)") in rows
    assert ("Everywhere", "Ctrl+Q", "Quit") in rows
    dialog.close()
    dashboard = window.show_view("dashboard")
    activate(qtbot, window)
    press(window, Qt.Key.Key_P, Qt.KeyboardModifier.ControlModifier)
    assert not dashboard.pause_button.isChecked()  # Ctrl+P is Print everywhere else: it pauses nothing
    press(window, Qt.Key.Key_P, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    assert dashboard.pause_button.isChecked()


@pytest.mark.slow
def test_every_shortcut_of_the_whole_console_is_described_and_none_is_taken_twice(qtbot, console_context) -> None:
    """The help is read from the widgets: a view's QShortcut says what it does in its whatsThis."""
    from meshdeck.ui.app import build_views

    window = MainWindow(console_context, build_views(console_context))
    qtbot.addWidget(window)
    rows = shortcut_rows(window)
    assert not [row for row in rows if row.action == "(no description)"], rows
    places: dict[str, list[str]] = {}
    for row in rows:
        for key in row.keys.split(", "):
            places.setdefault(key, []).append(row.where)
    clashes = {
        key: where
        for key, where in places.items()
        if len(where) > len(set(where)) or ("Everywhere" in where and len(where) > 1)
    }
    assert not clashes
