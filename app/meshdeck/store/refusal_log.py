"""Warnings about refused rows: at most one per host per interval, with the count held back since.

A poisoned agent can send a bad sample every second for hours; one warning line a minute per host says
so (naming the host and the first problem), and the next line says how many rows were refused in
between without a line of their own. What is still held back when the writer stops is logged then.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from meshdeck.store.sample_checks import Refused

log = logging.getLogger(__name__)


@dataclass
class _HostRefusals:
    logged_at: float
    held_back: int = 0  # rows refused since logged_at without a line of their own


class RefusalLog:
    """Per-host rate-limited warnings for refused rows. Not thread-safe: the writer thread owns it."""

    def __init__(self, clock: Callable[[], float], interval_s: float = 60.0) -> None:
        self._clock = clock
        self._interval_s = interval_s
        self._hosts: dict[str, _HostRefusals] = {}

    def refused(self, host: str, refused: Refused) -> None:
        now = self._clock()
        state = self._hosts.get(host)
        if state is not None and now - state.logged_at < self._interval_s:
            state.held_back += refused.rows
            return
        held_back = 0 if state is None else state.held_back
        since = "" if state is None else f" in the last {now - state.logged_at:.0f} s"
        tail = f"; {held_back} more rows of host {host} refused{since} were not logged" if held_back else ""
        what = "a report" if refused.rows == 0 else f"{refused.rows} row{'' if refused.rows == 1 else 's'}"
        log.warning(
            "history: refused %s of host %s: %s%s (other hosts are not affected)", what, host, refused.reason, tail
        )
        self._hosts[host] = _HostRefusals(now)

    def close(self) -> None:
        """Log what is still held back (the writer is stopping)."""
        for host, state in sorted(self._hosts.items()):
            if state.held_back:
                log.warning(
                    "history: %d more rows of host %s refused since the last warning were not logged",
                    state.held_back,
                    host,
                )
        self._hosts.clear()
