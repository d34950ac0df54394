"""Log lines about what one peer sent, rate-limited, so a flooding agent cannot flood the app's log.

    noise = PeerLog(log, "gpu-a")
    noise.report("skipping malformed line from the agent", detail)   # the first `burst` per interval in full
    ...                                                               # the rest counted: one summary line each
    noise.flush()                                                     # interval, or at flush (connection closed)

Time is cut into windows of `interval_s` from the first report; in each, the first `burst` reports are
logged and the others counted; the count (and the latest of them) is logged once the window is over (at
the next report) or at `flush()`. So a flood costs at most `burst + 1` lines per interval. The peer's
text is escaped and cut to PEER_TEXT_LIMIT characters (core.text.printable): it may be 4 MiB of
terminal escapes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from meshdeck.core.text import printable

BURST = 5
INTERVAL_S = 60.0
PEER_TEXT_LIMIT = 300


class PeerLog:
    """Rate-limited log lines about one peer (`host`); thread-safe."""

    def __init__(
        self,
        logger: logging.Logger,
        host: str,
        level: int = logging.WARNING,
        *,
        burst: int = BURST,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._host = host
        self._level = level
        self._burst = burst
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._window_start: float | None = None
        self._in_window = 0
        self._suppressed = 0
        self._latest = ""

    def report(self, what: str, detail: str = "") -> None:
        """Log `what: detail` (detail from the peer: escaped and cut), or count it when over the burst."""
        line = f"{what}: {printable(detail, PEER_TEXT_LIMIT)}" if detail else what
        with self._lock:
            now = self._clock()
            summary = None
            if self._window_start is None or now - self._window_start >= self._interval_s:
                summary = self._take_summary(now)
                self._window_start, self._in_window = now, 0
            self._in_window += 1
            logged = self._in_window <= self._burst
            if not logged:
                self._suppressed += 1
                self._latest = line
        if summary:
            self._logger.log(self._level, "%s", summary)
        if logged:
            self._logger.log(self._level, "%s: %s", self._host, line)

    def flush(self) -> None:
        """Log the count not reported yet (call it when the peer's connection ends)."""
        with self._lock:
            summary = self._take_summary(self._clock())
        if summary:
            self._logger.log(self._level, "%s", summary)

    def _take_summary(self, now: float) -> str | None:
        if not self._suppressed or self._window_start is None:
            return None
        seconds = min(now - self._window_start, self._interval_s)
        summary = (
            f"{self._host}: {self._suppressed} more like this in the last {seconds:.0f} s, "
            f"not logged one by one (latest: {self._latest})"
        )
        self._suppressed, self._latest = 0, ""
        return summary
