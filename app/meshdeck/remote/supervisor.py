"""One thread per host: connect, keep the samples flowing in order, reconnect after every drop.

Who takes a connected host's events: not this thread. After `samples.subscribe` the process's sample
pump (sample_pump.py, one thread for every host) takes them as the read hub queues them, decodes them and
passes them through the gate to the sink, each host in turns of sample_pump.TURN_S (5 ms; at least one chunk of
DECODE_CHUNK samples), an event half taken carried to the host's next turn. This thread then only wakes for
a stall or a ping that is due, the end of the connection (it takes what is still queued, then reconnects),
or a delivery with a gap: filling a gap means a `samples.read` to the agent, which the pump never waits
for, so the pump hands that event to this thread, which fills the gap, delivers the rest of the event in
order and gives the host back to the pump. Whoever takes a host's events holds its consumer lock: one at
a time, in order.

States (events.HOST_STATES): disconnected → connecting → bootstrapping → connected, plus degraded
(connected but no sample for `stall_after_s`, or 3 of the agent's sampling intervals if longer, or
3 delivery intervals) and failed(reason) for what retrying cannot fix
(unknown/changed host key, auth, no python3, protocol mismatch) until `retry()` is called.
Transient failures are retried with exponential backoff and jitter.

Bringing a connection up (connect, start the agent, hello, inventory) is the expensive part, and a
whole fleet does it at once when the console starts: 278 hosts starting together on a busy machine left
216 of them waiting past the hello timeout. A fleet shares `ConnectSlots`: at most that many hosts bring
a connection up at the same time, the others wait their turn ("connecting", the reason says so) before
their hello timer starts.

Agent versions (DESIGN §3): `attach` itself replaces a daemon of another version on the server. If it
cannot (it exits with protocol.ATTACH_EXIT_VERSION_CONFLICT) the host fails with attach's message, which
names both versions. If the agent answers in another protocol major anyway, the connector is asked to
`reinstall()` (upload the matching agent again) and the connection is retried once at once; a second
mismatch fails the host naming both versions.

A running agent keeps the settings it was started with (connectors.AgentOptions): when its hello says its
Prometheus exporter differs from what this host asks for, the host's reason says so while it is
connected (daemon_settings.exporter_note), instead of the difference passing unseen.

After each (re)connect: hello, `inventory` (decoded; InventoryReceived; a malformed one fails the host
with InventoryInvalid naming the field), then, if a last seq is known, the
gap is paged in with `samples.read {since_seq, limit}` (SamplesReceived backfill=True), then
`samples.subscribe {since_seq}`: the agent sends what is left of the backlog, then live samples.
Every sample passes one gate (sample_gate.py): in seq order, none twice, gaps filled from the ring or
counted as dropped, and a new sequence epoch (a new agent state dir) resets it with a SequenceReset.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from meshdeck_agent.protocol import DaemonSettings, Event
from meshdeck_agent.wire_inventory import Inventory
from meshdeck_agent.wire_sample import SampleError, decode_samples_message, iter_event_samples

from meshdeck.remote.connectors import AgentLink, Connector, say_hello
from meshdeck.remote.daemon_settings import exporter_note
from meshdeck.remote.errors import ConnectionLost, NotConnected, ProtocolMismatch, RemoteError, RpcTimeout
from meshdeck.remote.events import AgentEvent, FleetEvent, HostStateChanged, InventoryReceived, retry_note
from meshdeck.remote.inventory import decode_inventory
from meshdeck.remote.rpc import RpcClient, SamplesLine
from meshdeck.remote.sample_gate import SampleGate
from meshdeck.remote.sample_pump import SamplePump, shared_pump

log = logging.getLogger(__name__)

MIN_WAIT_S = 0.5  # the shortest wait for an event before the stall check runs again
DECODE_CHUNK = 60  # samples decoded, flattened and delivered at once; the pump's turns end between chunks

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


class ConnectSlots:
    """At most `limit` hosts of a fleet bringing a connection up at once (see the module doc). Thread-safe."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"connect slots: the limit must be at least 1, got {limit}")
        self.limit = limit
        self._free = threading.BoundedSemaphore(limit)

    def try_take(self) -> bool:
        """A slot if one is free now, without waiting."""
        return self._free.acquire(blocking=False)

    def take(self, stopped: Callable[[], bool], poll_s: float = 0.25) -> bool:
        """Wait for a slot; False when `stopped()` first."""
        while not self._free.acquire(timeout=poll_s):
            if stopped():
                return False
        return True

    def give_back(self) -> None:
        self._free.release()


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
        connect_slots: ConnectSlots | None = None,
        pump: SamplePump | None = None,
    ) -> None:
        self.name = name
        self.connector = connector
        self.settings = settings or SupervisorSettings()
        self._sink = sink
        self._rng = rng or random.Random()
        self._stop = threading.Event()
        self._gate = SampleGate(
            name,
            sink,
            since_seq=since_seq,
            since_epoch=since_epoch,
            read_page=self.settings.read_page,
            call_timeout_s=self.settings.call_timeout_s,
            stopped=self._stop.is_set,
        )
        self._state = "disconnected"
        self._reason = ""
        self._error: Exception | None = None
        self._client: RpcClient | None = None
        self._link: AgentLink | None = None
        self.inventory: Inventory | None = None
        self.agent_version: str | None = None
        self.daemon: DaemonSettings | None = None  # how the agent runs, from its last hello (None: not said)
        self._note = ""  # how it runs otherwise than asked: the reason shown while connected
        self.details: dict[str, Any] = {}
        self.connects = 0
        self._wake = threading.Event()
        self._last_sample_at = 0.0
        self._stall_after_s = self.settings.stall_after_s
        self._slots = connect_slots
        self._holds_slot = False
        self._pump_of = pump or shared_pump()
        self._consumer = threading.Lock()  # held by whoever takes the live connection's events: pump or thread
        self._live: RpcClient | None = None  # the connection the pump takes events from (None: not subscribed)
        self._handover: Callable[[], None] | None = None  # a delivery with a gap, for this thread to finish
        self._taking: Iterator[list[Any]] | None = None  # the rest of the samples event being taken, in chunks
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
        return self._gate.last_seq

    @property
    def epoch(self) -> str | None:
        """The agent's sequence epoch that `last_seq` belongs to (None before the first hello, or an older agent)."""
        return self._gate.epoch

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

    def _set_state(
        self, state: str, reason: str = "", error: Exception | None = None, retry_at: float | None = None
    ) -> None:
        if state in ("failed", "disconnected"):
            self._give_back_slot()  # a failed host waits for retry() without holding a turn
        if state == self._state and reason == self._reason:
            return
        self._state, self._reason, self._error = state, reason, error
        if reason and state in ("failed", "disconnected", "degraded"):
            log.info("%s: %s: %s", self.name, state, reason)
        self._sink(HostStateChanged(self.name, state, reason, time.time(), error, retry_at))

    def _progress(self, message: str) -> None:
        """A connector's step: a state ("connecting", "bootstrapping"), or what the step does now
        ("uploading the agent (412 KiB)"), shown as the reason beside the busy state."""
        if message in ("connecting", "bootstrapping"):
            self._set_state(message)
        elif self._state in ("connecting", "bootstrapping"):
            self._set_state(self._state, message)

    # -- main loop ---------------------------------------------------------------------------------

    def _run(self) -> None:
        attempt = 0
        reinstalled = False  # one re-upload per protocol mismatch, until a connection works again
        while not self._stop.is_set():
            self._wake.clear()
            self._set_state("connecting")
            if not self._take_slot():
                break  # stopped while waiting for its turn
            try:
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
            except ProtocolMismatch as exc:
                self._close_link()
                reinstall = getattr(self.connector, "reinstall", None)
                if reinstall is not None and not reinstalled:
                    reinstalled = True
                    log.warning("%s: %s; uploading the matching agent again", self.name, exc)
                    reinstall()
                    continue
                self._set_state("failed", str(exc), exc)
                self._wake.wait()
                attempt, reinstalled = 0, False
            except RemoteError as exc:
                was_up = self._state in ("connected", "degraded")
                if was_up:
                    reinstalled = False
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
                self._give_back_slot()
                self._close_link()
        self._give_back_slot()
        self._set_state("disconnected", "stopped")

    def _take_slot(self) -> bool:
        if self._slots is None:
            return True
        if not self._slots.try_take():
            self._set_state("connecting", f"waiting for its turn ({self._slots.limit} hosts connect at a time)")
            if not self._slots.take(self._stop.is_set):
                return False
        self._holds_slot = True
        return True

    def _give_back_slot(self) -> None:
        if self._holds_slot and self._slots is not None:
            self._holds_slot = False
            self._slots.give_back()

    def _wait_backoff(self, attempt: int, reason: str, error: Exception) -> None:
        self._give_back_slot()  # nobody waits behind a host that waits
        delay = self.settings.backoff.delay(attempt, self._rng)
        self._set_state("disconnected", reason + retry_note(delay), error, time.time() + delay)
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
        hello = say_hello(client, link, self.name, self.settings.hello_timeout_s)
        self.agent_version, self.daemon = hello.agent, hello.daemon
        self._note = exporter_note(link.options.prometheus, hello) if link.options is not None else ""
        if self._note:
            log.warning("%s: %s", self.name, self._note)
        self._gate.adopt_epoch(hello.epoch)
        self.inventory = decode_inventory(self.name, client.call("inventory", {}, self.settings.call_timeout_s))
        self._give_back_slot()  # up: the next host's turn
        self._sink(InventoryReceived(self.name, self.inventory))
        self._gate.backfill(client)
        params: dict[str, Any] = {}
        if self._gate.last_seq is not None:
            params["since_seq"] = self._gate.last_seq
        if self.settings.delivery_interval_s is not None:
            params["interval_s"] = self.settings.delivery_interval_s
        subscribed = client.call("samples.subscribe", params, self.settings.call_timeout_s)
        intervals = [self.settings.delivery_interval_s or 0.0]
        if isinstance(subscribed, dict) and isinstance(subscribed.get("interval_s"), (int, float)):
            intervals.append(float(subscribed["interval_s"]))
        self._stall_after_s = max(self.settings.stall_after_s, 3 * max(intervals))
        self.connects += 1
        self._last_sample_at = time.monotonic()
        self._set_state("connected", self._note)
        self._pump(client)

    def _pump(self, client: RpcClient) -> None:
        """Watch the connection while the pump (sample_pump.py) takes its events on its own thread: this
        thread wakes only for a stall or a ping that is due, a gap the pump handed over, or the end."""
        self._handover = None
        self._taking = None
        self._live = client
        client.on_event = lambda: self._wake.set() if client.closed else self._pump_of.schedule(self)
        if client.has_events():
            self._pump_of.schedule(self)
        try:
            last_ping = time.monotonic()
            while not self._stop.is_set():
                if self._handover is not None or client.closed:
                    self._consume_here(client)  # raises the connection's end once its events are taken
                    continue
                now = time.monotonic()
                if now - self._last_sample_at > self._stall_after_s:
                    self._set_state("degraded", f"no samples for {self._stall_after_s:g} s")
                    if now - last_ping > self._stall_after_s:
                        self._ping(client)
                        last_ping = time.monotonic()
                elif self._state == "degraded":
                    self._set_state("connected", self._note)
                due = self._last_sample_at + self._stall_after_s
                if self._state == "degraded":
                    due = last_ping + self._stall_after_s
                self._wake.wait(max(MIN_WAIT_S, due - time.monotonic()))
                self._wake.clear()  # the loop looks at what woke it (flags), so a wake after this is not lost
        finally:
            client.on_event = None
            with self._consumer:
                self._live = None
        raise ConnectionLost(f"{self.name}: stopped")

    def drain(self, until: float) -> bool:
        """The pump's turn (on its thread): take the live connection's events, chunk by chunk, until
        `time.perf_counter()` reaches `until` (at least one chunk); True when more wait, an event half taken
        included. Never calls the agent: a delivery with a gap to fill goes to this host's own thread."""
        if not self._consumer.acquire(blocking=False):
            return False  # this host's thread is taking them: it schedules the pump again when it is done
        client = self._live
        try:
            if client is None or self._handover is not None:
                return False
            while True:
                if self._taking is None:
                    try:
                        event = client.next_event(timeout=0)
                    except ConnectionLost:
                        self._wake.set()  # the end: this host's thread takes over
                        return False
                    if event is None:
                        return False
                    self._start_event(event)
                elif not self._take_chunk(client, on_gap=self._hand_over):
                    return False
                if time.perf_counter() >= until:
                    return self._taking is not None or client.has_events()
        except Exception as exc:  # a bug or a sink that refuses (the writer stopping): what the thread would do
            log.exception("%s: taking its events failed; reconnecting", self.name)
            self._taking = None
            if client is not None:
                client.close(f"taking its events failed: {exc}")  # its thread sees the end and reconnects
            self._wake.set()
            return False
        finally:
            self._consumer.release()

    def _hand_over(self, rest: Callable[[], None]) -> None:
        """The pump met a gap: this host's thread fills it and takes the events after it (in order)."""
        self._handover = rest
        self._wake.set()

    def _consume_here(self, client: RpcClient) -> None:
        """On this host's thread: finish a handed-over delivery (filling its gap from the ring) and an event
        the pump left half taken, then take what is queued until the queue is empty (the pump takes over
        again) or the connection ended."""
        with self._consumer:
            rest, self._handover = self._handover, None
            if rest is not None:
                rest()
            while True:
                while self._taking is not None:
                    self._take_chunk(client, on_gap=None)
                event = client.next_event(timeout=0)  # ConnectionLost once closed and every event taken
                if event is None:
                    break
                self._start_event(event)
        if client.has_events():  # queued while this thread held them: the pump's schedule found them taken
            self._pump_of.schedule(self)

    def _start_event(self, event: Event | SamplesLine) -> None:
        """An agent event to the sink; a samples event becomes the one being taken (`_taking`), read from the
        line one sample at a time when the agent wrote it in its own form, DECODE_CHUNK at a time. The gate
        counts losses from seq gaps, so the event's own `dropped` is not needed. A broken envelope is
        refused (counted, logged), the connection kept."""
        if not (isinstance(event, SamplesLine) or event.event == "samples"):
            self._sink(AgentEvent(self.name, event.event, dict(event.data)))
            return
        self._last_sample_at = time.monotonic()
        if self._state == "degraded":
            self._wake.set()  # this host's thread says it is connected again
        try:
            raw: Iterable[Any] = (
                iter_event_samples(event.line)
                if isinstance(event, SamplesLine)
                else decode_samples_message(event.data)[0]
            )
        except SampleError as exc:
            self._gate.refuse_message(str(exc))
            return
        self._taking = _chunks(raw, DECODE_CHUNK)

    def _take_chunk(self, client: RpcClient, on_gap: Callable[[Callable[[], None]], None] | None) -> bool:
        """The next chunk of the event being taken, through the gate; False when it has a gap to fill and
        `on_gap` (the pump's) takes it with the rest of the event (None: the gap is filled here)."""
        chunks = self._taking
        if chunks is None:
            return True
        try:
            chunk = next(chunks, None)
            if chunk is None:
                self._taking = None
                return True
            samples = self._gate.decode(chunk)
            if on_gap is not None and self._gate.has_gap(samples):
                self._taking = None
                on_gap(functools.partial(self._take_rest, client, samples, chunks))
                return False
            self._gate.accept(client, samples, backfill=False)
        except SampleError as exc:  # the line broke off: what came before it was delivered
            self._taking = None
            self._gate.refuse_message(str(exc))
        return True

    def _take_rest(self, client: RpcClient, samples: list[Any], chunks: Iterator[list[Any]]) -> None:
        """A handed-over delivery, on this host's thread: the chunk with the gap (the gate fills it from the
        agent's ring); the rest of its event is then taken as any half-taken event is (`_consume_here`)."""
        try:
            self._gate.accept(client, samples, backfill=False)
        except SampleError as exc:
            self._gate.refuse_message(str(exc))
            return
        self._taking = chunks

    def _ping(self, client: RpcClient) -> None:
        """While samples stall, ask the agent something cheap: a silent link is dropped and reconnected
        (paramiko's keepalive only sends; this is OpenSSH's ServerAliveCountMax in spirit)."""
        try:
            client.call("agent.time", {}, self._stall_after_s)
        except RpcTimeout:
            raise ConnectionLost(
                f"{self.name}: no samples and no answer from the agent for {self._stall_after_s:g} s; reconnecting"
            ) from None


def _chunks(values: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for value in values:
        chunk.append(value)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
