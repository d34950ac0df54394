"""Background threads step aside, for a few milliseconds, while the console's GUI thread redraws.

CPython runs one thread's bytecode at a time (the GIL). The console's GUI thread gives the GIL up around
every Qt and numpy call of a redraw, and each time a busy thread holds it the GUI thread waits up to the
switch interval for it back (ui/gil.py). Beside a 278-host fleet the sample pump (~30 % of a core) and the
store writer (~13 %) are busy often enough that a fleet-view refresh of 5 ms of work took 50-70 ms at the
99th percentile, with no garbage collection in it: all of it waits for the GIL.

So the GUI thread `hold()`s this gate while it redraws, and the pump and the writer call `step_aside()`
between their units of work (a host's turn, a staged batch): while the gate is held they wait, releasing
the GIL, for at most MAX_STEP_ASIDE_S. A redraw then competes only with the unit of work in progress. A
held gate never blocks anyone longer than that bound, so a redraw that waits on a background thread (or
a gate never released) costs the background at most one bound per step; when nothing holds it,
`step_aside()` is one attribute read. Only threading: no I/O, no Qt, so every layer may use it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

MAX_STEP_ASIDE_S = 0.05


class ForegroundGate:
    """See the module doc. Thread-safe; holds nest (the gate is open again when the outermost ends)."""

    def __init__(self, max_step_aside_s: float = MAX_STEP_ASIDE_S) -> None:
        self.max_step_aside_s = max_step_aside_s
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._depth = 0
        self.stepped_aside_s = 0.0  # how long background threads waited in all (diagnostics)

    @property
    def held(self) -> bool:
        return not self._open.is_set()

    @contextmanager
    def hold(self) -> Iterator[None]:
        with self._lock:
            self._depth += 1
            self._open.clear()
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    self._open.set()

    def step_aside(self) -> None:
        """Wait while the gate is held, at most `max_step_aside_s`; at once when it is not."""
        if self._open.is_set():
            return
        started = time.perf_counter()
        self._open.wait(self.max_step_aside_s)
        waited = time.perf_counter() - started
        with self._lock:
            self.stepped_aside_s += waited


FOREGROUND = ForegroundGate()  # the process's gate: the console holds it, the pump and the writer step aside
