"""The Qt bridge: fleet and service events from any thread in, typed Qt signals on the GUI thread out.

The fleet's host supervisors run in their own threads and must never touch a widget. They hand
events (meshdeck.remote.events values) to `FleetBridge.post`, which only appends to a bounded inbox
and never blocks a supervisor. The deployment registry posts its change events
(meshdeck.services.deployments.events) the same way. A QTimer on the GUI thread drains that inbox and emits one
signal per event: host states and inventories first, in their order, then everything else in its order.
A view learns of a host and its GPUs before the samples queued ahead of them: after a 278-host connect
storm the samples waiting were ~20 s of the fleet's, and the fleet view laid its cells out again each
second as inventories trickled through behind them. Draining has a time budget per tick: a reconnect can
backfill hours of samples at once, and the window must stay responsive while they are absorbed (big
sample batches are split into chunks; what does not fit in one tick waits for the next, order kept).

The inbox is bounded by what it holds (`max_cells` sample values, `max_events` other events). When the
window falls that far behind, the oldest sample batches are shed first, then the oldest worker / log
/ alert events; host states and inventories are always kept. Shedding only thins the live view: the
store writer gets every sample on its own path (history and exports are complete), and a chart shows
the shed span as a gap (`SamplesReceived.skipped_before`), never a line drawn across it. Every shed is
counted per host (`skipped`) and logged, rate-limited.

Deployment events are never shed, and need not be: each has a `key` (one deployment's snapshot, one
watched log), and while one is waiting a newer one with the same key is merged into it in place
(`merged_after`: the newer snapshot wins, log text is appended up to a bound). So at most one per key
waits, and a view gets the newest state in the order the first change arrived. The Slurm follower's job
changes (services/slurm_service.py) are keyed the same way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from PySide6.QtCore import QObject, QTimer, Signal

from meshdeck.core.samples import SeriesKey
from meshdeck.services.deployments.events import DeploymentChanged, DeploymentEvent, DeploymentLogLines
from meshdeck.services.events import AgentEvent, FleetEvent, HostStateChanged, InventoryReceived, SamplesReceived
from meshdeck.services.slurm_service import SlurmJobChanged

log = logging.getLogger(__name__)

DRAIN_INTERVAL_MS = 100
DRAIN_BUDGET_S = 0.030  # GUI-thread time per tick spent delivering events
SAMPLES_PER_CHUNK = 120
MAX_CELLS = 500_000  # charted values waiting for the GUI (4 MB): 10 min of a 10-host fleet at 1 Hz
SHED_WARNING_INTERVAL_S = 60.0
MAX_EVENTS = 20_000  # other events waiting (a chatty worker's log lines)


@dataclass(frozen=True)
class _Latest:
    """In the inbox: the place of the deployment event waiting under `key` (kept in `FleetBridge._latest`)."""

    key: tuple[str, ...]


class FleetBridge(QObject):
    """Thread-safe, bounded inbox for fleet events; re-emits them as typed signals on the GUI thread."""

    host_state_changed = Signal(object)  # HostStateChanged
    samples_received = Signal(object)  # SamplesReceived (at most SAMPLES_PER_CHUNK samples)
    agent_event = Signal(object)  # AgentEvent: worker / log / alert
    inventory_received = Signal(object)  # InventoryReceived
    deployment_changed = Signal(object)  # DeploymentChanged: one deployment's newest snapshot
    deployment_log = Signal(object)  # DeploymentLogLines: new text of a watched log
    slurm_job_changed = Signal(object)  # SlurmJobChanged: one Slurm job's newest record

    def __init__(
        self,
        parent: QObject | None = None,
        budget_s: float = DRAIN_BUDGET_S,
        *,
        max_cells: int = MAX_CELLS,
        max_events: int = MAX_EVENTS,
    ) -> None:
        super().__init__(parent)
        self._inbox: deque[FleetEvent | _Latest] = deque()
        self._hosts: deque[HostStateChanged | InventoryReceived] = deque()  # delivered before the inbox
        self._latest: dict[tuple[str, ...], DeploymentEvent | SlurmJobChanged] = {}  # key -> the keyed event waiting
        self._lock = threading.Lock()
        self._cells = 0
        self._others = 0
        self._max_cells = max_cells
        self._max_events = max_events
        self._skipped_since: dict[str, int] = {}  # samples shed per host since its last delivered batch
        self.skipped: dict[str, int] = {}  # samples shed per host, all time
        self.shed_events = 0
        self._shed_warned_at = -SHED_WARNING_INTERVAL_S  # shedding happens in bursts: one warning a minute
        self._budget_s = budget_s
        self._keep: Callable[[SeriesKey], bool] | None = None
        self.delivered = 0
        self._timer = QTimer(self)
        self._timer.setInterval(DRAIN_INTERVAL_MS)
        self._timer.timeout.connect(self.drain)
        self._timer.start()

    def keep_series(self, keep: Callable[[SeriesKey], bool]) -> None:
        """Queue only the series `keep` accepts (what the window charts): a batch is cut down as it is
        posted, on the poster's thread, so what waits for the GUI thread is what it will draw."""
        self._keep = keep

    def post(self, event: FleetEvent | DeploymentEvent | SlurmJobChanged) -> None:
        """Called from any thread (a fleet or registry subscriber). Never blocks, never touches Qt objects."""
        if isinstance(event, DeploymentChanged | DeploymentLogLines | SlurmJobChanged):
            with self._lock:
                older = self._latest.get(event.key)
                if older is None:
                    self._inbox.append(_Latest(event.key))
                    self._latest[event.key] = event
                else:
                    self._latest[event.key] = event.merged_after(older)
            return
        if isinstance(event, SamplesReceived) and self._keep is not None:
            event = replace(event, batch=event.batch.select(self._keep))
        with self._lock:
            if isinstance(event, HostStateChanged | InventoryReceived):
                self._hosts.append(event)
                self._others += 1
                return
            self._inbox.append(event)
            if isinstance(event, SamplesReceived):
                self._cells += event.batch.cells
                if self._cells > self._max_cells:
                    self._shed_samples()
            else:
                self._others += 1
                if self._others > self._max_events:
                    self._shed_agent_events()

    def __call__(
        self, event: FleetEvent | DeploymentEvent | SlurmJobChanged
    ) -> None:  # usable directly as a subscriber callback
        self.post(event)

    @property
    def backlog(self) -> int:
        with self._lock:
            return len(self._inbox) + len(self._hosts)

    @property
    def cells_waiting(self) -> int:
        """Sample values queued for the GUI thread (how far behind the charts are)."""
        with self._lock:
            return self._cells

    def stop(self) -> None:
        self._timer.stop()

    # -- shedding (under the lock) ---------------------------------------------------------------------

    def _shed_samples(self) -> None:
        """Drop the oldest sample batches until a quarter of the room is free again."""
        target = self._max_cells * 3 // 4
        kept: deque[FleetEvent | _Latest] = deque()
        while self._inbox and self._cells > target:
            event = self._inbox.popleft()
            if isinstance(event, SamplesReceived) and event.batch.cells:
                self._cells -= event.batch.cells
                self._note_skipped(event.host, len(event.batch))
                if event.dropped or event.refused:  # the agent's own loss is still reported
                    kept.append(replace(event, batch=event.batch.slice(0, 0)))
            else:
                kept.append(event)
        self._inbox.extendleft(reversed(kept))

    def _shed_agent_events(self) -> None:
        """Drop the oldest worker / log / alert events until a quarter of the room is free again."""
        target = self._max_events * 3 // 4
        kept: deque[FleetEvent | _Latest] = deque()
        while self._inbox and self._others > target:
            event = self._inbox.popleft()
            if isinstance(event, AgentEvent):
                self._others -= 1
                self.shed_events += 1
            else:
                kept.append(event)
        self._inbox.extendleft(reversed(kept))
        self._warn_shed(f"dropped {self.shed_events} worker/log/alert events so far (history keeps worker states)")

    def _warn_shed(self, what: str) -> None:
        """At most one warning a minute; each says the totals so far."""
        now = time.monotonic()
        if now - self._shed_warned_at >= SHED_WARNING_INTERVAL_S:
            self._shed_warned_at = now
            log.warning("the console fell behind: %s", what)

    def _note_skipped(self, host: str, count: int) -> None:
        self._skipped_since[host] = self._skipped_since.get(host, 0) + count
        self.skipped[host] = self.skipped.get(host, 0) + count
        self._warn_shed(f"{self.skipped[host]} samples of {host} skipped in the live charts so far (history has them)")

    # -- the GUI side ----------------------------------------------------------------------------------

    def _next(self) -> FleetEvent | DeploymentEvent | SlurmJobChanged | None:
        with self._lock:
            if self._hosts:
                self._others -= 1
                return self._hosts.popleft()
            if not self._inbox:
                return None
            event = self._inbox.popleft()
            if isinstance(event, _Latest):
                return self._latest.pop(event.key)
            if isinstance(event, SamplesReceived):
                if len(event.batch) > SAMPLES_PER_CHUNK:
                    rest = replace(event, batch=event.batch.slice(SAMPLES_PER_CHUNK, len(event.batch)), dropped=0)
                    event = replace(event, batch=event.batch.slice(0, SAMPLES_PER_CHUNK))
                    self._inbox.appendleft(rest)
                self._cells -= event.batch.cells
                skipped = self._skipped_since.pop(event.host, 0)
                if skipped:
                    event = replace(event, skipped_before=event.skipped_before + skipped)
            else:
                self._others -= 1
            return event

    def drain(self, budget_s: float | None = None) -> int:
        """Deliver queued events (host states and inventories first) until the budget is spent. Returns how
        many were emitted."""
        deadline = time.perf_counter() + (self._budget_s if budget_s is None else budget_s)
        emitted = 0
        while emitted == 0 or time.perf_counter() < deadline:
            event = self._next()
            if event is None:
                break
            self._emit(event)
            emitted += 1
        self.delivered += emitted
        return emitted

    def _emit(self, event: FleetEvent | DeploymentEvent | SlurmJobChanged) -> None:
        if isinstance(event, SamplesReceived):
            self.samples_received.emit(event)
        elif isinstance(event, HostStateChanged):
            self.host_state_changed.emit(event)
        elif isinstance(event, AgentEvent):
            self.agent_event.emit(event)
        elif isinstance(event, InventoryReceived):
            self.inventory_received.emit(event)
        elif isinstance(event, DeploymentChanged):
            self.deployment_changed.emit(event)
        elif isinstance(event, DeploymentLogLines):
            self.deployment_log.emit(event)
        elif isinstance(event, SlurmJobChanged):
            self.slurm_job_changed.emit(event)
        else:
            log.debug("fleet bridge: no signal for %s", type(event).__name__)
