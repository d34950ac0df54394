"""The Qt bridge: fleet events from any thread in, typed Qt signals on the GUI thread out.

The fleet's host supervisors run in their own threads and must never touch a widget. They hand
events (meshdeck.remote.events values) to `FleetBridge.post`, which only appends to a thread-safe
queue. A QTimer on the GUI thread drains that queue in order and emits one signal per event.
Draining has a time budget per tick: a reconnect can backfill hours of samples at once, and the
window must stay responsive while they are absorbed (big sample batches are split into chunks;
what does not fit in one tick waits for the next, order kept).
"""

from __future__ import annotations

import logging
import queue
import time
from collections import deque
from dataclasses import replace

from PySide6.QtCore import QObject, QTimer, Signal

from meshdeck.remote.events import AgentEvent, FleetEvent, HostStateChanged, InventoryReceived, SamplesReceived

log = logging.getLogger(__name__)

DRAIN_INTERVAL_MS = 100
DRAIN_BUDGET_S = 0.030  # GUI-thread time per tick spent delivering events
SAMPLES_PER_CHUNK = 120


class FleetBridge(QObject):
    """Thread-safe inbox for fleet events; re-emits them as typed signals on the GUI thread."""

    host_state_changed = Signal(object)  # HostStateChanged
    samples_received = Signal(object)  # SamplesReceived (at most SAMPLES_PER_CHUNK samples)
    agent_event = Signal(object)  # AgentEvent: worker / log / alert
    inventory_received = Signal(object)  # InventoryReceived

    def __init__(self, parent: QObject | None = None, budget_s: float = DRAIN_BUDGET_S) -> None:
        super().__init__(parent)
        self._inbox: queue.SimpleQueue[FleetEvent] = queue.SimpleQueue()
        self._pending: deque[FleetEvent] = deque()
        self._budget_s = budget_s
        self.delivered = 0
        self._timer = QTimer(self)
        self._timer.setInterval(DRAIN_INTERVAL_MS)
        self._timer.timeout.connect(self.drain)
        self._timer.start()

    def post(self, event: FleetEvent) -> None:
        """Called from any thread (a fleet subscriber). Never blocks, never touches Qt objects."""
        self._inbox.put(event)

    def __call__(self, event: FleetEvent) -> None:  # usable directly as a subscriber callback
        self.post(event)

    @property
    def backlog(self) -> int:
        return len(self._pending) + self._inbox.qsize()

    def stop(self) -> None:
        self._timer.stop()

    def drain(self, budget_s: float | None = None) -> int:
        """Deliver queued events in order until the budget is spent. Returns how many were emitted."""
        deadline = time.perf_counter() + (self._budget_s if budget_s is None else budget_s)
        while True:
            try:
                self._pending.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        emitted = 0
        while self._pending and (emitted == 0 or time.perf_counter() < deadline):
            event = self._pending.popleft()
            if isinstance(event, SamplesReceived) and len(event.samples) > SAMPLES_PER_CHUNK:
                head = replace(event, samples=event.samples[:SAMPLES_PER_CHUNK])
                rest = replace(event, samples=event.samples[SAMPLES_PER_CHUNK:], dropped=0)
                self._pending.appendleft(rest)
                event = head
            self._emit(event)
            emitted += 1
        self.delivered += emitted
        return emitted

    def _emit(self, event: FleetEvent) -> None:
        if isinstance(event, SamplesReceived):
            self.samples_received.emit(event)
        elif isinstance(event, HostStateChanged):
            self.host_state_changed.emit(event)
        elif isinstance(event, AgentEvent):
            self.agent_event.emit(event)
        elif isinstance(event, InventoryReceived):
            self.inventory_received.emit(event)
        else:
            log.warning("fleet bridge: ignoring unknown event type %s", type(event).__name__)
