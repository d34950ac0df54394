"""`meshdeck-agent attach`: connect stdin/stdout to the daemon's socket, starting the daemon if needed.

The app runs this over an SSH exec channel (DESIGN §1), so no TCP port is opened on the server. The
relay is byte-exact in both directions. It ends when the socket closes, or when stdin closes (it then
half-closes the socket so the daemon flushes what it owes, and waits for that at most a few seconds).

Starting the daemon: under an exclusive lock (`<socket>.start.lock`, so two attaches racing at the same
moment start one daemon), it runs `serve` with the same options in a new session, detached from this
process (stdio to the daemon's log file in its state dir), and waits for the socket to answer.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import threading
import time
from typing import List, Optional

from .paths import check_socket_path, ensure_private_dir, self_command, self_env

STDIN_EOF_GRACE_S = 5.0


class AttachError(Exception):
    """The daemon could not be reached or started; the message says why and where its log is."""


def _connect(path: str) -> Optional[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


def connect_or_start(socket_path: str, serve_args: List[str], state_dir: str, timeout_s: float = 20.0) -> socket.socket:
    socket_path = check_socket_path(socket_path)
    sock = _connect(socket_path)
    if sock is not None:
        return sock
    ensure_private_dir(state_dir)
    log_path = os.path.join(state_dir, "agent.log")
    with open(socket_path + ".start.lock", "a+") as lock:
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


def relay(sock: socket.socket, stdin_fd: int, stdout_fd: int) -> int:
    """Copy stdin -> socket and socket -> stdout until the socket closes (or stdin closes + grace)."""
    stdin_closed = threading.Event()

    def pump_in() -> None:
        try:
            while True:
                data = os.read(stdin_fd, 65536)
                if not data:
                    break
                sock.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
            stdin_closed.set()

    threading.Thread(target=pump_in, name="attach-stdin", daemon=True).start()
    closed_at: Optional[float] = None
    sock.settimeout(0.25)
    try:
        while True:
            try:
                data = sock.recv(65536)
            except socket.timeout:
                if stdin_closed.is_set():
                    closed_at = closed_at or time.monotonic()
                    if time.monotonic() - closed_at > STDIN_EOF_GRACE_S:
                        return 0
                continue
            except OSError:
                return 0
            if not data:
                return 0
            view = memoryview(data)
            while view:
                try:
                    written = os.write(stdout_fd, view)
                except BrokenPipeError:
                    return 0
                view = view[written:]
    finally:
        sock.close()
