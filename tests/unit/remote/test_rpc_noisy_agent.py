"""A noisy or hostile agent cannot flood the app's log, grow its memory or put huge or raw text on a screen:
malformed lines are logged a few at a time then summarised per interval, with the count; what the agent
says (its version, error messages, stderr) is escaped and cut to a bounded length; an endless line is
refused while it is being read."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import subprocess
import sys
import threading
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck.remote.errors import ConnectionLost, RpcError
from meshdeck.remote.peer_log import PeerLog
from meshdeck.remote.rpc import RpcClient
from meshdeck.remote.streams import PipeStream, SocketStream
from meshdeck_agent import protocol
from remote_fake_agent import fake_agent_pair

FLOOD_LINES = 10_000
_KEYS = ["hello", "protocol", "agent", "epoch", "id", "result", "error", "code", "message", "event", "data", "method"]


def _records(caplog: pytest.LogCaptureFixture, logger: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger]


def test_a_garbage_flood_is_logged_a_few_times_then_summarised_with_its_count(caplog):
    caplog.set_level(logging.INFO)
    sock, agent = fake_agent_pair()
    client = RpcClient(SocketStream(sock), host="gpu-a")
    client.start(timeout=10)
    garbage = json.dumps({"event": "\x1b[2J" + "n" * 1000}).encode() + b"\n"  # decodes, then is refused
    events: list[protocol.Event] = []
    arrived = threading.Event()

    def consume() -> None:  # as the host supervisor does: event lines are decoded by the consumer
        with contextlib.suppress(ConnectionLost):
            while True:
                event = client.next_event(timeout=0.5)
                if event is not None:
                    events.append(event)
                    arrived.set()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    agent.send_raw(garbage * FLOOD_LINES)
    agent.send(protocol.event("alert", {"kind": "after the flood"}))
    assert client.call("agent.time", timeout=30)["time"] > 0  # read after the flood
    assert arrived.wait(30)  # the flood's lines were all handled before this one
    client.close()
    consumer.join(10)
    assert [e.data for e in events] == [{"kind": "after the flood"}]
    logged = _records(caplog, "meshdeck.remote.rpc")
    assert len(logged) <= 10, f"{len(logged)} log lines for {FLOOD_LINES} garbage lines"
    text = "\n".join(r.getMessage() for r in logged)
    assert "gpu-a" in text and "\x1b" not in text and "\\x1b[2J" in text and "n" * 400 not in text
    assert f"{FLOOD_LINES - len(logged) + 1} more" in text  # the summary counts what was not logged one by one
    agent.close()


def test_peer_log_summarises_once_per_interval_and_logs_a_new_burst_after_it():
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("test.peer_log")
    logger.addHandler(handler := Collect())
    logger.setLevel(logging.INFO)
    now = [0.0]
    noise = PeerLog(logger, "gpu-b", burst=3, interval_s=60.0, clock=lambda: now[0])
    try:
        for second in range(120):  # 10 bad lines a second for two minutes
            now[0] = float(second)
            for _ in range(10):
                noise.report("bad line", "x" * 5000)
        noise.flush()
    finally:
        logger.removeHandler(handler)
    assert len(lines) == 3 + 1 + 3 + 1  # two windows: a burst, then one summary each
    assert lines[3].startswith("gpu-b: 597 more like this in the last 60 s")
    assert lines[-1].startswith("gpu-b: 597 more like this")
    assert all(len(line) < 600 for line in lines)  # the 5000-character detail is cut


def test_a_huge_agent_version_refuses_the_hello_in_a_short_escaped_line():
    sock, agent = fake_agent_pair(agent_version="9.9.9\x1b[2J" + "v" * 100_000)
    with RpcClient(SocketStream(sock), host="gpu-a") as client, pytest.raises(ConnectionLost) as refused:
        client.start(timeout=10)
    message = str(refused.value)
    assert "hello.agent must be a string of at most 64 characters" in message
    assert len(message) < 300 and "\x1b" not in message and "vvvv" not in message
    agent.close()


def test_a_huge_error_message_from_the_agent_is_cut_and_escaped():
    def fail(_params):
        raise protocol.ProtocolError(protocol.BAD_PARAMS, "\x1b]0;pwned\x07" + "e" * 100_000)

    sock, agent = fake_agent_pair(handlers={"workers.list": fail})
    with RpcClient(SocketStream(sock), host="gpu-a") as client:
        client.start(timeout=10)
        with pytest.raises(RpcError) as failed:
            client.call("workers.list", timeout=10)
    message = str(failed.value)
    assert len(message) < 2000 and "\x1b" not in message and "\x07" not in message
    assert message.startswith("gpu-a: workers.list failed: bad_params: \\x1b]0;pwned\\x07eee")
    agent.close()


def test_an_endless_line_is_refused_while_it_is_read_with_memory_bounded():
    client_sock, server_sock = socket.socketpair()
    client = RpcClient(SocketStream(client_sock), host="gpu-a")
    server_sock.sendall(protocol.encode(protocol.hello("x")))
    client.start(timeout=10)
    flood = b'{"event": "log", "data": {"pad": "' + b"y" * (1 << 20)
    stop = threading.Event()

    def send() -> None:
        try:
            server_sock.sendall(flood[:34])
            while not stop.is_set():
                server_sock.sendall(flood[34:])
        except OSError:
            pass  # the client closed the connection: what this test waits for

    tracemalloc.start()
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        with pytest.raises(ConnectionLost, match=f"over {protocol.MAX_LINE_BYTES} bytes"):
            client.next_event(timeout=60)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        stop.set()
        client.close()
        server_sock.close()
        sender.join(10)
    assert peak < 3 * protocol.MAX_LINE_BYTES, f"peak {peak / protocol.MAX_LINE_BYTES:.1f} x the line limit"


def test_an_agent_flooding_stderr_is_logged_a_bounded_number_of_times_and_its_tail_stays_small(caplog):
    caplog.set_level(logging.INFO)
    flood = "import sys\nfor i in range(%d): sys.stderr.write('\\x1b[31mnoise %%d %%s\\n' %% (i, 'z' * 3000))\n"
    process = subprocess.Popen(
        [sys.executable, "-c", flood % FLOOD_LINES],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    stream = PipeStream(process, "gpu-a")
    assert stream.recv(100) == b""  # the process ended; stderr is pumped on its own thread
    stream.close()
    logged = _records(caplog, "meshdeck.remote.streams")
    assert len(logged) <= 60, f"{len(logged)} log lines for {FLOOD_LINES} stderr lines"
    tail = stream.stderr.tail()
    assert f"noise {FLOOD_LINES - 1}" in tail and "\x1b" not in tail and len(tail) < 12_000


def test_a_process_with_unbuffered_pipes_is_refused_before_any_read():
    # recv and the stderr pump read with read1, which an unbuffered (bufsize=0) pipe does not have.
    with (
        subprocess.Popen(
            [sys.executable, "-c", "pass"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
        ) as process,
        pytest.raises(ValueError, match="buffered pipes"),
    ):
        PipeStream(process, "gpu-a")


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_KEYS) | st.text(max_size=6), inner),
    max_leaves=8,
)


@settings(deadline=None, max_examples=200)
@given(st.lists(st.binary(max_size=120) | _JSON.map(lambda v: json.dumps(v).encode()), max_size=12))
def test_any_garbage_from_the_agent_leaves_the_client_answering(garbage: list[bytes]) -> None:
    client_sock, agent_sock = socket.socketpair()
    client = RpcClient(SocketStream(client_sock), host="gpu-a")
    try:
        agent_sock.sendall(protocol.encode(protocol.hello("x")))
        client.start(timeout=10)
        pending = client.call_async("agent.time")  # request id 1
        agent_sock.sendall(b"\n".join(garbage) + b"\n" + protocol.encode(protocol.response(1, {"time": 1.0})))
        with contextlib.suppress(RpcError):  # garbage may have answered it first, or failed it: both are answers
            pending.result(10)
        assert not client.closed, client.close_reason
    finally:
        client.close()
        agent_sock.close()
