"""One host's samples, in seq order, each exactly once: the gate between an agent connection and the sink.

Every sample passes one gate: seq must be last_seq + 1, an older or repeated seq is dropped as a
duplicate, a jump is filled with `samples.read` first and whatever the ring no longer held is counted
in `dropped`. After a reconnect `backfill` pages in everything after last_seq before the supervisor
subscribes again.

Every sample is decoded here, once (`Sample.from_wire`): one with a field of the wrong type or out of
range (a time stamp of 1e17, a seq of 2**70) is refused whole and counted as `refused` in the next
delivery, with a rate-limited warning naming the host and the field; the others of its message pass.
A delivery is flattened once into a columnar `SampleBatch` (remote/sample_batch.py) for the store and
the charts.

Seqs are only comparable within one sequence epoch (the agent's hello names it; a new agent state dir
starts seq 1 under a new epoch). `adopt_epoch` resets the gate to read the agent's ring from its start
when the hello's epoch differs from the one the held last_seq belongs to, and a SequenceReset event says
so; an agent whose newest seq is below the held one (an agent without epochs, or a resume point stored
without one) is reset the same way. Samples are delivered with their epoch, so the store's resume point
carries it too. Runs on whichever thread takes the host's events (the sample pump, or the host's own:
one at a time); `last_seq` and `epoch` may be read from any thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from meshdeck_agent.wire_sample import MAX_SEQ, Sample, SampleError, decode_samples_message

from meshdeck.core.text import printable
from meshdeck.remote.errors import BadAnswer
from meshdeck.remote.events import FleetEvent, SamplesReceived, SequenceReset
from meshdeck.remote.peer_log import PeerLog
from meshdeck.remote.sample_batch import batch_from_samples

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
        self._refused = 0  # refused since the last delivery
        self.refused_total = 0
        self._noise = PeerLog(log, host)  # refusals, rate-limited: a poisoned agent cannot flood the log

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
            raw, _ = self._page(page)
            agent_last = page.get("last_seq") or 0
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
            samples = self.decode(raw)
            self.accept(client, samples, backfill=True, fill_gaps=False)
            if not samples or (self._last_seq or 0) >= agent_last:
                return

    def decode(self, raw_samples: list[Any]) -> list[Sample]:
        """The samples of a message that pass `Sample.from_wire`; each refused one is counted and logged."""
        samples = []
        for raw in raw_samples:
            try:
                samples.append(Sample.from_wire(raw))
            except SampleError as exc:
                self._refused += 1
                self.refused_total += 1
                self._noise.report("refused a sample from the agent", str(exc))
        return samples

    def refuse_message(self, problem: str) -> None:
        """A samples event whose envelope is wrong: counted as one refused sample and logged, rate-limited."""
        self._refused += 1
        self.refused_total += 1
        self._noise.report("refused a samples event", problem)

    def _page(self, page: Any) -> tuple[list[Any], int]:
        """A samples.read result's raw samples and dropped count; BadAnswer when its shape is wrong."""
        try:
            raw, dropped = decode_samples_message(page)
            last = page.get("last_seq")
            if last is not None and (isinstance(last, bool) or not isinstance(last, int) or not 0 <= last <= MAX_SEQ):
                raise SampleError(
                    "last_seq", f"must be an integer from 0 to {MAX_SEQ}, got {printable(repr(last), 60)}"
                )
        except SampleError as exc:
            raise BadAnswer(
                f"{self.host}: samples.read answered in a shape the protocol does not allow: {exc}"
            ) from None
        return raw, dropped

    def has_gap(self, samples: list[Sample]) -> bool:
        """Whether `accept` would have to read the agent's ring for them (a seq missing after last_seq)."""
        last = self._last_seq
        if last is None:
            return False
        for seq in sorted(sample.seq for sample in samples):
            if seq > last + 1:
                return True
            last = max(last, seq)
        return False

    def accept(self, client: Caller, samples: list[Sample], backfill: bool, fill_gaps: bool = True) -> None:
        """Deliver samples with seq == last_seq + 1, filling gaps from the ring, skipping repeats.

        `dropped` on a delivery counts the seqs missing right before it that the ring no longer had.
        """
        fresh: list[Sample] = []
        lost = 0
        for sample in sorted(samples, key=lambda s: s.seq):
            seq, last = sample.seq, self._last_seq
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
            raw, _ = self._page(page)
            chunk = sorted((s for s in self.decode(raw) if since < s.seq < next_seq), key=lambda s: s.seq)
            if not chunk:
                break
            with self._lock:
                self._last_seq = chunk[-1].seq
            self._deliver(chunk, chunk[0].seq - since - 1, backfill=True)
            since = chunk[-1].seq
        with self._lock:
            self._last_seq = next_seq - 1
        return next_seq - 1 - since

    def _deliver(self, samples: list[Sample], dropped: int, backfill: bool) -> None:
        refused, self._refused = self._refused, 0
        if samples or dropped or refused:
            batch = batch_from_samples(samples)
            self._sink(SamplesReceived(self.host, batch, dropped, backfill, self._epoch, refused))
