"""`attach`'s relay and its start-up: bytes both ways exactly, stdin's end with and without the daemon's
close, the hello read to its newline and no further, and an import set kept to what relaying needs
(attach runs once per connection, so its start-up is paid on every connect)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import meshdeck_agent
import pytest
from meshdeck_agent import attach
from meshdeck_agent.handshake import hello_version


def _relay_in_thread(sock: socket.socket, stdin_fd: int, stdout_fd: int, preamble: bytes = b"") -> threading.Thread:
    thread = threading.Thread(target=attach.relay, args=(sock, stdin_fd, stdout_fd, preamble), daemon=True)
    thread.start()
    return thread


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_the_relay_copies_both_ways_and_ends_when_the_daemon_closes():
    ours, daemon = socket.socketpair()
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    thread = _relay_in_thread(ours, stdin_r, stdout_w, preamble=b"hello\n")
    big = bytes(range(256)) * 4096  # 1 MiB: more than one read or send in each direction
    os.write(stdin_w, b"request\n")
    assert daemon.recv(8) == b"request\n"
    sender = threading.Thread(target=daemon.sendall, args=(big,))
    sender.start()
    received = b""
    while len(received) < len(b"hello\n") + len(big):
        received += os.read(stdout_r, 65536)
    sender.join()
    assert received == b"hello\n" + big
    daemon.close()
    thread.join(5)
    assert not thread.is_alive()
    os.close(stdout_w)
    os.close(stdin_w)


def test_stdin_closing_half_closes_the_socket_and_the_daemon_still_gets_to_answer():
    ours, daemon = socket.socketpair()
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    thread = _relay_in_thread(ours, stdin_r, stdout_w)
    os.write(stdin_w, b"last request\n")
    os.close(stdin_w)
    received = b""
    while chunk := daemon.recv(65536):
        received += chunk
    assert received == b"last request\n"  # then EOF: the relay half-closed its side
    daemon.sendall(b"last reply\n")
    daemon.close()
    thread.join(5)
    os.close(stdout_w)
    assert _read_all(stdout_r) == b"last reply\n"


def test_a_daemon_that_never_closes_after_stdin_ends_is_left_after_the_grace(monkeypatch):
    monkeypatch.setattr(attach, "STDIN_EOF_GRACE_S", 0.3)
    ours, daemon = socket.socketpair()
    stdin_r, stdin_w = os.pipe()
    _stdout_r, stdout_w = os.pipe()
    started = time.monotonic()
    thread = _relay_in_thread(ours, stdin_r, stdout_w)
    os.close(stdin_w)
    thread.join(5)
    assert not thread.is_alive()
    assert 0.25 < time.monotonic() - started < 4
    daemon.close()


def test_the_hello_is_read_to_its_newline_and_what_follows_stays_for_the_relay():
    ours, daemon = socket.socketpair()
    daemon.sendall(b'{"hello":{"protocol":1,"agent":"0.2.0"}}\n{"event":"samples"}\n')
    assert attach._read_line(ours) == b'{"hello":{"protocol":1,"agent":"0.2.0"}}\n'
    assert ours.recv(100) == b'{"event":"samples"}\n'
    daemon.sendall(b"x" * 100)  # no newline within the bound: the bound ends the read
    assert attach._read_line(ours, timeout_s=1, limit=40) == b"x" * 40


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b'{"hello":{"protocol":1,"agent":"0.2.0","epoch":"ab"}}', (1, "0.2.0")),
        (b'{"hello":{"protocol":2}}', (2, "")),
        (b'{"hello":{"protocol":true,"agent":"0.2.0"}}', None),
        (b'{"hello":{"protocol":"1","agent":"0.2.0"}}', None),
        (b'{"hello":{"protocol":1,"agent":"' + b"9" * 65 + b'"}}', None),
        (b'{"hello":[1]}', None),
        (b'{"id":1,"result":{}}', None),
        (b"[1, 2]", None),
        (b"not json", None),
        (b'{"hello":{"protocol":' + b"1" * 5000 + b"}}", None),
        (b"\xff\xfe", None),
        (b"[" * 60000 + b"]" * 60000, None),  # nested past the recursion limit: refused, not a traceback
    ],
)
def test_the_hello_version_is_read_as_the_protocol_decoder_bounds_it(line, expected):
    assert hello_version(line) == expected


def test_attach_imports_only_what_relaying_needs():
    folder = str(Path(meshdeck_agent.__file__).absolute().parent.parent)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "import meshdeck_agent.__main__, meshdeck_agent.attach, meshdeck_agent.paths; "
        "print(' '.join(sorted(sys.modules)))"
    )
    loaded = set(subprocess.run([sys.executable, "-I", "-S", "-c", code, folder], capture_output=True, check=True,
                                text=True).stdout.split())  # fmt: skip
    assert "meshdeck_agent.attach" in loaded
    heavy = {"meshdeck_agent.protocol", "meshdeck_agent.keeper", "meshdeck_agent.gpu.catalog", "dataclasses"}
    heavy |= {"logging", "subprocess", "platform", "site"}
    assert not heavy & loaded, f"attach now imports {sorted(heavy & loaded)} at start"
