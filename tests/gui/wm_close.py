"""Run under Xvfb (xcb): the console's window closed by the window system's close button — an X11
WM_DELETE_WINDOW message, as a window manager sends it — while a deployment runs. Prints one line per step:

    asked: <the question's text>        the question opened (answered Cancel, then Quit)
    open after cancel: True|False
    closed

test_quitting.py runs it; Qt's offscreen platform has no window-system close to send.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gui_helpers import bare_context
from meshdeck.services.deployments.events import DeploymentChanged
from meshdeck.services.deployments.model import DeploymentSnapshot, WorkerSnapshot
from meshdeck.ui.main_window import MainWindow, ViewEntry
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QLabel, QMessageBox, QPushButton

CLIENT_MESSAGE = 33


class ClientMessage(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("serial", ctypes.c_ulong),
        ("send_event", ctypes.c_int),
        ("display", ctypes.c_void_p),
        ("window", ctypes.c_ulong),
        ("message_type", ctypes.c_ulong),
        ("format", ctypes.c_int),
        ("data", ctypes.c_long * 5),
    ]


class XEvent(ctypes.Union):
    _fields_ = [("client", ClientMessage), ("pad", ctypes.c_long * 24)]


def send_wm_delete(window_id: int) -> None:
    """What a window manager's close button does: WM_PROTOCOLS / WM_DELETE_WINDOW to the top-level window."""
    x11 = ctypes.CDLL(ctypes.util.find_library("X11") or "libX11.so.6")
    x11.XOpenDisplay.restype = ctypes.c_void_p
    x11.XOpenDisplay.argtypes = [ctypes.c_char_p]
    x11.XInternAtom.restype = ctypes.c_ulong
    x11.XInternAtom.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    x11.XSendEvent.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int, ctypes.c_long, ctypes.POINTER(XEvent)]
    x11.XFlush.argtypes = [ctypes.c_void_p]
    x11.XCloseDisplay.argtypes = [ctypes.c_void_p]
    display = x11.XOpenDisplay(None)
    if not display:
        raise SystemExit("no X display")
    event = XEvent()
    event.client.type = CLIENT_MESSAGE
    event.client.window = window_id
    event.client.message_type = x11.XInternAtom(display, b"WM_PROTOCOLS", 0)
    event.client.format = 32
    event.client.data[0] = x11.XInternAtom(display, b"WM_DELETE_WINDOW", 0)
    event.client.data[1] = 0  # CurrentTime
    x11.XSendEvent(display, window_id, 0, 0, ctypes.byref(event))
    x11.XFlush(display)
    x11.XCloseDisplay(display)


def main() -> int:
    app = QApplication([sys.argv[0], "-platform", "xcb"])
    context = bare_context(str(Path(tempfile.mkdtemp()) / "console.ini"))
    window = MainWindow(context, [ViewEntry("hosts", "Hosts", QLabel("hosts"))])
    window.show()
    worker = WorkerSnapshot("vllm serve ds32", "gpu-a", "w-1", 0, "running")
    context.bridge.post(
        DeploymentChanged(DeploymentSnapshot("ds32-1", "ds32", "vllm", "running", "", (worker,), time.time()))
    )
    context.bridge.drain()
    answers = ["cancel", "quit"]

    def look() -> None:
        box = QApplication.activeModalWidget()
        if isinstance(box, QMessageBox) and box.objectName() == "quitQuestion" and answers:
            print("asked:", box.text().replace("\n", " | "), flush=True)
            answer = answers.pop(0)
            if answer == "cancel":
                box.button(QMessageBox.StandardButton.Cancel).click()
                QTimer.singleShot(300, lambda: print("open after cancel:", window.isVisible(), flush=True))
                QTimer.singleShot(600, lambda: send_wm_delete(int(window.winId())))
            else:
                box.findChild(QPushButton, "quitButton").click()

    poll = QTimer()
    poll.timeout.connect(look)
    poll.start(50)
    QTimer.singleShot(500, lambda: send_wm_delete(int(window.winId())))
    QTimer.singleShot(20_000, lambda: app.exit(3))  # never answered
    status = app.exec()
    print("closed" if not window.isVisible() else "still open", flush=True)
    context.shutdown()
    return status


if __name__ == "__main__":
    sys.exit(main())
