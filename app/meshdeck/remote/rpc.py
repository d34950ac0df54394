"""The client side of the agent protocol over any byte stream (SSH channel, local pipe, socketpair).

    client = RpcClient(stream, host="gpu-a")
    hello = client.start(timeout=15)            # hellos both ways; another protocol major is refused
    gpus = client.call("inventory", {}, timeout=30)["gpus"]
    future = client.call_async("workers.list")  # concurrent.futures.Future; add_done_callback for a callback
    event = client.next_event(timeout=1.0)      # protocol.Event (samples, worker, log, alert) or None

The reader parses lines, completes pending requests and puts notifications on a queue bounded by
count and by the bytes of the lines they came from (`max_event_bytes`: a hostile agent's 4 MiB lines
cannot pile up). When that queue is full the reader stops reading this connection until the consumer
takes an event — pipe, TCP or SSH flow control then holds the agent back, whose ring buffer keeps the
samples — so nothing is dropped here; answers to calls that came behind those events wait with them.
Requests in flight are bounded too. A malformed line from the agent is logged and skipped; end of
stream fails every pending request with ConnectionLost.

Who reads: a stream that can be polled (`watch_with`: local pipes, sockets, SSH channels) is read by the
process's one read hub thread (read_hub.py) for every host at once; any other stream by a reader
thread of its own. Futures' callbacks and `on_event` (called once an event is queued, and at the end:
the host supervisor uses it to schedule the sample pump) run on the reader (the hub: every host's): keep
them short and never block in them.

What the agent says is bounded before anyone sees it: its version (AGENT_VERSION_LIMIT characters) and
error messages (ERROR_TEXT_LIMIT) are escaped and cut (core.text.printable); complaints about its
lines go through a rate-limited PeerLog, so a garbage flood costs a few log lines a minute.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import Any

from meshdeck_agent import protocol
from meshdeck_agent.wire_sample import SAMPLES_EVENT_PREFIX

from meshdeck import __version__
from meshdeck.core.text import printable
from meshdeck.remote.errors import ConnectionLost, ProtocolMismatch, RpcError, RpcTimeout
from meshdeck.remote.peer_log import PeerLog
from meshdeck.remote.read_hub import ReadHub, Watch, shared_hub
from meshdeck.remote.streams import ByteStream

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0
EVENT_QUEUE_SIZE = 4096
MAX_EVENT_BYTES = 2 * 1024 * 1024  # an agent's largest samples event; a longer line is still taken alone
MAX_IN_FLIGHT = 256
CLOSED_CHECK_S = 5.0  # the longest a wait in next_event goes without looking whether the client closed
_READ_SIZE = 65536
AGENT_VERSION_LIMIT = 64
ERROR_TEXT_LIMIT = 1000
ERROR_CODE_LIMIT = 40
_END: Any = object()  # queued after the last event once the connection is closed
_EVENT_PREFIX = b'{"event":'  # how the agent writes every event (protocol.encode): queued undecoded


@dataclass(frozen=True)
class SamplesLine:
    """A `samples` event line as the agent writes it (`wire_sample.SAMPLES_EVENT_PREFIX`), still bytes: its
    consumer reads the samples one at a time (`wire_sample.iter_event_samples`)."""

    line: bytes


class RpcClient:
    """Requests, responses and notifications for one agent connection. Thread-safe."""

    def __init__(
        self,
        stream: ByteStream,
        host: str,
        *,
        event_queue_size: int = EVENT_QUEUE_SIZE,
        max_event_bytes: int = MAX_EVENT_BYTES,
        max_in_flight: int = MAX_IN_FLIGHT,
        client_version: str = __version__,
        hub: ReadHub | None = None,
    ) -> None:
        """`hub`: the read hub for a stream that can be polled (default: the process's shared hub)."""
        self.stream = stream
        self.host = host
        self.client_version = client_version
        self.agent_version: str | None = None
        self._events: queue.Queue[Any] = queue.Queue(maxsize=event_queue_size)  # (Event, line bytes) or _END
        self._max_event_bytes = max_event_bytes
        self._queued_bytes = 0
        self._room = threading.Condition()
        self._pending: dict[int, tuple[str, Future[Any]]] = {}
        self._pending_lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._in_flight = threading.BoundedSemaphore(max_in_flight)
        self._ids = itertools.count(1)
        self._hello: Future[protocol.Hello] = Future()
        self._closed = threading.Event()
        self._close_reason: ConnectionLost | None = None
        self._noise = PeerLog(log, host)
        self._buffer = bytearray()  # bytes read and not yet dispatched (a partial line, or lines held back)
        self._paused = False  # an event found the queue full: reading waits for the consumer (under _room)
        self._feed_lock = threading.Lock()  # one feeder at a time: the reader, or a consumer resuming it
        self._watch: Watch | None = None
        self._hub = (hub or shared_hub()) if callable(getattr(stream, "watch_with", None)) else None
        self._reader = threading.Thread(target=self._read_loop, name=f"meshdeck-rpc-{host}", daemon=True)
        # called (on the reader: the hub) after an event was queued, and once closed; must not block
        self.on_event: Callable[[], None] | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 15.0) -> protocol.Hello:
        """Send our hello, start reading, wait for the agent's hello. Raises ProtocolMismatch / ConnectionLost."""
        self._send(protocol.hello(self.client_version))
        if self._hub is not None:
            watch_with = self.stream.watch_with  # type: ignore[attr-defined]
            self._watch = watch_with(self._hub, self._on_readable, self._on_stream_closed)
        else:
            self._reader.start()
        try:
            hello = self._hello.result(timeout)
        except FutureTimeout:
            self.close(f"no hello from the agent within {timeout:g} s")
            raise ConnectionLost(f"{self.host}: the agent did not say hello within {timeout:g} s") from None
        except (ConnectionLost, ProtocolMismatch):
            self.close()
            raise
        self.agent_version = hello.agent
        return hello

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def close_reason(self) -> str:
        return str(self._close_reason) if self._close_reason else ""

    def close(self, reason: str = "closed by the client") -> None:
        """Close the stream; pending requests fail with ConnectionLost. Idempotent."""
        self._fail_all(ConnectionLost(f"{self.host}: {reason}"))
        if self._watch is not None:
            self._watch.cancel()  # waits for a read in progress: the stream's descriptors are closed next
        try:
            self.stream.close()
        except (OSError, EOFError) as exc:
            log.debug("%s: closing stream: %s", self.host, exc)
        if self._reader.is_alive() and threading.current_thread() is not self._reader:
            self._reader.join(timeout=10)

    def __enter__(self) -> RpcClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests --------------------------------------------------------------------------------

    def call_async(self, method: str, params: dict[str, Any] | None = None) -> Future[Any]:
        """Send a request; the Future resolves to the result or fails with RpcError / ConnectionLost."""
        if self._closed.is_set():
            raise ConnectionLost(f"{self.host}: not connected ({self.close_reason or 'closed'})")
        if not self._in_flight.acquire(timeout=DEFAULT_TIMEOUT_S):
            raise RpcTimeout(f"{self.host}: {MAX_IN_FLIGHT} requests already in flight; {method} not sent")
        future: Future[Any] = Future()
        future.add_done_callback(lambda _: self._in_flight.release())
        request_id = next(self._ids)
        with self._pending_lock:
            if self._close_reason is not None:
                future.set_exception(self._close_reason)
                return future
            self._pending[request_id] = (method, future)
        try:
            self._send(protocol.request(request_id, method, params or {}))
        except protocol.ProtocolError as exc:  # our own request too large to send
            self._resolve(request_id, error=RpcError(self.host, method, exc.code, exc.message))
        except (OSError, EOFError) as exc:
            self.close(f"send failed: {exc}")
        return future

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> Any:
        """Send a request and wait for its result. Raises RpcError, RpcTimeout or ConnectionLost."""
        future = self.call_async(method, params)
        try:
            return future.result(timeout)
        except FutureTimeout:
            with self._pending_lock:
                self._pending = {k: v for k, v in self._pending.items() if v[1] is not future}
            future.cancel()
            raise RpcTimeout(f"{self.host}: no answer to {method} within {timeout:g} s") from None

    # -- notifications ---------------------------------------------------------------------------

    def has_events(self) -> bool:
        """Something is queued for `next_event` (an event, or the end once closed)."""
        return not self._events.empty()

    def _notify(self) -> None:
        callback = self.on_event
        if callback is not None:
            callback()

    def next_event(self, timeout: float | None = None) -> protocol.Event | SamplesLine | None:
        """The next notification, None if none came within `timeout`; ConnectionLost once closed and drained.
        A malformed event line is logged (rate-limited) and skipped."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            # close() queues an end marker that wakes this wait; the slice is only a safety net
            wait = CLOSED_CHECK_S if deadline is None else max(0.0, min(CLOSED_CHECK_S, deadline - time.monotonic()))
            try:
                item = self._events.get(timeout=wait) if wait > 0 else self._events.get_nowait()
            except queue.Empty:
                if self._closed.is_set() and self._events.empty():
                    raise (self._close_reason or ConnectionLost(f"{self.host}: closed")) from None
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                continue
            if item is _END:
                with contextlib.suppress(queue.Full):
                    self._events.put_nowait(_END)  # for the next caller
                raise self._close_reason or ConnectionLost(f"{self.host}: closed")
            line, size = item
            with self._room:
                self._queued_bytes -= size
                resume, self._paused = self._paused, False
                self._room.notify_all()
            if resume and self._watch is not None:
                self._resume_feed()
            event = self._event_of(line)
            if event is not None:
                return event

    def _event_of(self, line: bytes) -> protocol.Event | SamplesLine | None:
        """A queued event line, decoded here (on the consumer's thread): queued lines stay compact bytes.
        A samples event as the agent writes it is left to its consumer to read sample by sample."""
        if line.startswith(SAMPLES_EVENT_PREFIX):
            return SamplesLine(line)
        try:
            message = protocol.decode(line)
        except protocol.ProtocolError as exc:
            self._noise.report("skipping malformed line from the agent", exc.message)
            return None
        if not isinstance(message, protocol.Event):
            self._noise.report("unexpected message from the agent ignored", type(message).__name__)
            return None
        return message

    # -- internals -------------------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        line = protocol.encode(message)
        with self._send_lock:
            self.stream.sendall(line)

    def _resolve(self, request_id: int, result: Any = None, error: Exception | None = None) -> None:
        with self._pending_lock:
            entry = self._pending.pop(request_id, None)
        if entry is None:
            log.debug("%s: answer to request %d that is no longer waited for", self.host, request_id)
            return
        future = entry[1]
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def _fail_all(self, reason: ConnectionLost) -> None:
        with self._pending_lock:
            if self._close_reason is None:
                self._close_reason = reason
            pending, self._pending = self._pending, {}
        self._closed.set()
        with contextlib.suppress(queue.Full):  # wake a consumer blocked in next_event
            self._events.put_nowait(_END)
        self._notify()
        if not self._hello.done():
            self._hello.set_exception(self._close_reason)
        for _, future in pending.values():
            if not future.done():
                future.set_exception(self._close_reason)

    def _queue_event(self, line: bytes) -> bool:
        """Queue an event's line for `next_event`, bounded in bytes and in count. False when there is no
        room: reading pauses (`_paused`) until the consumer takes one, and the line is offered again —
        never dropped (the agent's ring holds what waits behind)."""
        size = len(line)
        with self._room:
            if self._closed.is_set():
                return True  # nobody will read it
            if self._queued_bytes and self._queued_bytes + size > self._max_event_bytes:
                self._paused = True
                return False
            try:
                self._events.put_nowait((line, size))
            except queue.Full:
                self._paused = True
                return False
            self._queued_bytes += size
        self._notify()
        return True

    def _handle(self, message: protocol.Message, line: bytes = b"") -> bool:
        """Act on one message; False only for an event the queue has no room for yet."""
        if not self._hello.done():
            if isinstance(message, protocol.Hello):
                message = replace(message, agent=printable(message.agent, AGENT_VERSION_LIMIT))
            try:
                self._hello.set_result(protocol.check_hello(message))
            except protocol.VersionMismatch as exc:
                self._hello.set_exception(ProtocolMismatch(f"{self.host}: {printable(str(exc), ERROR_TEXT_LIMIT)}"))
            except protocol.ProtocolError as exc:
                reason = printable(str(exc), ERROR_TEXT_LIMIT)
                self._hello.set_exception(ConnectionLost(f"{self.host}: bad first line from the agent: {reason}"))
            return True
        if isinstance(message, protocol.Response):
            self._resolve(message.id, result=message.result)
        elif isinstance(message, protocol.ErrorReply):
            code = printable(message.code, ERROR_CODE_LIMIT)
            if message.id is None:
                self._noise.report(f"agent reported {code}", message.message)
                return True
            with self._pending_lock:
                method = self._pending.get(message.id, ("?", None))[0]
            text = printable(message.message, ERROR_TEXT_LIMIT)
            self._resolve(message.id, error=RpcError(self.host, method, code, text))
        elif isinstance(message, protocol.Event):  # an event line not in the agent's own key order
            return self._queue_event(line)
        else:
            self._noise.report(f"unexpected {type(message).__name__} from the agent ignored")
        return True

    def _take_lines(self) -> bool:
        """Dispatch every complete line in the buffer, in order. False when an event found the queue full:
        it and the lines after it stay in the buffer for `_resume_feed`. Raises _LineTooLong."""
        buffer, start = self._buffer, 0
        try:
            while (newline := buffer.find(b"\n", start)) >= 0:
                line = bytes(buffer[start:newline])
                if line.strip() and not self._dispatch_line(line):
                    return False
                start = newline + 1
        finally:
            del buffer[:start]
        if len(buffer) > protocol.MAX_LINE_BYTES:
            raise _LineTooLong(f"the agent sent a line over {protocol.MAX_LINE_BYTES} bytes")
        return True

    def _ended(self, reason: str) -> None:
        if self._watch is not None:
            self._watch.cancel()  # nothing more to read: the descriptor may be closed and reused
        self._noise.flush()
        tail = getattr(getattr(self.stream, "stderr", None), "tail", lambda: "")()
        self._fail_all(ConnectionLost(f"{self.host}: {reason}" + (f" (agent stderr: {tail})" if tail else "")))

    # -- reading on the hub ----------------------------------------------------------------------

    def _on_readable(self) -> bool:
        """The hub's call: read what the stream has (never blocking) and dispatch it; False pauses the watch."""
        with self._feed_lock:
            if self._closed.is_set():
                return False
            try:
                chunk = self.stream.recv_nowait(_READ_SIZE)  # type: ignore[attr-defined]
                if chunk is None:  # nothing after all
                    return True
                if not chunk:
                    self._ended("the agent closed the connection")
                    return False
                self._buffer += chunk
                return self._take_lines()
            except _LineTooLong as exc:
                self._ended(str(exc))
            except (OSError, EOFError) as exc:
                self._ended(f"connection lost: {exc or type(exc).__name__}")
            except Exception:  # a bug here must not leave callers waiting forever
                log.exception("%s: RPC reader failed", self.host)
                self._ended("internal error in the RPC reader (see log)")
            return False

    def _on_stream_closed(self) -> None:
        """The stream was closed under the watch (by whoever holds the link): the connection is over."""
        self._ended("connection closed")

    def _resume_feed(self) -> None:
        """The consumer made room: dispatch the lines held back, then read again (on the consumer's thread)."""
        watch = self._watch
        with self._feed_lock:
            if self._closed.is_set() or watch is None:
                return
            try:
                if not self._take_lines():
                    return  # full again: the next event taken resumes
            except _LineTooLong as exc:
                self._ended(str(exc))
                return
        watch.resume()

    # -- reading on a thread of its own ----------------------------------------------------------

    def _read_loop(self) -> None:
        reason = "the agent closed the connection"
        try:
            while not self._closed.is_set():
                with self._feed_lock:
                    paused = not self._take_lines()
                if paused:
                    with self._room:
                        while self._paused and not self._closed.is_set():
                            self._room.wait(0.5)
                    continue
                chunk = self.stream.recv(_READ_SIZE)
                if not chunk:
                    break
                self._buffer += chunk
        except _LineTooLong as exc:
            reason = str(exc)
        except (OSError, EOFError) as exc:
            reason = f"connection lost: {exc or type(exc).__name__}"
        except Exception:  # a bug here must not leave callers waiting forever
            log.exception("%s: RPC reader failed", self.host)
            reason = "internal error in the RPC reader (see log)"
        self._ended(reason)

    def _dispatch_line(self, line: bytes) -> bool:
        """Act on one line; False only for an event the queue has no room for yet (offered again later)."""
        if line.startswith(_EVENT_PREFIX) and self._hello.done():
            return self._queue_event(line)  # decoded by next_event: a flood of events waits here as bytes
        try:
            message = protocol.decode(line)
        except protocol.ProtocolError as exc:
            if not self._hello.done():
                reason = printable(exc.message, ERROR_TEXT_LIMIT)
                self._hello.set_exception(
                    ConnectionLost(f"{self.host}: the agent's first line is not a hello: {reason}")
                )
                return True
            self._noise.report("skipping malformed line from the agent", exc.message)
            return True
        return self._handle(message, line)


class _LineTooLong(Exception):
    """The agent's line passed protocol.MAX_LINE_BYTES without a newline: the connection is dropped."""
