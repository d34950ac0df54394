"""The console's full garbage collections look at what is new, not at the whole fleet's objects.

CPython's collector scans every tracked object in a full (generation 2) collection, and holds the GIL
while it does: every thread of the console stops, the GUI thread too. Beside a 278-host fleet the
console holds ~330,000 tracked objects (inventories: 40,000 NVLink records alone; host models, services,
Qt wrappers), most of them for the whole session, and the sample path's allocations trigger a full
collection every ~13 s. Measured with `meshdeck bench fleet --hosts 278 --console` on this 2-core machine:
full collections took 250 ms (median; 211-428 ms), and each stalled whatever refresh or delivery was
running then.

So every FREEZE_EVERY_S what has survived is moved out of the collector's generations (`gc.freeze()`):
later full collections scan only younger objects (median 74-95 ms in the same run, and rarer). Freezing
does not keep an object alive (reference counting frees it as before); what it delays is collecting a
*cycle* of frozen objects that died after they were frozen. Every THAW_EVERY_S the frozen objects go
back (`gc.unfreeze()`) and one full collection frees such cycles: one pause of the old length every
15 minutes instead of every few seconds. The agent and the CLI keep CPython's defaults.
"""

from __future__ import annotations

import gc
import time

from PySide6.QtCore import QObject, QTimer

FREEZE_EVERY_S = 10.0
THAW_EVERY_S = 900.0


class CollectorPolicy(QObject):
    """Runs the freeze / thaw schedule above on the GUI thread's timers while the console runs."""

    def __init__(
        self, parent: QObject | None = None, freeze_every_s: float = FREEZE_EVERY_S, thaw_every_s: float = THAW_EVERY_S
    ) -> None:
        super().__init__(parent)
        self.freezes = 0
        self.thaws = 0
        self.last_thaw_ms = 0.0  # how long the last full collection after a thaw took
        self._freeze = QTimer(self)
        self._freeze.setInterval(int(freeze_every_s * 1000))
        self._freeze.timeout.connect(self.freeze)
        self._thaw = QTimer(self)
        self._thaw.setInterval(int(thaw_every_s * 1000))
        self._thaw.timeout.connect(self.thaw)

    def start(self) -> CollectorPolicy:
        self._freeze.start()
        self._thaw.start()
        return self

    def stop(self) -> None:
        self._freeze.stop()
        self._thaw.stop()
        gc.unfreeze()

    def freeze(self) -> None:
        gc.freeze()
        self.freezes += 1

    def thaw(self) -> None:
        """Give the frozen objects back and collect everything once (the cycles that died since)."""
        started = time.perf_counter()
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.last_thaw_ms = 1000 * (time.perf_counter() - started)
        self.thaws += 1
