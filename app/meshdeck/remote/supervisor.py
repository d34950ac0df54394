"""One thread per host: connect, keep the samples flowing in order, reconnect after every drop.

States (events.HOST_STATES): disconnected → connecting → bootstrapping → connected, plus degraded
(connected but no sample for `stall_after_s`, or 3 of the agent's sampling intervals if longer, or
3 delivery intervals) and failed(reason) for what retrying cannot fix
(unknown/changed host key, auth, no python3, protocol mismatch) until `retry()` is called.
Transient failures are retried with exponential backoff and jitter.

After each (re)connect: hello, `inventory` (InventoryReceived), then, if a last seq is known, the
gap is paged in with `samples.read {since_seq, limit}` (SamplesReceived backfill=True), then
`samples.subscribe {since_seq}`: the agent sends what is left of the backlog, then live samples.
Every sample passes one gate: seq must be last_seq + 1, an older or repeated seq is dropped as a
duplicate, a jump is filled with `samples.read` first and whatever the ring no longer held is counted
in `dropped`. So the sink sees each host's samples in seq order, none twice.

Seqs are only comparable within one sequence epoch (the agent's hello names it; a new agent state dir
starts seq 1 under a new epoch). When the hello's epoch differs from the one the held last_seq belongs
to, the gate is reset to read the agent's ring from its start and a SequenceReset event says so; an
agent whose newest seq is below the held one (an agent without epochs, or a resume point stored
without one) is reset the same way. Samples are delivered with their epoch, so the store's resume
point carries it too.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from meshdeck.remote.connectors import AgentLink, Connector
from meshdeck.remote.errors import ConnectionLost, NotConnected, RemoteError, RpcTimeout
from meshdeck.remote.events import (
    AgentEvent,
    FleetEvent,
    HostStateChanged,
    InventoryReceived,
    SamplesReceived,
    SequenceReset,
)
from meshdeck.remote.rpc import RpcClient

log = logging.getLogger(__name__)

Sink = Callable[[FleetEvent], None]


@dataclass(frozen=True)
class Backoff:
    """Delay before reconnect attempt n (0-based): min(max_s, initial_s * factor**n), half of it jittered."""

    initial_s: float = 1.0
    factor: float = 2.0
    max_s: float = 30.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        base = min(self.max_s, self.initial_s * self.factor ** min(attempt, 32))
        return base / 2 + rng.uniform(0, base / 2)


@dataclass(frozen=True)
class SupervisorSettings:
    hello_timeout_s: float = 20.0
    call_timeout_s: float = 30.0
    read_page: int = 600  # samples per samples.read page (10 min at 1 Hz)
    stall_after_s: float = 10.0
    delivery_interval_s: float | None = None  # samples.subscribe interval_s: batch deliveries (None: as taken)
    backoff: Backoff = field(default_factory=Backoff)


class HostSupervisor:
    """Keeps one host's agent connection alive and feeds `sink` with its events (see module doc)."""

    def __init__(
        self,
        name: str,
        connector: Connector,
        sink: Sink,
        *,
        since_seq: int | None = None,
        since_epoch: str | None = None,
        settings: SupervisorSettings | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.name = name
        self.connector = connector
        self.settings = settings or SupervisorSettings()
        self._sink = sink
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._last_seq = since_seq
        self._epoch = since_epoch  # the sequence epoch _last_seq belongs to (None: not known)
        self._state = "disconnected"
        self._reason = ""
        self._error: Exception | None = None
        self._client: RpcClient | None = None
        self._link: AgentLink | None = None
        self.inventory: dict[str, Any] | None = None
        self.agent_version: str | None = None
        self.details: dict[str, Any] = {}
        self.connects = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._last_sample_at = 0.0
        self._stall_after_s = self.settings.stall_after_s
        self._thread = threading.Thread(target=self._run, name=f"meshdeck-host-{name}", daemon=True)

    # -- public API --------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        return self._state

    @property
    def reason(self) -> str:
        return self._reason

    @property
    def error(self) -> Exception | None:
        return self._error

    @property
    def last_seq(self) -> int | None:
        with self._lock:
            return self._last_seq

    @property
    def epoch(self) -> str | None:
        """The agent's sequence epoch that `last_seq` belongs to (None before the first hello, or an older agent)."""
        with self._lock:
            return self._epoch

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 15.0) -> None:
        """Close the connection (the agent and its workers keep running) and end the thread."""
        self._stop.set()
        self._wake.set()
        client = self._client
        if client is not None:
            client.close("host supervisor stopped")
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def retry(self) -> None:
        """Reconnect now: after a failed state (e.g. once a host key was accepted) or during a backoff wait."""
        self._wake.set()

    def client(self) -> RpcClient:
        client = self._client
        if client is None or client.closed or self._state not in ("connected", "degraded"):
            raise NotConnected(
                f"{self.name}: not connected ({self._state}{': ' + self._reason if self._reason else ''})"
            )
        return client

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        return self.client().call(method, params, timeout or self.settings.call_timeout_s)

    def call_async(self, method: str, params: dict[str, Any] | None = None) -> Future[Any]:
        return self.client().call_async(method, params)

    # -- state -------------------------------------------------------------------------------------

    def _set_state(self, state: str, reason: str = "", error: Exception | None = None) -> None:
        if state == self._state and reason == self._reason:
            return
        self._state, self._reason, self._error = state, reason, error
        if reason and state in ("failed", "disconnected", "degraded"):
            log.info("%s: %s: %s", self.name, state, reason)
        self._sink(HostStateChanged(self.name, state, reason, time.time(), error))

    def _progress(self, message: str) -> None:
        if message in ("connecting", "bootstrapping"):
            self._set_state(message)

    # -- main loop ---------------------------------------------------------------------------------

    def _run(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self._set_state("connecting")
                link = self.connector.open(self._progress)
            except RemoteError as exc:
                if exc.permanent:
                    self._set_state("failed", str(exc), exc)
                    self._wake.wait()  # until retry() or stop()
                    attempt = 0
                    continue
                self._wait_backoff(attempt, str(exc), exc)
                attempt += 1
                continue
            except Exception as exc:  # a bug or an unexpected library error must not kill the thread
                log.exception("%s: connecting failed unexpectedly", self.name)
                self._wait_backoff(attempt, f"unexpected error: {exc}", exc)
                attempt += 1
                continue
            if self._stop.is_set():  # stopped while connecting
                self._link = link
                self._close_link()
                break
            try:
                self._serve(link)
            except RemoteError as exc:
                was_up = self._state in ("connected", "degraded")
                self._close_link()
                if exc.permanent:
                    self._set_state("failed", str(exc), exc)
                    self._wake.wait()
                    attempt = 0
                    continue
                if was_up:  # it was working: reconnect promptly, back off only if that fails
                    attempt = 0
                if not self._stop.is_set():
                    self._wait_backoff(attempt, str(exc), exc)
                    attempt += 1
            except Exception as exc:
                log.exception("%s: session failed unexpectedly", self.name)
                self._close_link()
                self._wait_backoff(attempt, f"unexpected error: {exc}", exc)
                attempt += 1
            finally:
                self._close_link()
        self._set_state("disconnected", "stopped")

    def _wait_backoff(self, attempt: int, reason: str, error: Exception) -> None:
        delay = self.settings.backoff.delay(attempt, self._rng)
        self._set_state("disconnected", f"{reason} (retrying in {delay:.1f} s)", error)
        self._wake.wait(delay)

    def _close_link(self) -> None:
        client, link = self._client, self._link
        self._client = self._link = None
        if client is not None:
            client.close("connection closed")
        if link is not None:
            try:
                link.close()
            except (OSError, EOFError) as exc:
                log.debug("%s: closing link: %s", self.name, exc)

    def _serve(self, link: AgentLink) -> None:
        self._link = link
        self.details = dict(link.details)
        client = RpcClient(link.stream, host=self.name)
        self._client = client
        hello = client.start(self.settings.hello_timeout_s)
        self.agent_version = hello.agent
        self._adopt_epoch(hello.epoch)
        self.inventory = client.call("inventory", {}, self.settings.call_timeout_s)
        self._sink(InventoryReceived(self.name, self.inventory))
        self._backfill(client)
        params: dict[str, Any] = {}
        if self._last_seq is not None:
            params["since_seq"] = self._last_seq
        if self.settings.delivery_interval_s is not None:
            params["interval_s"] = self.settings.delivery_interval_s
        subscribed = client.call("samples.subscribe", params, self.settings.call_timeout_s)
        intervals = [self.settings.delivery_interval_s or 0.0]
        if isinstance(subscribed, dict) and isinstance(subscribed.get("interval_s"), (int, float)):
            intervals.append(float(subscribed["interval_s"]))
        self._stall_after_s = max(self.settings.stall_after_s, 3 * max(intervals))
        self.connects += 1
        self._last_sample_at = time.monotonic()
        self._set_state("connected")
        self._pump(client)

    def _pump(self, client: RpcClient) -> None:
        last_ping = time.monotonic()
        while not self._stop.is_set():
            event = client.next_event(timeout=0.5)  # raises ConnectionLost when the stream ends
            if event is None:
                now = time.monotonic()
                if now - self._last_sample_at > self._stall_after_s:
                    self._set_state("degraded", f"no samples for {self._stall_after_s:g} s")
                    if now - last_ping > self._stall_after_s:
                        self._ping(client)
                        last_ping = time.monotonic()
                continue
            if event.event == "samples":
                samples = event.data.get("samples") or []
                self._accept(client, [s for s in samples if isinstance(s, dict)], backfill=False)
            else:
                self._sink(AgentEvent(self.name, event.event, dict(event.data)))
        raise ConnectionLost(f"{self.name}: stopped")

    def _ping(self, client: RpcClient) -> None:
        """While samples stall, ask the agent something cheap: a silent link is dropped and reconnected
        (paramiko's keepalive only sends; this is OpenSSH's ServerAliveCountMax in spirit)."""
        try:
            client.call("agent.time", {}, self._stall_after_s)
        except RpcTimeout:
            raise ConnectionLost(
                f"{self.name}: no samples and no answer from the agent for {self._stall_after_s:g} s; reconnecting"
            ) from None

    # -- samples -----------------------------------------------------------------------------------

    def _adopt_epoch(self, epoch: str | None) -> None:
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
        log.warning("%s: %s (held seq %d)", self.name, reason, held)
        self._sink(SequenceReset(self.name, epoch, previous, held, reason, time.time()))

    def _backfill(self, client: RpcClient) -> None:
        """Page in everything after last_seq with samples.read before subscribing."""
        if self._last_seq is None:
            return
        while not self._stop.is_set():
            since = self._last_seq
            page = client.call(
                "samples.read", {"since_seq": since, "limit": self.settings.read_page}, self.settings.call_timeout_s
            )
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
            self._accept(client, samples, backfill=True, fill_gaps=False)
            if not samples or (self._last_seq or 0) >= agent_last:
                return

    def _accept(self, client: RpcClient, samples: list[dict[str, Any]], backfill: bool, fill_gaps: bool = True) -> None:
        """Deliver samples with seq == last_seq + 1, filling gaps from the ring, skipping repeats.

        `dropped` on a delivery counts the seqs missing right before it that the ring no longer had.
        """
        self._last_sample_at = time.monotonic()
        if self._state == "degraded":
            self._set_state("connected")
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

    def _fill_gap(self, client: RpcClient, last: int, next_seq: int) -> int:
        """Deliver seq last+1 .. next_seq-1 from the agent's ring; return how many of them it no longer had."""
        since = last
        while since < next_seq - 1 and not self._stop.is_set():
            limit = min(self.settings.read_page, next_seq - 1 - since)
            page = client.call("samples.read", {"since_seq": since, "limit": limit}, self.settings.call_timeout_s)
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
            self._sink(SamplesReceived(self.name, tuple(samples), dropped, backfill, self._epoch))
