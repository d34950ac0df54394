"""A stand-in agent that speaks the real wire protocol (meshdeck_agent.protocol) over one socket.

It keeps a seq-numbered ring like the real agent (samples with seq > since_seq; `dropped` when the
ring rolled over; `first_seq`/`last_seq`; the sequence `epoch` in its hello and results when it has
one), answers hello, inventory, samples.subscribe/read and agent.time, and sends `samples` events to a
subscriber. The test decides when samples are taken
(`emit`), so nothing depends on timing. Behaviour switches let tests break it on purpose.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

from meshdeck.remote.connectors import AgentLink, AgentOptions
from meshdeck.remote.events import HostStateChanged, SamplesReceived, SequenceReset
from meshdeck.remote.streams import SocketStream
from meshdeck_agent import protocol


def make_sample(seq: int, ts: float | None = None) -> dict[str, Any]:
    return {
        "seq": seq,
        "ts": ts if ts is not None else time.time(),
        "simulated": True,
        "gpus": [{"index": 0, "memory_used_bytes": 1000 + seq, "memory_total_bytes": 150_000_000_000}],
        "host": {"cpu_pct": 1.0},
    }


class FakeAgent:
    """Serves one connection on `sock` in a thread. Thread-safe `emit`; `close` ends the connection."""

    live: ClassVar[list[FakeAgent]] = []  # every agent not yet closed; tests/unit/remote/conftest.py closes them

    def __init__(
        self,
        sock: socket.socket,
        *,
        ring: list[dict[str, Any]] | None = None,
        capacity: int = 10_000,
        protocol_version: int = protocol.PROTOCOL_VERSION,
        agent_version: str = "fake-1.0",
        inventory: dict[str, Any] | None = None,
        handlers: dict[str, Callable[[dict[str, Any]], Any]] | None = None,
        interval_s: float = 1.0,
        epoch: str | None = None,
        daemon: dict[str, Any] | None = None,
    ) -> None:
        self.sock = sock
        self.epoch = epoch  # None: an agent from before sequence epochs
        self.daemon = daemon  # hello.daemon (how it runs); None: an agent from before that report
        self.ring: list[dict[str, Any]] = ring if ring is not None else []
        self.capacity = capacity
        self.protocol_version = protocol_version
        self.agent_version = agent_version
        self.inventory = inventory or {
            "hostname": "fake",
            "gpus": [{"index": 0, "name": "NVIDIA H200"}],
            "simulated": True,
        }
        self.handlers = handlers or {}
        self.requests: list[protocol.Request] = []
        self.client_hello: protocol.Hello | None = None
        self.subscribed_since: int | None = None
        self.subscribed = threading.Event()
        self.silent_methods: set[str] = set()  # requests to these are never answered
        self.interval_s = interval_s  # the sampling interval reported by samples.subscribe
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._stream_lock = threading.RLock()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="fake-agent")
        FakeAgent.live.append(self)
        self._thread.start()

    # -- test controls ---------------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        with self._lock:
            return self.ring[-1]["seq"] if self.ring else 0

    def emit(self, count: int = 1) -> list[int]:
        """Take `count` samples now; a subscriber gets each as a `samples` event."""
        seqs = []
        for _ in range(count):
            with self._stream_lock:  # a sample is either in a subscribe backlog or sent live, never neither
                with self._lock:
                    sample = make_sample(self.last_seq_unlocked() + 1)
                    self.ring.append(sample)
                    del self.ring[: max(0, len(self.ring) - self.capacity)]
                    live = self.subscribed_since is not None
                seqs.append(sample["seq"])
                if live:
                    self.send(protocol.event("samples", {"samples": [sample], "dropped": 0}))
        return seqs

    def last_seq_unlocked(self) -> int:
        return self.ring[-1]["seq"] if self.ring else 0

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(protocol.encode(message))

    def send_raw(self, data: bytes) -> None:
        with self._send_lock, contextlib.suppress(OSError):
            self.sock.sendall(data)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(timeout=10)
        with contextlib.suppress(ValueError):
            FakeAgent.live.remove(self)

    # -- protocol --------------------------------------------------------------------------------

    def _with_epoch(self, result: dict[str, Any]) -> dict[str, Any]:
        return result if self.epoch is None else {**result, "epoch": self.epoch}

    def _read(self, since_seq: int, limit: int | None) -> dict[str, Any]:
        with self._lock:
            if not self.ring:
                return self._with_epoch({"samples": [], "dropped": 0, "first_seq": 0, "last_seq": 0})
            first, last = self.ring[0]["seq"], self.ring[-1]["seq"]
            chosen = [s for s in self.ring if s["seq"] > since_seq]
            if limit is not None:
                chosen = chosen[:limit]
            dropped = max(0, first - 1 - since_seq)
            return self._with_epoch({"samples": chosen, "dropped": dropped, "first_seq": first, "last_seq": last})

    def _answer(self, req: protocol.Request) -> Any:
        if req.method in self.handlers:
            return self.handlers[req.method](req.params)
        if req.method == "inventory":
            return self.inventory
        if req.method == "agent.time":
            return {"time": time.time()}
        if req.method == "samples.read":
            return self._read(req.params["since_seq"], req.params.get("limit"))
        if req.method == "samples.subscribe":
            since = req.params.get("since_seq")
            with self._stream_lock:
                backlog = self._read(since, None) if since is not None else None
                with self._lock:
                    self.subscribed_since = since if since is not None else self.last_seq_unlocked()
                if backlog and (backlog["samples"] or backlog["dropped"]):
                    self.send(protocol.event("samples", {"samples": backlog["samples"], "dropped": backlog["dropped"]}))
            self.subscribed.set()
            return self._with_epoch({"subscribed": True, "last_seq": self.last_seq, "interval_s": self.interval_s})
        raise protocol.ProtocolError(protocol.UNKNOWN_METHOD, f"unknown method {req.method!r}", req.id)

    def _handle(self, line: bytes) -> None:
        try:
            message = protocol.decode(line)
        except protocol.ProtocolError as exc:
            self.send(protocol.error_reply(exc.request_id, exc.code, exc.message))
            return
        if isinstance(message, protocol.Hello):
            self.client_hello = message
            return
        if not isinstance(message, protocol.Request):
            return
        self.requests.append(message)
        if message.method in self.silent_methods:
            return
        try:
            result = self._answer(message)
        except protocol.ProtocolError as exc:
            self.send(protocol.error_reply(message.id, exc.code, exc.message))
            return
        self.send(protocol.response(message.id, result))

    def _serve(self) -> None:
        hello: dict[str, Any] = {"protocol": self.protocol_version, "agent": self.agent_version}
        if self.epoch is not None:
            hello["epoch"] = self.epoch
        if self.daemon is not None:
            hello["daemon"] = self.daemon
        self.send({"hello": hello})
        buffer = b""
        with contextlib.suppress(OSError):
            while chunk := self.sock.recv(65536):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        self._handle(line)


class FakeConnector:
    """Each open() is a new connection to a FakeAgent over one shared ring (the daemon outlives the link)."""

    def __init__(self, capacity: int = 10_000, **agent_kwargs: Any) -> None:
        self.ring: list[dict[str, Any]] = []
        self.capacity = capacity
        self.agent_kwargs = agent_kwargs
        self.agents: list[FakeAgent] = []
        self.failures: list[Exception] = []  # raised by the next open() calls, in order
        self.opens = 0
        self.reinstalls = 0
        self.reinstall_fixes = True  # reinstall() makes the next agents speak our protocol
        self.steps: list[str] = []  # reported through progress() after "connecting", as SshConnector does
        self.options: AgentOptions | None = None  # what its links say attach was asked for (None: nothing)
        self.lock = threading.Lock()

    @property
    def agent(self) -> FakeAgent:
        return self.agents[-1]

    def describe(self) -> str:
        return "fake"

    def open(self, progress: Callable[[str], None]) -> AgentLink:
        progress("connecting")
        for step in self.steps:
            progress(step)
        with self.lock:
            self.opens += 1
            if self.failures:
                raise self.failures.pop(0)
        client, server = socket.socketpair()
        self.agents.append(FakeAgent(server, ring=self.ring, capacity=self.capacity, **self.agent_kwargs))
        return AgentLink(SocketStream(client), options=self.options)

    def reinstall(self) -> None:
        """The supervisor asks for the agent to be uploaded again (it answered in another protocol)."""
        self.reinstalls += 1
        if self.reinstall_fixes:
            self.agent_kwargs["protocol_version"] = protocol.PROTOCOL_VERSION

    def new_state(self, epoch: str | None) -> None:
        """The daemon restarts on a new state dir: an empty ring (seq from 1) under `epoch`."""
        self.ring = []
        self.agent_kwargs["epoch"] = epoch

    def emit_offline(self, count: int) -> None:
        """Samples taken while no client is connected: they go only into the ring."""
        for _ in range(count):
            seq = (self.ring[-1]["seq"] if self.ring else 0) + 1
            self.ring.append(make_sample(seq))
            del self.ring[: max(0, len(self.ring) - self.capacity)]

    def close_all(self) -> None:
        for agent in self.agents:
            agent.close()


class Recorder:
    """A fleet sink/subscriber that keeps every event and lets a test wait for a condition on them."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self._cond = threading.Condition()

    def __call__(self, event: Any) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 60.0) -> None:
        with self._cond:
            assert self._cond.wait_for(predicate, timeout), f"condition not met; events: {self.events[-10:]}"

    def seqs(self, host: str | None = None) -> list[int]:
        return [
            seq
            for e in self.events
            if isinstance(e, SamplesReceived) and host in (None, e.host)
            for seq in e.batch.seqs
        ]

    def states(self, host: str | None = None) -> list[str]:
        return [e.state for e in self.events if isinstance(e, HostStateChanged) and host in (None, e.host)]

    def samples_events(self) -> list[SamplesReceived]:
        return [e for e in self.events if isinstance(e, SamplesReceived)]

    def resets(self) -> list[SequenceReset]:
        return [e for e in self.events if isinstance(e, SequenceReset)]


def fake_agent_pair(**kwargs: Any) -> tuple[socket.socket, FakeAgent]:
    """(client socket, FakeAgent serving the other end)."""
    client, server = socket.socketpair()
    return client, FakeAgent(server, **kwargs)
