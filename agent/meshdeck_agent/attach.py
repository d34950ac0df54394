"""`meshdeck-agent attach`: connect stdin/stdout to the daemon's socket, starting the daemon if needed.

The app runs this over an SSH exec channel (DESIGN §1), so no TCP port is opened on the server. The
relay is byte-exact in both directions. It ends when the socket closes, or when stdin closes (it then
half-closes the socket so the daemon flushes what it owes, and waits for that at most a few seconds).

Starting the daemon: under an exclusive lock (`<socket>.start.lock`, so two attaches racing at the same
moment start one daemon), it runs `serve` with the same options in a new session, detached from this
process (stdio to the daemon's log file in its state dir), and waits for the socket to answer.

Upgrades: the daemon's hello names its version. If it is not this agent's version or protocol (the app
just uploaded a newer zipapp), attach stops that daemon with SIGTERM (its pid and start time are in
`<state dir>/agent.pid`; workers keep running and the new daemon re-adopts them) and starts its own.
The hello line it read is passed on unchanged, so the relay stays byte-exact. When the other daemon
cannot be stopped (no pid record, a pid that is no longer it, a daemon that ignores SIGTERM) attach
exits with protocol.ATTACH_EXIT_VERSION_CONFLICT and a message naming both versions.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from typing import Callable, List, Optional, Tuple

from . import __version__
from .handshake import ATTACH_EXIT_VERSION_CONFLICT, PROTOCOL_VERSION, hello_version
from .paths import check_socket_path, ensure_private_dir, self_command, self_env

STDIN_EOF_GRACE_S = 5.0


class AttachError(Exception):
    """The daemon could not be reached or started; the message says why and where its log is."""

    exit_status = 1


class VersionConflict(AttachError):
    """A daemon of another version holds the socket and could not be replaced (names both versions)."""

    exit_status = ATTACH_EXIT_VERSION_CONFLICT


def _connect(path: str) -> Optional[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


def connect_or_start(
    socket_path: str,
    serve_args: List[str],
    state_dir: str,
    timeout_s: float = 20.0,
    before_start: Optional[Callable[[], None]] = None,
) -> socket.socket:
    """A socket to the daemon on `socket_path`, starting one (`serve` with `serve_args`) if none answers.
    `before_start` runs only when one must be started: it checks the options only a new daemon uses (a
    running daemon keeps its own), so an attach to a running daemon does not import what they need."""
    socket_path = check_socket_path(socket_path)
    sock = _connect(socket_path)
    if sock is not None:
        return sock
    if before_start is not None:
        before_start()
    import fcntl
    import subprocess  # only when starting the daemon: attach runs once per connection (see __main__)

    ensure_private_dir(state_dir)
    log_path = os.path.join(state_dir, "agent.log")
    with os.fdopen(os.open(socket_path + ".start.lock", os.O_RDWR | os.O_CREAT, 0o600), "r+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        sock = _connect(socket_path)
        if sock is not None:
            return sock
        with open(log_path, "ab") as log_file:
            daemon = subprocess.Popen(
                [*self_command(), "serve", "--socket", socket_path, "--state-dir", state_dir, *serve_args],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                start_new_session=True,
                close_fds=True,
                env=self_env(),
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            sock = _connect(socket_path)
            if sock is not None:
                daemon.returncode = 0  # it runs on after we exit; do not reap or warn
                return sock
            code = daemon.poll()
            if code is not None and code != 3:  # 3: another daemon won the race; keep trying to connect
                raise AttachError(
                    "meshdeck-agent daemon exited with status %d while starting; see %s" % (code, log_path)
                )
            time.sleep(0.05)
        raise AttachError(
            "meshdeck-agent daemon did not answer on %s within %.0fs; see %s" % (socket_path, timeout_s, log_path)
        )


def _read_line(sock: socket.socket, timeout_s: float = 15.0, limit: int = 65536) -> bytes:
    """The socket's first line (at most `limit` bytes), and not a byte more: what follows it is relayed.
    It peeks, then takes up to the newline, instead of one recv per byte."""
    sock.settimeout(timeout_s)
    data = b""
    try:
        while not data.endswith(b"\n") and len(data) < limit:
            peeked = sock.recv(limit - len(data), socket.MSG_PEEK)
            if not peeked:
                break
            end = peeked.find(b"\n")
            data += sock.recv(end + 1 if end >= 0 else len(peeked))
    except OSError:
        pass
    return data


def _describe(hello: Optional[Tuple[int, str]]) -> str:
    return "agent %s (protocol %s)" % (hello[1] or "?", hello[0]) if hello else "a daemon with an unreadable hello"


def _conflict(found: Optional[Tuple[int, str]], socket_path: str, problem: str) -> VersionConflict:
    return VersionConflict(
        "%s serves %s, not this agent %s (protocol %d), and %s; stop it by hand, then connect again"
        % (_describe(found), socket_path, __version__, PROTOCOL_VERSION, problem)
    )


def _stop_daemon(
    state_dir: str, socket_path: str, found: Optional[Tuple[int, str]] = None, timeout_s: float = 20.0
) -> None:
    """SIGTERM the daemon recorded in agent.pid (if it is still that process) and wait for its socket to go."""
    import json
    import signal

    from .keeper import process_is_zombie, process_start_time

    pid_path = os.path.join(state_dir, "agent.pid")
    try:
        with open(pid_path) as handle:
            record = json.load(handle)
        pid, start_time = int(record["pid"]), record.get("start_time")
    except (OSError, ValueError, KeyError, TypeError):
        raise _conflict(found, socket_path, "its pid is unknown (no readable %s)" % pid_path) from None
    if start_time is not None and process_start_time(pid) != start_time:
        raise _conflict(found, socket_path, "pid %d in %s is no longer it" % (pid, pid_path))
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError as exc:
        raise _conflict(found, socket_path, "SIGTERM to pid %d failed: %s" % (pid, exc.strerror or exc)) from None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        gone = process_start_time(pid) is None or process_is_zombie(pid)
        if gone and not os.path.exists(socket_path):
            return
        time.sleep(0.05)
    raise _conflict(found, socket_path, "pid %d did not stop within %.0fs of SIGTERM" % (pid, timeout_s))


def attach_socket(
    socket_path: str,
    serve_args: List[str],
    state_dir: str,
    before_start: Optional[Callable[[], None]] = None,
    start: bool = True,
) -> Tuple[socket.socket, bytes]:
    """A socket to a daemon of this version and the hello line it sent (replacing another version).
    `start=False` (`attach --no-start`): only a daemon that already answers, never one started or replaced
    here — a daemon some other process owns (a Slurm job's) must not be outlived by one this attach starts."""
    if not start:
        sock = _connect(check_socket_path(socket_path))
        if sock is None:
            raise AttachError("no meshdeck agent answers on %s (attach --no-start starts none)" % socket_path)
        hello_line = _read_line(sock)
        found = hello_version(hello_line.rstrip(b"\n"))
        if found != (PROTOCOL_VERSION, __version__):
            sock.close()
            raise _conflict(found, socket_path, "--no-start leaves it running")
        return sock, hello_line
    first: Optional[Tuple[int, str]] = None
    for attempt in range(2):
        sock = connect_or_start(socket_path, serve_args, state_dir, before_start=before_start)
        hello_line = _read_line(sock)
        first = hello_version(hello_line.rstrip(b"\n"))
        if first == (PROTOCOL_VERSION, __version__):
            return sock, hello_line
        sock.close()
        if attempt:
            break
        sys.stderr.write(
            "meshdeck-agent: replacing the daemon on %s (%s) with agent %s; workers keep running\n"
            % (socket_path, _describe(first), __version__)
        )
        _stop_daemon(state_dir, socket_path, first)
    raise _conflict(first, socket_path, "it came back after it was stopped")


def relay(sock: socket.socket, stdin_fd: int, stdout_fd: int, preamble: bytes = b"") -> int:
    """Copy stdin -> socket and socket -> stdout until the socket closes (or stdin closes + grace).

    `preamble` (bytes already read from the socket) is written to stdout first. Each direction blocks in
    its own thread, so an idle connection costs no wake-ups: when stdin closes, its thread half-closes
    the socket (the daemon then flushes what it owes and closes) and, should the daemon not close within
    STDIN_EOF_GRACE_S, shuts the socket down, which ends the other direction's read."""
    if preamble:
        _write_all(stdout_fd, preamble)
    sock.settimeout(None)
    finished = threading.Event()

    def pump_in() -> None:
        try:
            while True:
                data = os.read(stdin_fd, 65536)
                if not data:
                    break
                sock.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
        if not finished.wait(STDIN_EOF_GRACE_S):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    threading.Thread(target=pump_in, name="attach-stdin", daemon=True).start()
    try:
        while True:
            try:
                data = sock.recv(65536)
            except OSError:
                return 0
            if not data:
                return 0
            try:
                _write_all(stdout_fd, data)
            except OSError:  # the app closed its end (BrokenPipeError) or the pipe is gone
                return 0
    finally:
        finished.set()
        sock.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
