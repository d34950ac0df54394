"""The console decides when full garbage collections run: on the GUI thread, between refreshes, over what is new.

CPython's collector scans every tracked object in a full (generation 2) collection and holds the GIL while
it does: every thread of the console stops. Left to itself, a full collection starts in whichever thread
happens to allocate when the counts say so, often in the middle of a fleet-view refresh. Beside a 278-host
fleet the console holds ~330,000 tracked objects (inventories: 40,000 NVLink records alone; host models,
services, Qt wrappers), most of them for the whole session, and the sample path's allocations triggered a
full collection every ~13 s. Measured with `meshdeck bench fleet --host-count 278 --console` on a 2-core machine:
full collections took 250 ms (median; 211-428 ms), each stalling whatever refresh or delivery ran then.

So, while the console runs:
- CPython starts no full collection by itself (its generation-2 threshold is set out of reach); the young
  generations (0 and 1) are still collected automatically, as they are short.
- `start()` freezes what the start-up made (imports, widgets: ~300,000 objects), so the first scheduled
  collection does not scan it (0.6 s on the GUI thread, measured at 64 hosts).
- Every COLLECT_EVERY_S a GUI-thread timer runs one full collection and then moves what survived out of the
  collector's generations (`gc.freeze()`). The collection scans only what is younger than the last freeze,
  a few seconds of survivors, and being on the GUI thread it never runs inside a refresh.
- Freezing does not keep an object alive (reference counting frees it as before); what it delays is
  collecting a *cycle* of frozen objects that died after they were frozen. Every THAW_EVERY_S the frozen
  objects go back (`gc.unfreeze()`) and one full collection frees such cycles: one pause of the old length
  every 15 minutes.
`pauses_ms` keeps how long the last scheduled collections held the GUI thread (the benchmark reports them).
Measured on the same machine: at 278 hosts the scheduled collections took 1.0-1.1 ms (median of each run's
30; the longest 28-121 ms); at 64 hosts over 7 minutes with a thaw every 5 minutes, the frozen objects held
at 162,000-168,000 (no growth), no collection found an unreachable object, and the thaw took 116 ms.
The agent and the CLI keep CPython's defaults; `stop()` restores them.
"""

from __future__ import annotations

import gc
import time
from collections import deque

from PySide6.QtCore import QObject, QTimer

COLLECT_EVERY_S = 2.0
THAW_EVERY_S = 900.0
PAUSES_KEPT = 1000
NO_AUTOMATIC_FULL_COLLECTION = 2**31 - 1  # gc.set_threshold's generation-2 count: never reached


class CollectorPolicy(QObject):
    """Runs the collect / freeze / thaw schedule above on the GUI thread's timers while the console runs."""

    def __init__(
        self,
        parent: QObject | None = None,
        collect_every_s: float = COLLECT_EVERY_S,
        thaw_every_s: float = THAW_EVERY_S,
    ) -> None:
        super().__init__(parent)
        self.freezes = 0
        self.thaws = 0
        self.last_thaw_ms = 0.0  # how long the last full collection after a thaw took
        self.pauses_ms: deque[float] = deque(maxlen=PAUSES_KEPT)  # each scheduled collection, oldest first
        self._thresholds: tuple[int, int, int] | None = None
        self._collect = QTimer(self)
        self._collect.setInterval(int(collect_every_s * 1000))
        self._collect.timeout.connect(self.collect_young)
        self._thaw = QTimer(self)
        self._thaw.setInterval(int(thaw_every_s * 1000))
        self._thaw.timeout.connect(self.thaw)

    @property
    def collections(self) -> int:
        """Scheduled collections run so far (each appended one entry to `pauses_ms`)."""
        return self.freezes + self.thaws

    def start(self) -> CollectorPolicy:
        if self._thresholds is None:
            self._thresholds = gc.get_threshold()
            young, middle, _ = self._thresholds
            gc.set_threshold(young, middle, NO_AUTOMATIC_FULL_COLLECTION)
            gc.freeze()  # what the start-up made (modules, widgets): the first collection skips it (0.6 s)
        self._collect.start()
        self._thaw.start()
        return self

    def stop(self) -> None:
        self._collect.stop()
        self._thaw.stop()
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None
        gc.unfreeze()

    def collect_young(self) -> None:
        """One full collection of what is not frozen yet, then freeze what survived."""
        started = time.perf_counter()
        gc.collect()
        gc.freeze()
        self.pauses_ms.append(1000 * (time.perf_counter() - started))
        self.freezes += 1

    def thaw(self) -> None:
        """Give the frozen objects back and collect everything once (the cycles that died since)."""
        started = time.perf_counter()
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.last_thaw_ms = 1000 * (time.perf_counter() - started)
        self.pauses_ms.append(self.last_thaw_ms)
        self.thaws += 1
