"""One host's samples, in seq order, each exactly once: the gate between an agent connection and the sink.

Every sample passes one gate: seq must be last_seq + 1, an older or repeated seq is dropped as a
duplicate, a jump is filled with `samples.read` first and whatever the ring no longer held is counted
in `dropped`. After a reconnect `backfill` pages in everything after last_seq before the supervisor
subscribes again.

Seqs are only comparable within one sequence epoch (the agent's hello names it; a new agent state dir
starts seq 1 under a new epoch). `adopt_epoch` resets the gate to read the agent's ring from its start
when the hello's epoch differs from the one the held last_seq belongs to, and a SequenceReset event says
so; an agent whose newest seq is below the held one (an agent without epochs, or a resume point stored
without one) is reset the same way. Samples are delivered with their epoch, so the store's resume point
carries it too. Runs on the host supervisor's thread; `last_seq` and `epoch` may be read from any thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from meshdeck.remote.events import FleetEvent, SamplesReceived, SequenceReset

log = logging.getLogger(__name__)


class Caller(Protocol):
    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = ...) -> Any: ...


class SampleGate:
    def __init__(
        self,
        host: str,
        sink: Callable[[FleetEvent], None],
        *,
        since_seq: int | None = None,
        since_epoch: str | None = None,
        read_page: int = 600,
        call_timeout_s: float = 30.0,
        stopped: Callable[[], bool] = lambda: False,
    ) -> None:
        self.host = host
        self._sink = sink
        self._lock = threading.Lock()
        self._last_seq = since_seq
        self._epoch = since_epoch  # the sequence epoch _last_seq belongs to (None: not known)
        self._read_page = read_page
        self._call_timeout_s = call_timeout_s
        self._stopped = stopped

    @property
    def last_seq(self) -> int | None:
        with self._lock:
            return self._last_seq

    @property
    def epoch(self) -> str | None:
        with self._lock:
            return self._epoch

    def adopt_epoch(self, epoch: str | None) -> None:
        """Take the agent's epoch; if the held last_seq belongs to another one, restart the gate at 0."""
        with self._lock:
            previous, held = self._epoch, self._last_seq
            changed = epoch is not None and previous is not None and epoch != previous and held is not None
            self._epoch = epoch
            if changed:
                self._last_seq = 0
        if changed and held is not None:
            self._reset(
                epoch,
                previous,
                held,
                f"the agent's sample sequence restarted (epoch {previous} -> {epoch}: a new agent state dir); "
                "reading its samples from the start",
            )

    def _reset(self, epoch: str | None, previous: str | None, held: int, reason: str) -> None:
        log.warning("%s: %s (held seq %d)", self.host, reason, held)
        self._sink(SequenceReset(self.host, epoch, previous, held, reason, time.time()))

    def backfill(self, client: Caller) -> None:
        """Page in everything after last_seq with samples.read (before subscribing)."""
        if self._last_seq is None:
            return
        while not self._stopped():
            since = self._last_seq
            page = client.call("samples.read", {"since_seq": since, "limit": self._read_page}, self._call_timeout_s)
            agent_last = int(page.get("last_seq") or 0)
            if agent_last < since:
                with self._lock:
                    self._last_seq = 0
                    epoch = self._epoch
                self._reset(
                    epoch,
                    epoch,
                    since,
                    f"the agent's newest sample is seq {agent_last} but seq {since} was already delivered: its "
                    "sequence restarted (a new agent state dir); reading its samples from the start",
                )
                continue
            samples = [s for s in page.get("samples") or [] if isinstance(s, dict)]
            self.accept(client, samples, backfill=True, fill_gaps=False)
            if not samples or (self._last_seq or 0) >= agent_last:
                return

    def accept(self, client: Caller, samples: list[dict[str, Any]], backfill: bool, fill_gaps: bool = True) -> None:
        """Deliver samples with seq == last_seq + 1, filling gaps from the ring, skipping repeats.

        `dropped` on a delivery counts the seqs missing right before it that the ring no longer had.
        """
        fresh: list[dict[str, Any]] = []
        lost = 0
        valid = [s for s in samples if isinstance(s.get("seq"), int) and not isinstance(s.get("seq"), bool)]
        for sample in sorted(valid, key=lambda s: s["seq"]):
            seq, last = sample["seq"], self._last_seq
            if last is not None and seq <= last:
                continue  # already delivered
            if last is not None and seq > last + 1:
                if fill_gaps:
                    self._deliver(fresh, lost, backfill)
                    fresh, lost = [], self._fill_gap(client, last, seq)
                else:
                    lost += seq - last - 1
            fresh.append(sample)
            with self._lock:
                self._last_seq = seq
        self._deliver(fresh, lost, backfill)

    def _fill_gap(self, client: Caller, last: int, next_seq: int) -> int:
        """Deliver seq last+1 .. next_seq-1 from the agent's ring; return how many of them it no longer had."""
        since = last
        while since < next_seq - 1 and not self._stopped():
            limit = min(self._read_page, next_seq - 1 - since)
            page = client.call("samples.read", {"since_seq": since, "limit": limit}, self._call_timeout_s)
            chunk = sorted(
                (s for s in page.get("samples") or [] if isinstance(s, dict) and since < s.get("seq", 0) < next_seq),
                key=lambda s: s["seq"],
            )
            if not chunk:
                break
            with self._lock:
                self._last_seq = chunk[-1]["seq"]
            self._deliver(chunk, chunk[0]["seq"] - since - 1, backfill=True)
            since = chunk[-1]["seq"]
        with self._lock:
            self._last_seq = next_seq - 1
        return next_seq - 1 - since

    def _deliver(self, samples: list[dict[str, Any]], dropped: int, backfill: bool) -> None:
        if samples or dropped:
            self._sink(SamplesReceived(self.host, tuple(samples), dropped, backfill, self._epoch))
