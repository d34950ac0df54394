"""What a listener does when accept() fails for want of descriptors or memory: wait, log once, go on.

accept() fails with EMFILE / ENFILE when the process or the system has no descriptor left, ENOBUFS /
ENOMEM without buffers. The listening socket stays readable, so retrying at once spins, and raising ends
the listener (before this module the daemon exited on EMFILE and every attach was refused). Waiting lets
connections end and descriptors come back; the daemon's socket and the exporter both do it.
"""

from __future__ import annotations

import errno

RESOURCE_ERRNOS = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM))
FIRST_WAIT_S = 0.05
LONGEST_WAIT_S = 1.0


def out_of_resources(exc: OSError) -> bool:
    """True for an accept() that failed for want of descriptors or memory (worth retrying after a wait)."""
    return exc.errno in RESOURCE_ERRNOS


class AcceptBackoff:
    """How long to wait after such a failure: doubling from FIRST_WAIT_S to LONGEST_WAIT_S, and back to
    the first after an accept that worked. `failed()` is True on the first failure of a burst only, so the
    caller logs once per burst, not once per retry."""

    def __init__(self, first_s: float = FIRST_WAIT_S, longest_s: float = LONGEST_WAIT_S) -> None:
        self.first_s = first_s
        self.longest_s = longest_s
        self.delay_s = 0.0
        self.failures = 0  # in the current burst

    def failed(self) -> bool:
        new_burst = self.failures == 0
        self.failures += 1
        self.delay_s = self.first_s if new_burst else min(self.longest_s, self.delay_s * 2)
        return new_burst

    def succeeded(self) -> int:
        """Ends a burst; returns how many accepts failed in it (0: there was none)."""
        failures, self.failures, self.delay_s = self.failures, 0, 0.0
        return failures
