"""A log budget per peer: what one client does wrong is logged a few times, then counted.

A client that sends thousands of malformed lines (or keeps hitting a bug) must not write thousands of
warnings into the agent's log. `LogBudget` logs the first `burst` messages, then counts the rest and
logs one summary per `interval_s` with how many were left out, and a last one when the client goes
(`flush`). Everything logged here comes from a peer, so the caller passes it through
`protocol.excerpt` or an error reply's bounded message.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

LOG_BURST = 5
SUMMARY_INTERVAL_S = 60.0


class LogBudget:
    def __init__(
        self,
        logger: logging.Logger,
        who: str,
        burst: int = LOG_BURST,
        interval_s: float = SUMMARY_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.who = who
        self.burst = burst
        self.interval_s = interval_s
        self.clock = clock
        self._lock = threading.Lock()
        self._logged = 0
        self._suppressed = 0
        self._summary_at = clock()

    def log(self, level: int, message: str, *args: Any, exc_info: bool = False) -> None:
        """Log `message % args` for this peer if the budget allows; otherwise count it."""
        with self._lock:
            within = self._logged < self.burst
            if within:
                self._logged += 1
                last = self._logged == self.burst
            else:
                self._suppressed += 1
                due = self.clock() - self._summary_at >= self.interval_s
                summary = self._take_summary() if due else ""
        if not within:
            if summary:
                self.logger.warning(summary)
            return
        self.logger.log(level, "%s: " + message, self.who, *args, exc_info=exc_info)
        if last:
            self.logger.warning(
                "%s: further problems from this client are counted and summarised every %.0f s",
                self.who,
                self.interval_s,
            )

    def flush(self) -> None:
        """Log how many messages were left out since the last summary (the client is gone)."""
        with self._lock:
            summary = self._take_summary()
        if summary:
            self.logger.warning(summary)

    def _take_summary(self) -> str:
        if not self._suppressed:
            return ""
        elapsed = self.clock() - self._summary_at
        summary = "%s: %d more problems in the last %.1f s were not logged" % (self.who, self._suppressed, elapsed)
        self._suppressed = 0
        self._summary_at = self.clock()
        return summary
