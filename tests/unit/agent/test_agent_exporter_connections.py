"""The Prometheus exporter bounds what a peer can hold: a connection that sends nothing is closed after the
idle timeout, one that drips bytes is shut at its deadline, and past the cap a new connection is closed at
once while scrapes keep working once the held ones end (prometheus_client's own server kept every idle
connection and its thread forever, until the daemon ran out of descriptors)."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator

import pytest
from meshdeck_agent.accept_backoff import AcceptBackoff
from meshdeck_agent.exporter import Exporter
from meshdeck_agent.gpu.catalog import parse_simulate
from meshdeck_agent.ring import SampleRing
from meshdeck_agent.sim.machine import SimulatedMachine

PATIENCE_S = 30.0  # how long a test waits for what should come far sooner; only a failure waits it out


def _start(**limits: float) -> Exporter:
    exporter = Exporter(SampleRing(), SimulatedMachine(parse_simulate("1xH100"), seed=1))
    exporter.start("127.0.0.1:0", **limits)  # type: ignore[arg-type]
    return exporter


@pytest.fixture
def connections() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def _open(exporter: Exporter, opened: list[socket.socket]) -> socket.socket:
    assert exporter.address is not None
    sock = socket.create_connection(exporter.address, timeout=PATIENCE_S)
    opened.append(sock)
    return sock


def _closed_by_the_exporter(sock: socket.socket) -> bool:
    """True when the exporter closes this connection (EOF or reset) within PATIENCE_S."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _scrape(exporter: Exporter) -> bytes:
    assert exporter.address is not None
    host, port = exporter.address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=PATIENCE_S) as reply:
        return bytes(reply.read())


def test_a_connection_that_sends_nothing_is_closed_after_the_idle_timeout(connections):
    exporter = _start(idle_timeout_s=0.3)
    try:
        assert _closed_by_the_exporter(_open(exporter, connections))
        assert b"meshdeck_agent_info" in _scrape(exporter)
    finally:
        exporter.stop()


def test_a_connection_that_drips_bytes_is_shut_at_its_deadline(connections):
    exporter = _start(idle_timeout_s=PATIENCE_S, deadline_s=0.5)
    try:
        sock = _open(exporter, connections)
        sock.settimeout(0.1)
        request = b"GET /metrics HTTP/1.1\r\n" + b"X-Slow: " + b"a" * 10_000
        started = time.monotonic()
        shut = False
        for byte in request:  # one byte every 0.1 s: each read of the exporter gets something in time
            if time.monotonic() - started > PATIENCE_S:
                break
            try:
                sock.sendall(bytes([byte]))
                if sock.recv(1) == b"":
                    shut = True
                    break
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                shut = True
                break
        assert shut, "the exporter kept a dripping connection past its deadline"
    finally:
        exporter.stop()


def test_past_the_cap_a_new_connection_is_closed_and_scrapes_work_once_the_held_ones_end(connections):
    exporter = _start(max_connections=4, idle_timeout_s=PATIENCE_S)
    try:
        held = [_open(exporter, connections) for _ in range(4)]  # idle: each holds a slot (accepted in order)
        assert _closed_by_the_exporter(_open(exporter, connections))
        for sock in held:
            sock.close()
        deadline = time.monotonic() + PATIENCE_S
        while True:  # a slot comes back when the handler thread sees its peer gone
            try:
                assert b"meshdeck_agent_info" in _scrape(exporter)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    finally:
        exporter.stop()


def test_accept_backoff_doubles_to_its_longest_and_says_once_per_burst():
    backoff = AcceptBackoff(first_s=0.05, longest_s=0.3)
    firsts = [backoff.failed() for _ in range(5)]
    assert firsts == [True, False, False, False, False]
    assert backoff.delay_s == 0.3
    assert backoff.succeeded() == 5
    assert backoff.failed() and backoff.delay_s == 0.05
