"""Warnings about a peer's bad data, rate-limited: a flooding agent cannot flood the log.

    limited = RateLimitedLog(log)
    limited.warning(("bad-sample", host), "%s: refused a sample: %s", host, error)

Per key, the first `burst` messages within `interval_s` are logged; the rest are counted, and the
first message let through after that says how many were suppressed. Keys are bounded (the oldest
is forgotten), so a peer inventing new keys cannot grow memory either.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

MAX_KEYS = 1024


@dataclass
class _Window:
    started: float
    logged: int = 0
    suppressed: int = 0


class RateLimitedLog:
    def __init__(
        self,
        logger: logging.Logger,
        *,
        burst: int = 3,
        interval_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._burst = burst
        self._interval_s = interval_s
        self._clock = clock
        self._windows: OrderedDict[Hashable, _Window] = OrderedDict()
        self._lock = threading.Lock()

    def warning(self, key: Hashable, message: str, *args: object) -> None:
        self.log(logging.WARNING, key, message, *args)

    def log(self, level: int, key: Hashable, message: str, *args: object) -> None:
        now = self._clock()
        with self._lock:
            window = self._windows.get(key)
            if window is None or now - window.started >= self._interval_s:
                suppressed = window.suppressed if window is not None else 0
                window = _Window(now)
                self._windows[key] = window
                self._windows.move_to_end(key)
                while len(self._windows) > MAX_KEYS:
                    self._windows.popitem(last=False)
            else:
                suppressed = 0
            if window.logged >= self._burst:
                window.suppressed += 1
                return
            window.logged += 1
        if suppressed:
            message += " (%d more like this in the last %.0f s were not logged)"
            args = (*args, suppressed, self._interval_s)
        self._logger.log(level, message, *args)

    def suppressed(self, key: Hashable) -> int:
        """Messages of `key` not logged in its current window."""
        with self._lock:
            window = self._windows.get(key)
            return window.suppressed if window is not None else 0
