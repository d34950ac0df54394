"""SIGINT and SIGTERM as a request to stop: a command that starts processes ends them on Ctrl+C and on
`kill` alike, instead of dying (SIGTERM's default) and leaving them running.

    stop = threading.Event()
    with stop_on_signals(stop) as received:
        work(stop)                      # watches `stop`, cleans up, returns or raises
    if received: return 128 + received[0]

The handlers only set the event (and note the signal): the work decides where it stops, so nothing is
interrupted half-way (a Python exception raised inside a Qt slot is swallowed by the event loop, which is
why Ctrl+C used to be ignored while the console ran). Outside the main thread nothing is installed.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[list[int]]:
    """Within the block, SIGINT and SIGTERM set `stop`; yields the signals received, in order. The previous
    handlers are back afterwards."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        stop.set()

    previous = {signum: signal.signal(signum, handler) for signum in STOPPING_SIGNALS}
    try:
        yield received
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
