"""Quitting the console: the question asked while deployments run, and signals that close it like Ctrl+Q.

    File > Quit, Ctrl+Q, the window's close button   asks first while deployments run (`confirm_quit`)
    SIGINT (Ctrl+C in the terminal), SIGTERM, SIGHUP  closes at once (`SignalWatcher`): no one may be at the screen

Every way out ends in the same place: the event loop returns and ui/app.py shuts the services down — the
demo's agents, its engines and its temporary folder go; an operator's deployments keep running, because
their agents own them, not this window, and the question says so.

Signals: Python runs a signal handler only when the main thread runs Python code, and the main thread sits
in Qt's event loop (C++) for as long as the window is open, so a Ctrl+C used to wait for the next mouse move
and SIGTERM killed the process outright (its default), leaving the demo's agent daemons and engines running.
The watcher installs handlers and points `signal.set_wakeup_fd` at a socket pair: the C-level handler
writes the signal's number there, a QSocketNotifier wakes the event loop, and the slot runs in Python.
"""

from __future__ import annotations

import logging
import signal
import socket
from collections.abc import Sequence
from types import FrameType, TracebackType
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QSocketNotifier, Qt, Signal
from PySide6.QtWidgets import QDialog, QMessageBox

from meshdeck.services.deployments.model import DeploymentSnapshot

if TYPE_CHECKING:
    from meshdeck.ui.main_window import MainWindow

log = logging.getLogger(__name__)

QUIT_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
NAMED_AT_MOST = 10  # deployments named in the question; the rest are counted
NAME_CHARS = 80  # a name from an agent is cut here (and shown as plain text, never as rich text)


class SignalWatcher(QObject):
    """SIGINT, SIGTERM and SIGHUP delivered to the event loop as `received(signum)` (see the module doc).

    Install it before the services start (a signal during start-up is then held until the loop runs) and
    `close()` it after they stopped: a second signal while the console shuts down is logged, not obeyed
    (obeying it would leave the demo's processes behind). `signum` is the first signal received."""

    received = Signal(int)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.signum: int | None = None
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)
        self._previous_fd = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        self._previous = {signum: signal.signal(signum, self._handle) for signum in QUIT_SIGNALS}
        self._notifier = QSocketNotifier(self._reader.fileno(), QSocketNotifier.Type.Read, self)
        self._notifier.activated.connect(self._wake)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        """Python's part of the handler: note the first signal. The wake-up byte does the rest."""
        if self.signum is None:
            self.signum = signum
        else:
            log.warning("%s received while the console shuts down: still stopping", signal.Signals(signum).name)

    def _wake(self) -> None:
        try:
            data = self._reader.recv(64)  # one byte per signal; at most a few are pending
        except (BlockingIOError, InterruptedError):
            return
        for signum in data:
            if signum in QUIT_SIGNALS:
                self.received.emit(signum)

    def exit_status(self, status: int) -> int:
        """128 + the signal's number when one ended the console (as a shell reports it), else `status`."""
        return status if self.signum is None else 128 + self.signum

    def close(self) -> None:
        """Put the previous handlers and wake-up descriptor back."""
        self._notifier.setEnabled(False)
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        signal.set_wakeup_fd(self._previous_fd)
        self._reader.close()
        self._writer.close()

    def __enter__(self) -> SignalWatcher:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def quit_on_signal(window: MainWindow, signum: int) -> None:
    """A signal asked the console to end: close the window without a question (the event loop then ends;
    `SignalWatcher.exit_status` says which signal)."""
    if window.quitting:
        return
    name = signal.Signals(signum).name
    if window.context.demo is not None:
        log.warning("%s: quitting; stopping the demo's agents and engines, removing its folder", name)
    else:
        log.warning("%s: quitting; deployments keep running on their hosts", name)
    window.quit_now()


def running_deployments(window: MainWindow) -> list[DeploymentSnapshot]:
    model = window.context.deployments
    snapshots = [] if model is None else model.newest_first()
    return [snapshot for snapshot in snapshots if not snapshot.final]


def _described(snapshot: DeploymentSnapshot) -> str:
    name = snapshot.name if len(snapshot.name) <= NAME_CHARS else snapshot.name[: NAME_CHARS - 1] + "…"
    hosts = list(dict.fromkeys(worker.host for worker in snapshot.workers))
    shown = ", ".join(hosts[:4]) + (f" and {len(hosts) - 4} more" if len(hosts) > 4 else "")
    return f"{name} ({snapshot.state}{' on ' + shown if shown else ''})"


def quit_question(running: Sequence[DeploymentSnapshot], *, demo: bool) -> tuple[str, str]:
    """The question's text and its details for `running` deployments (none: no question is asked)."""
    count = len(running)
    names = [f"• {_described(snapshot)}" for snapshot in running[:NAMED_AT_MOST]]
    if count > NAMED_AT_MOST:
        names.append(f"• and {count - NAMED_AT_MOST} more")
    listed = "\n".join(names)
    if demo:
        text = f"Quit the demo? {count} deployment{'s' if count != 1 else ''} of the demo still run{'s' if count == 1 else ''}:"
        details = (
            "They stop with the demo: its agents, its engines (simulated vLLM, torchrun, the real vLLM of "
            "--real-vllm) and its temporary folder are removed."
        )
    else:
        text = f"Quit meshdeck? {count} deployment{'s' if count != 1 else ''} {'are' if count != 1 else 'is'} running:"
        details = (
            "They keep running after meshdeck quits: their hosts' agents own them, not this window. "
            "Open meshdeck again or run `meshdeck deployments list` to see them; stop one in Deployments "
            "or with `meshdeck deployments stop NAME`."
        )
    return f"{text}\n{listed}", details


def confirm_quit(window: MainWindow) -> bool:
    """Ask before quitting while deployments run, naming them and saying what becomes of them; True: quit."""
    running = running_deployments(window)
    if not running:
        return True
    text, details = quit_question(running, demo=window.context.demo is not None)
    box = QMessageBox(QMessageBox.Icon.Question, "Quit meshdeck", text, parent=window)
    box.setObjectName("quitQuestion")
    box.setTextFormat(Qt.TextFormat.PlainText)  # names come from the agents: shown, never interpreted
    box.setInformativeText(details)
    quit_button = box.addButton("Quit", QMessageBox.ButtonRole.AcceptRole)
    quit_button.setObjectName("quitButton")
    cancel = box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(quit_button)
    box.setEscapeButton(cancel)
    box.exec()
    return box.clickedButton() is quit_button or window.quitting  # (a signal may have ended it meanwhile)


def close_dialogs(window: MainWindow) -> None:
    """Reject the window's open dialogs (the quit question among them) so nothing holds the event loop."""
    for dialog in window.findChildren(QDialog):
        if dialog.isVisible():
            dialog.reject()
