"""Byte streams the RPC client runs over: an SSH exec channel, a subprocess's pipes, a socket.

Each offers `recv(n)` (b"" at end of stream), `sendall(data)` and `close()`, and `close()` must
wake a thread blocked in `recv` — which a bare socket or file does not do on Linux, hence these
small adapters. A stream that can be polled (a pipe, a socket) also offers `watch_with(hub, on_readable,
on_closed)` and `recv_nowait(n)` (None: nothing yet): the RPC client is then read by the process's one
read hub thread (read_hub.py) instead of a thread per host, and `close()` cancels the watch before
closing the descriptor, then tells the client (`on_closed`). The agent's stderr (attach errors, tracebacks) is drained as it arrives, logged
under the host's name (at most STDERR_BURST lines a minute, then a count: see peer_log.py), and the
last lines are kept for error messages, each escaped and cut to STDERR_LINE_LIMIT characters.
"""

from __future__ import annotations

import collections
import contextlib
import io
import logging
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Protocol

import paramiko

from meshdeck.core.text import printable
from meshdeck.remote.peer_log import PeerLog
from meshdeck.remote.read_hub import ReadHub, Watch

log = logging.getLogger(__name__)

STDERR_TAIL_LINES = 20
STDERR_LINE_LIMIT = 500
STDERR_BURST = 50  # per minute: enough for a traceback


class ByteStream(Protocol):
    def recv(self, size: int) -> bytes: ...

    def sendall(self, data: bytes) -> None: ...

    def close(self) -> None: ...


class _StderrTail:
    """Splits stderr bytes into lines, logs each, keeps the last few for error messages."""

    def __init__(self, host: str) -> None:
        self.host = host
        self._partial = b""
        self._lines: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._lock = threading.Lock()
        self._noise = PeerLog(log, host, logging.INFO, burst=STDERR_BURST)

    def feed(self, data: bytes) -> None:
        with self._lock:
            *lines, self._partial = (self._partial + data).split(b"\n")
            if len(self._partial) > 8192:
                lines.append(self._partial)
                self._partial = b""
            for raw in lines:
                text = printable(raw.decode("utf-8", "replace").rstrip(), STDERR_LINE_LIMIT)
                if text:
                    self._lines.append(text)
                    self._noise.report("agent stderr", text)

    def tail(self) -> str:
        with self._lock:
            return " | ".join(self._lines)

    def last(self) -> str:
        with self._lock:
            return self._lines[-1] if self._lines else ""


def attach_outcome(stream: object, wait_s: float = 3.0) -> tuple[int | None, str]:
    """Once a stream to `attach` ended: its exit status (None when not known within `wait_s`, or a stream
    with no process behind it) and its last stderr line."""
    exit_status = getattr(stream, "exit_status", None)
    status = None
    if exit_status is not None:
        deadline = time.monotonic() + wait_s
        while (status := exit_status()) is None and time.monotonic() < deadline:
            time.sleep(0.05)
    stderr = getattr(stream, "stderr", None)
    return status, stderr.last() if isinstance(stderr, _StderrTail) else ""


class ChannelStream:
    """An SSH exec channel running `python3 agent.pyz attach`; stderr drained on each read.

    Polled through the channel's `fileno()` (paramiko sets it when stdout or stderr has bytes, and for good
    at the channel's end), so the read hub reads it: per host only paramiko's transport thread remains."""

    def __init__(self, channel: paramiko.Channel, host: str) -> None:
        self.channel = channel
        self.stderr = _StderrTail(host)
        self._watch: Watch | None = None
        self._on_closed: Callable[[], None] | None = None
        channel.settimeout(0.25)

    def watch_with(self, hub: ReadHub, on_readable: Callable[[], bool], on_closed: Callable[[], None]) -> Watch:
        """Have `hub` call `on_readable` when the channel has bytes (read them with `recv_nowait`)."""
        self._watch = hub.watch(self.channel.fileno(), on_readable)
        self._on_closed = on_closed
        return self._watch

    def recv_nowait(self, size: int) -> bytes | None:
        """What stdout has now: None when nothing (yet), b"" at the channel's end (stderr read first)."""
        self._drain_stderr()
        if self.channel.recv_ready():
            return self.channel.recv(size)
        if self.channel.closed or self.channel.eof_received:
            self._drain_stderr()
            return b""
        return None

    def _drain_stderr(self) -> None:
        while self.channel.recv_stderr_ready():
            self.stderr.feed(self.channel.recv_stderr(65536))

    def recv(self, size: int) -> bytes:
        while True:
            self._drain_stderr()
            try:
                data = self.channel.recv(size)
            except TimeoutError:
                if self.channel.closed or (self.channel.eof_received and not self.channel.recv_ready()):
                    self._drain_stderr()
                    return b""
                continue
            if not data:
                self._drain_stderr()
            return data

    def sendall(self, data: bytes) -> None:
        self.channel.sendall(data)

    def exit_status(self) -> int | None:
        return self.channel.exit_status if self.channel.exit_status_ready() else None

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()  # waits for a read in progress before the channel (and its pipe) goes
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):  # the transport may be gone already
            self.channel.close()
        if self._on_closed is not None:
            self._on_closed()


class PipeStream:
    """The agent as a local subprocess: its stdin/stdout carry the protocol, stderr is logged.

    With a read hub (the fleet's local agents) stdout is read by the hub once the RPC client watches it
    and stderr is drained by the hub as well: no thread of its own. Without one, stdout is read by
    `recv` and a small thread drains stderr."""

    def __init__(self, process: subprocess.Popen[bytes], host: str, hub: ReadHub | None = None) -> None:
        if process.stdin is None or process.stdout is None or process.stderr is None:
            raise ValueError("PipeStream needs a process started with stdin, stdout and stderr pipes")
        if not isinstance(process.stdout, io.BufferedReader) or not isinstance(process.stderr, io.BufferedReader):
            raise ValueError("PipeStream reads with read1: start the process with buffered pipes (bufsize != 0)")
        self.process = process
        self.stderr = _StderrTail(host)
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._stderr = process.stderr
        self._send_lock = threading.Lock()
        self._hub = hub
        self._watches: list[Watch] = []
        self._on_closed: Callable[[], None] | None = None
        self._stderr_thread: threading.Thread | None = None
        if hub is not None:
            os.set_blocking(self._stderr.fileno(), False)
            self._watches.append(hub.watch(self._stderr.fileno(), self._read_stderr))
        else:
            self._stderr_thread = threading.Thread(
                target=self._pump_stderr, name=f"meshdeck-stderr-{host}", daemon=True
            )
            self._stderr_thread.start()

    def _pump_stderr(self) -> None:
        with contextlib.suppress(OSError, ValueError):  # ValueError: closed by close()
            while chunk := self._stderr.read1(65536):
                self.stderr.feed(chunk)

    def _read_stderr(self) -> bool:
        """The hub's call: what stderr has now (never blocking); False at its end."""
        try:
            while chunk := os.read(self._stderr.fileno(), 65536):
                self.stderr.feed(chunk)
        except BlockingIOError:
            return True
        except (OSError, ValueError):
            pass
        for watch in self._watches:
            if watch.fd == self._stderr.fileno():
                watch.cancel()
        return False

    def watch_with(self, hub: ReadHub, on_readable: Callable[[], bool], on_closed: Callable[[], None]) -> Watch:
        """Have `hub` call `on_readable` when stdout has bytes (read them with `recv_nowait`)."""
        os.set_blocking(self._stdout.fileno(), False)
        watch = hub.watch(self._stdout.fileno(), on_readable)
        self._watches.append(watch)
        self._on_closed = on_closed
        return watch

    def recv_nowait(self, size: int) -> bytes | None:
        """What stdout has now: None when nothing (yet), b"" at its end (stderr read first: the reason)."""
        try:
            data = os.read(self._stdout.fileno(), size)
        except BlockingIOError:
            return None
        except ValueError:  # closed
            return b""
        if not data and self._hub is not None:
            self._read_stderr()  # what attach said before it closed stdout
        return data

    def recv(self, size: int) -> bytes:
        # read1 on the buffered file (not os.read on its fd): close() from another thread then waits for
        # this read instead of closing an fd number that could be reused under it.
        try:
            return self._stdout.read1(size)
        except (OSError, ValueError):
            return b""

    def sendall(self, data: bytes) -> None:
        with self._send_lock:
            self._stdin.write(data)
            self._stdin.flush()

    def exit_status(self) -> int | None:
        return self.process.poll()

    def close(self, grace_s: float = 1.0) -> None:
        """Close stdin (attach exits on EOF; the daemon keeps running), then make sure the process ends: a
        process still writing to a pipe nobody reads any more never sees that EOF, so after `grace_s` it
        is terminated (for `attach`, a relay, that costs nothing), then killed."""
        with contextlib.suppress(OSError, ValueError):
            self._stdin.close()
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            try:
                self.process.wait(timeout=2 * grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._stderr_thread is not None:
            self._stderr_thread.join(timeout=grace_s)
        elif self._hub is not None:
            with contextlib.suppress(OSError, ValueError):
                if self._stderr.fileno() >= 0:
                    self._read_stderr()  # the last words of a process that has ended
        for watch in self._watches:
            watch.cancel()  # waits for a read in progress before the descriptors go
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        if self._on_closed is not None:
            self._on_closed()


class SocketStream:
    """A connected socket (a socketpair end in tests); close() shuts it down so a blocked recv returns."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._watch: Watch | None = None
        self._on_closed: Callable[[], None] | None = None

    def watch_with(self, hub: ReadHub, on_readable: Callable[[], bool], on_closed: Callable[[], None]) -> Watch:
        """Have `hub` call `on_readable` when the socket has bytes (read them with `recv_nowait`)."""
        self._watch = hub.watch(self.sock.fileno(), on_readable)
        self._on_closed = on_closed
        return self._watch

    def recv_nowait(self, size: int) -> bytes | None:
        try:
            return self.sock.recv(size, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return None
        except OSError:
            return b""

    def recv(self, size: int) -> bytes:
        try:
            return self.sock.recv(size)
        except OSError:
            return b""

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        if self._watch is not None:
            self._watch.cancel()  # waits for a read in progress before the descriptor goes
        self.sock.close()
        if self._on_closed is not None:
            self._on_closed()
