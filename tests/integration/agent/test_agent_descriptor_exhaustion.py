"""A real daemon whose descriptors run out keeps serving: idle connections to its Prometheus exporter cannot
take them all (the exporter holds at most MAX_CONNECTIONS and closes the rest at once), and an accept() on
its socket that fails with EMFILE is waited out, not raised (the daemon used to exit, refusing every attach).

The daemon runs as a subprocess with RLIMIT_NOFILE lowered to NOFILE, so a few hundred connections from
this test exhaust it."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_harness import Client, agent_env, run_agent, short_dir, wait_for

NOFILE = 128  # the daemon's descriptor limit (it uses about 20 of them itself)
PEERS = 300  # connections this test opens: far more than the daemon has descriptors
HELLO = b'{"hello":{"protocol":1,"agent":"exhaustion-test"}}\n'

# Lowers the limit, then runs `python -m meshdeck_agent serve ...` in the same process.
_LIMITED = (
    "import resource, runpy, sys; limit = int(sys.argv.pop(1)); "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)); "
    "sys.argv[0] = 'meshdeck_agent'; runpy.run_module('meshdeck_agent', run_name='__main__', alter_sys=True)"
)


class LimitedDaemon:
    def __init__(self, directory: Path, process: subprocess.Popen[bytes]) -> None:
        self.directory = directory
        self.socket_path = directory / "agent.sock"
        self.process = process

    def log(self) -> str:
        path = self.directory / "agent.state" / "agent.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def client(self) -> Client:
        """A client on its socket; a connect refused while its accept queue is full is tried again."""
        deadline = time.monotonic() + 30
        while True:
            try:
                return Client.connect(self.socket_path, timeout=30)
            except (BlockingIOError, ConnectionRefusedError):
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise
                time.sleep(0.05)


@pytest.fixture
def daemon() -> Iterator[LimitedDaemon]:
    directory = short_dir()
    state = directory / "agent.state"
    state.mkdir(mode=0o700)
    argv = [sys.executable, "-c", _LIMITED, str(NOFILE), "serve", "--socket", str(directory / "agent.sock")]
    argv += ["--state-dir", str(state), "--simulate", "1xH100", "--interval", "0.2", "--prometheus", "127.0.0.1:0"]
    argv += ["--log-file", str(state / "agent.log")]
    process = subprocess.Popen(argv, env=agent_env(), stdin=subprocess.DEVNULL)
    started = LimitedDaemon(directory, process)
    try:
        assert wait_for(lambda: started.socket_path.exists() or process.poll() is not None, timeout=60)
        assert process.poll() is None, f"the daemon exited with {process.returncode}: {started.log()}"
        yield started
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=20)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def peers() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def _exporter_address(daemon: LimitedDaemon) -> tuple[str, int]:
    client = daemon.client()
    try:
        listening = client.server_hello["hello"]["daemon"]["prometheus"]
    finally:
        client.close()
    host, _, port = listening.rpartition(":")
    return host, int(port)


def _open_until_refused(opened: list[socket.socket], family: int, address: object, count: int) -> None:
    """Connect `count` times (idle connections, sending nothing), stopping at the first connect that does not
    complete within 3 s (a full accept queue: the daemon accepts no more). A Unix socket's connect fails at
    once while its queue is full, so it is tried again until then."""
    for _ in range(count):
        deadline = time.monotonic() + 3
        while True:
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.settimeout(3)
            try:
                sock.connect(address)
                break
            except OSError:
                sock.close()
                if time.monotonic() > deadline:
                    return
                time.sleep(0.01)
        opened.append(sock)


def _attach_says_hello(daemon: LimitedDaemon) -> dict:
    result = run_agent("attach", "--socket", str(daemon.socket_path), input_bytes=HELLO, timeout=60)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return json.loads(result.stdout.splitlines()[0])["hello"]


def _scrape(address: tuple[str, int]) -> bytes:
    host, port = address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as reply:
        return bytes(reply.read())


def test_idle_connections_to_the_exporter_leave_the_daemon_serving_attach(daemon: LimitedDaemon, peers):
    address = _exporter_address(daemon)
    _open_until_refused(peers, socket.AF_INET, address, PEERS)
    client = daemon.client()  # the daemon's own socket still accepts
    assert client.call("agent.time")["time"] > 0
    client.close()
    assert daemon.process.poll() is None, daemon.log()
    assert len(peers) == PEERS, "the exporter stopped accepting: its idle connections took the descriptors"
    hello = _attach_says_hello(daemon)
    assert hello["daemon"]["prometheus"] == f"{address[0]}:{address[1]}"
    assert daemon.process.poll() is None, daemon.log()
    assert "connections open, the most it serves at once" in daemon.log()  # the burst past the cap was logged
    for sock in peers:
        sock.close()
    peers.clear()
    scraped = b""

    def scrape_works() -> bool:  # the held slots come back as their handlers see the peers gone
        nonlocal scraped
        with contextlib.suppress(OSError):
            scraped = _scrape(address)
        return bool(scraped)

    assert wait_for(scrape_works, timeout=30, interval=0.1)
    assert b"meshdeck_agent_info" in scraped


def test_running_out_of_descriptors_on_its_socket_is_waited_out_not_fatal(daemon: LimitedDaemon, peers):
    _open_until_refused(peers, socket.AF_UNIX, str(daemon.socket_path), PEERS)
    time.sleep(0.5)  # the daemon is now at its limit: an accept() has failed with EMFILE
    assert daemon.process.poll() is None, f"the daemon exited with {daemon.process.returncode}: {daemon.log()}"
    for sock in peers:
        sock.close()
    peers.clear()
    client = daemon.client()  # descriptors came back as the sessions ended: it accepts again
    assert client.call("agent.time")["time"] > 0
    client.close()
    assert _attach_says_hello(daemon)["protocol"] == 1
    assert daemon.process.poll() is None, daemon.log()
    log = daemon.log()
    assert "Too many open files" in log and log.count("failed (") == 1  # logged once for the burst
