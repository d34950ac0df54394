"""One thread that decodes and delivers every connected host's events, instead of a thread per host doing it.

    pump = shared_pump()
    pump.schedule(feed)   # feed.drain(until) runs on the pump's thread; it returns True while more waits

Why: at 278 hosts a supervisor thread per host woke for every samples event. After a connect storm left
backlogs, 70–280 of them were runnable at once, each with an equal share of the GIL, and the store writer
(one thread among them) waited ~0.7 s for every turn: commits of one second's CPU took 15–35 s, its inbox
stayed full and back-pressure held every host for minutes. Here one thread takes the hosts' events
round-robin, a turn of `turn_s` per host: the writer competes with a handful of threads, whatever the
fleet's size. Turns are measured in time, not events: a flooding agent's events hold 500 samples each,
and a poisoned agent's are mostly refused at once; a count of events would give the flood the pump.

A feed is scheduled when its connection queued an event (the read hub calls `schedule`; it only appends);
scheduling a feed that waits already does nothing. `drain(until)` works until `time.perf_counter()` reaches
`until` (at least one step: a feed ends its turn between chunks of an event) and must not wait on a remote
call: a feed whose work needs one (a gap to fill from the agent's ring) hands it to its own thread and
returns (see HostSupervisor). An exception from `drain` is logged and that feed is not scheduled again by the pump.
The thread runs while there is work and ends after IDLE_END_S without any; the next `schedule` starts it.
Before each turn the pump steps aside while the console redraws (core/foreground.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Protocol

from meshdeck.core.foreground import FOREGROUND, ForegroundGate

log = logging.getLogger(__name__)

TURN_S = 0.005  # a host's turn on the pump, before the next host's (one chunk of samples at least)
IDLE_END_S = 5.0


class Feed(Protocol):
    def drain(self, until: float) -> bool:
        """Take events until `time.perf_counter()` reaches `until`; True when more wait (scheduled again)."""
        ...


class SamplePump:
    """See the module doc. Thread-safe."""

    def __init__(
        self, name: str = "meshdeck-sample-pump", turn_s: float = TURN_S, gate: ForegroundGate = FOREGROUND
    ) -> None:
        if not turn_s > 0:
            raise ValueError(f"sample pump: a turn must last more than 0 s, got {turn_s}")
        self._name = name
        self._turn_s = turn_s
        self._gate = gate
        self._cond = threading.Condition()
        self._ready: deque[Feed] = deque()
        self._scheduled: set[int] = set()  # id() of each feed in _ready
        self._thread: threading.Thread | None = None
        self.turns = 0  # drains run (for tests and diagnostics)

    @property
    def thread(self) -> threading.Thread | None:
        with self._cond:
            return self._thread

    def waiting(self) -> int:
        """Feeds scheduled and not yet drained."""
        with self._cond:
            return len(self._ready)

    def schedule(self, feed: Feed) -> None:
        """Drain `feed` on the pump's thread soon (after the feeds scheduled before it). Never waits."""
        with self._cond:
            if id(feed) in self._scheduled:
                return
            self._scheduled.add(id(feed))
            self._ready.append(feed)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            else:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._ready:
                    self._cond.wait(IDLE_END_S)
                    if not self._ready:
                        self._thread = None  # idle: the next schedule() starts a thread again
                        return
                feed = self._ready.popleft()
                self._scheduled.discard(id(feed))
            self.turns += 1
            self._gate.step_aside()  # the console is redrawing: its GIL first (core/foreground.py)
            try:
                more = feed.drain(time.perf_counter() + self._turn_s)
            except Exception:
                log.exception("sample pump: a host's feed failed; it is no longer drained by the pump")
                continue
            if more:
                self.schedule(feed)


_shared: SamplePump | None = None
_shared_lock = threading.Lock()


def shared_pump() -> SamplePump:
    """The process's pump (made at the first call; its thread runs while there is work)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SamplePump()
        return _shared
