"""One client connection to the daemon: hello, requests in, replies and events out.

Two threads per connection. The reader splits the byte stream into lines (at most MAX_LINE_BYTES;
a longer one is answered `line_too_long` and skipped up to its newline), answers every bad line with an
error reply and keeps going. The writer owns the socket's sending side: it sends queued replies and
events, and, while the client is subscribed, streams samples from the ring after the client's cursor.
The cursor only moves when samples were actually sent, so a slow client never loses samples silently:
it falls behind, and if the ring rolls past its cursor the next `samples` event says how many were
`dropped`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Callable, Deque, Iterator, Optional, Tuple

from . import __version__, protocol
from .lograte import LogBudget

if TYPE_CHECKING:  # the daemon owns its sessions; it imports this module
    from .daemon import Daemon

log = logging.getLogger(__name__)

OUTBOX_LIMIT = 4096  # queued replies before the reader stops reading (back-pressure)
EVENT_BACKLOG_LIMIT = 20000  # queued events before the oldest are discarded
SAMPLES_EVENT_BYTES = 2 * 1024 * 1024
IN_FLIGHT_WAIT_S = 120.0  # checks.versions may take a minute; a stop waits out its grace


class RawResult:
    """A result already encoded as JSON bytes (spliced into the reply without re-encoding)."""

    def __init__(self, body: bytes) -> None:
        self.body = body


def iter_lines(recv: Callable[[int], bytes], max_line: int = protocol.MAX_LINE_BYTES) -> Iterator[Tuple[str, bytes]]:
    """("line", bytes without newline), ("too_long", b"") once per oversized line, ("truncated", rest) at EOF."""
    buffer = bytearray()
    discarding = False
    while True:
        chunk = recv(65536)
        if not chunk:
            if buffer and not discarding:
                yield "truncated", bytes(buffer)
            return
        buffer += chunk
        while True:
            newline = buffer.find(b"\n")
            if newline < 0:
                if not discarding and len(buffer) >= max_line:
                    discarding = True
                    yield "too_long", b""
                if discarding:
                    buffer.clear()
                break
            line = bytes(buffer[:newline])
            del buffer[: newline + 1]
            if discarding:
                discarding = False
                continue
            if newline + 1 > max_line:
                yield "too_long", b""
                continue
            yield "line", line


class Session:
    def __init__(self, sock: socket.socket, daemon: Daemon, name: str = "client") -> None:
        self.sock = sock
        self.daemon = daemon
        self.name = name
        self.hello_done = False
        self.peer_agent: Optional[str] = None
        self._cond = threading.Condition()
        self._replies: Deque[bytes] = deque()
        self._events: Deque[bytes] = deque()
        self._closed = False
        self._close_after_flush = False
        self.subscribed = False
        self.cursor = 0
        self.interval_s = 0.0
        self._next_delivery = 0.0
        self.bad_lines = 0
        self.problems = LogBudget(log, name)  # what this client does wrong, logged a few times, then counted
        self.in_flight = 0  # requests being answered on the daemon's pool
        self._writer = threading.Thread(target=self._write_loop, name="session-writer", daemon=True)

    # -- queueing --------------------------------------------------------------------------------

    def reply(self, data: bytes) -> None:
        with self._cond:
            while len(self._replies) >= OUTBOX_LIMIT and not self._closed:
                self._cond.wait(0.5)
            self._replies.append(data)
            self._cond.notify_all()

    def post_event(self, data: bytes) -> None:
        if not self.hello_done:
            return
        with self._cond:
            if len(self._events) >= EVENT_BACKLOG_LIMIT:
                self._events.popleft()
            self._events.append(data)
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def subscribe(self, since_seq: Optional[int], interval_s: float, response: bytes) -> None:
        with self._cond:
            self._replies.append(response)
            self.cursor = since_seq if since_seq is not None else self.daemon.ring.last_seq
            self.interval_s = interval_s
            self._next_delivery = 0.0
            self.subscribed = True
            self._cond.notify_all()

    def unsubscribe(self) -> None:
        with self._cond:
            self.subscribed = False

    def close_after_flush(self) -> None:
        with self._cond:
            self._close_after_flush = True
            self._cond.notify_all()

    # -- reading ---------------------------------------------------------------------------------

    def run(self) -> None:
        self._writer.start()
        hello = protocol.hello(__version__, epoch=self.daemon.seqs.epoch, daemon=self.daemon.settings())
        self.reply(protocol.encode(hello))
        try:
            for kind, line in iter_lines(self._recv):
                if self._closed:
                    break
                if kind == "too_long":
                    self.refuse(
                        None, protocol.LINE_TOO_LONG, "line exceeds the %d-byte limit" % protocol.MAX_LINE_BYTES
                    )
                elif kind == "truncated":
                    self.refuse(None, protocol.PARSE_ERROR, "truncated line at end of stream (no newline)")
                else:
                    self._handle_line(line)
        except OSError as exc:
            log.debug("session %s: read failed: %s", self.name, exc)
        finally:
            self._await_in_flight(IN_FLIGHT_WAIT_S)
            self.close_after_flush()
            self._writer.join(timeout=10.0)
            self._close()

    def begin_request(self) -> None:
        with self._cond:
            self.in_flight += 1

    def end_request(self) -> None:
        with self._cond:
            self.in_flight -= 1
            self._cond.notify_all()

    def _await_in_flight(self, timeout: float) -> None:
        """A client that half-closes after its last request still gets the replies it is owed."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.in_flight > 0 and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._cond.wait(min(remaining, 0.5))

    def _recv(self, size: int) -> bytes:
        try:
            return self.sock.recv(size)
        except OSError:
            return b""

    def refuse(self, request_id: Optional[int], code: str, message: str) -> None:
        """Answer a bad line or request with an error reply (and log it, within this client's budget)."""
        self.bad_lines += 1
        reply = protocol.error_reply(request_id, code, message)
        self.problems.log(logging.WARNING, "bad line (%s): %s", code, protocol.excerpt(reply["error"]["message"], 300))
        self.reply(protocol.encode(reply))

    def _handle_line(self, line: bytes) -> None:
        try:
            message = protocol.decode(line)
        except protocol.ProtocolError as exc:
            self.refuse(exc.request_id, exc.code, exc.message)
            return
        if not self.hello_done:
            if not isinstance(message, protocol.Hello):
                request_id = message.id if isinstance(message, protocol.Request) else None
                self.refuse(
                    request_id,
                    protocol.BAD_REQUEST,
                    "send a hello first: " + protocol.encode(protocol.hello("x")).decode().strip(),
                )
                return
            try:
                protocol.check_hello(message)
            except protocol.VersionMismatch as exc:
                self.refuse(None, protocol.BAD_REQUEST, str(exc))
                self.close_after_flush()
                self._closed_reading()
                return
            self.hello_done = True
            self.peer_agent = message.agent
            return
        if isinstance(message, protocol.Request):
            self.daemon.dispatch(self, message)
        elif isinstance(message, protocol.Hello):
            self.refuse(None, protocol.BAD_REQUEST, "hello already received on this connection")
        else:
            request_id = getattr(message, "id", None)
            self.refuse(
                request_id, protocol.BAD_REQUEST, "the agent accepts only requests, got %s" % type(message).__name__
            )

    def _closed_reading(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RD)

    # -- writing ---------------------------------------------------------------------------------

    def _next_samples(self) -> Optional[bytes]:
        """A `samples` event for what the ring holds after the cursor, when due; None otherwise."""
        if not self.subscribed:
            return None
        ring = self.daemon.ring
        if ring.last_seq <= self.cursor:
            return None
        now = time.monotonic()
        if now < self._next_delivery:
            return None
        read = ring.read(self.cursor, max_bytes=SAMPLES_EVENT_BYTES)
        if not read.chunks and not read.dropped:
            return None
        self.cursor = read.next_since
        if self.interval_s > 0:
            self._next_delivery = now + self.interval_s
        body = b'{"event":"samples","data":{"samples":' + read.samples_json() + b',"dropped":%d}}\n' % read.dropped
        return body

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    if self._replies or self._events:
                        break
                    pending = self._next_samples()
                    if pending is not None:
                        self._events.append(pending)
                        break
                    if self._close_after_flush:
                        return
                    timeout = None
                    if self.subscribed and self._next_delivery:
                        timeout = max(0.01, self._next_delivery - time.monotonic())
                    self._cond.wait(timeout if timeout is not None else 1.0)
                batch = list(self._replies) + list(self._events)
                self._replies.clear()
                self._events.clear()
                self._cond.notify_all()
            try:
                self.sock.sendall(b"".join(batch))
            except OSError as exc:
                log.debug("session %s: write failed: %s", self.name, exc)
                with self._cond:
                    self._closed = True
                    self._cond.notify_all()
                self._closed_reading()
                return

    def _close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        with contextlib.suppress(OSError):
            self.sock.close()
        self.problems.flush()
        self.daemon.session_ended(self)
