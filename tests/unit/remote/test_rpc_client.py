"""The RPC client over a socketpair against peers speaking the real protocol module."""

from __future__ import annotations

import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from meshdeck.remote.errors import ConnectionLost, ProtocolMismatch, RpcError, RpcTimeout
from meshdeck.remote.rpc import RpcClient
from meshdeck.remote.streams import SocketStream
from meshdeck_agent import protocol
from remote_fake_agent import fake_agent_pair

# a sender that gets no byte into the socket this long is blocked: the reader stopped reading
STALLED_S = 0.5


def _client(sock: socket.socket, **kwargs) -> RpcClient:
    return RpcClient(SocketStream(sock), host="gpu-a", **kwargs)


def _read_lines(sock: socket.socket, count: int, timeout: float = 10.0) -> list[protocol.Message]:
    sock.settimeout(timeout)
    buffer, lines = b"", []
    while len(lines) < count:
        buffer += sock.recv(65536)
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            lines.append(protocol.decode(line))
    return lines


def test_handshake_exchanges_hellos_and_records_the_agent_version():
    sock, agent = fake_agent_pair(agent_version="0.9.3")
    with _client(sock, client_version="1.2.3") as client:
        hello = client.start(timeout=10)
        assert (hello.protocol, hello.agent, client.agent_version) == (protocol.PROTOCOL_VERSION, "0.9.3", "0.9.3")
        client.call("agent.time", timeout=10)  # the agent has read our hello by the time it answers
        assert agent.client_hello == protocol.Hello(protocol.PROTOCOL_VERSION, "1.2.3")
    agent.close()


def test_other_protocol_major_is_refused_naming_both_versions():
    sock, agent = fake_agent_pair(protocol_version=protocol.PROTOCOL_VERSION + 1, agent_version="9.0.0")
    client = _client(sock)
    with pytest.raises(ProtocolMismatch) as refused:
        client.start(timeout=10)
    message = str(refused.value)
    assert f"protocol {protocol.PROTOCOL_VERSION}" in message and str(protocol.PROTOCOL_VERSION + 1) in message
    assert "9.0.0" in message and client.closed
    agent.close()


def test_first_line_that_is_not_a_hello_is_refused():
    client_sock, server_sock = socket.socketpair()
    server_sock.sendall(b'{"id": 1, "result": {}}\n')
    client = _client(client_sock)
    with pytest.raises(ConnectionLost, match="expected a hello"):
        client.start(timeout=10)
    server_sock.close()


def test_call_returns_the_result_and_error_replies_raise_with_code_and_message():
    sock, agent = fake_agent_pair(inventory={"gpus": [{"index": 0}, {"index": 1}]})
    with _client(sock) as client:
        client.start(timeout=10)
        assert client.call("inventory", timeout=10) == {"gpus": [{"index": 0}, {"index": 1}]}
        with pytest.raises(RpcError) as failed:
            client.call("workers.frobnicate", {"x": 1}, timeout=10)
        assert failed.value.code == protocol.UNKNOWN_METHOD
        assert failed.value.method == "workers.frobnicate"
        assert "gpu-a" in str(failed.value) and "frobnicate" in str(failed.value)
    agent.close()


def test_timeout_raises_and_the_connection_stays_usable():
    sock, agent = fake_agent_pair()
    agent.silent_methods.add("workers.list")
    with _client(sock) as client:
        client.start(timeout=10)
        with pytest.raises(RpcTimeout, match=r"workers\.list"):
            client.call("workers.list", timeout=0.3)
        assert "time" in client.call("agent.time", timeout=10)
    agent.close()


def test_concurrent_calls_each_get_their_own_answer_even_out_of_order():
    client_sock, server_sock = socket.socketpair()
    client = _client(client_sock)
    server_sock.sendall(protocol.encode(protocol.hello("x")))

    def serve() -> None:
        requests = [m for m in _read_lines(server_sock, 1 + 40) if isinstance(m, protocol.Request)]
        for req in reversed(requests):  # answer last-first
            server_sock.sendall(protocol.encode(protocol.response(req.id, {"echo": req.params["n"]})))

    server = threading.Thread(target=serve)
    server.start()
    client.start(timeout=10)
    with ThreadPoolExecutor(8) as pool:  # sent from 8 threads at once; answered only when all 40 are in
        futures = list(pool.map(lambda n: client.call_async("echo", {"n": n}), range(40)))
    assert [f.result(20) for f in futures] == [{"echo": n} for n in range(40)]
    server.join(10)
    client.close()
    server_sock.close()


def test_call_async_future_resolves_and_runs_its_callback():
    sock, agent = fake_agent_pair()
    with _client(sock) as client:
        client.start(timeout=10)
        done = threading.Event()
        future = client.call_async("inventory")
        future.add_done_callback(lambda f: done.set())
        assert done.wait(10) and future.result()["hostname"] == "fake"
    agent.close()


def test_events_arrive_in_order_and_a_malformed_line_is_skipped():
    sock, agent = fake_agent_pair()
    with _client(sock) as client:
        client.start(timeout=10)
        agent.send(protocol.event("log", {"line": "one"}))
        agent.send_raw(b"this is not json\n")
        agent.send_raw(b'{"event": "nonsense", "data": {}}\n')
        agent.send(protocol.event("log", {"line": "two"}))
        got = [client.next_event(timeout=10), client.next_event(timeout=10)]
        assert [(e.event, e.data["line"]) for e in got] == [("log", "one"), ("log", "two")]
        assert "time" in client.call("agent.time", timeout=10)  # session survived the garbage
    agent.close()


def test_full_event_queue_holds_the_agent_back_instead_of_dropping():
    client_sock, server_sock = socket.socketpair()
    client = _client(client_sock, event_queue_size=4)
    server_sock.sendall(protocol.encode(protocol.hello("x")))
    client.start(timeout=10)
    sent = 500  # ~1 MB: far more than the socket buffers hold
    blocked_at: list[int] = []
    blocked = threading.Event()

    def flood() -> None:
        server_sock.settimeout(STALLED_S)
        for n in range(sent):
            data = memoryview(protocol.encode(protocol.event("log", {"n": n, "pad": "x" * 2000})))
            while data:
                try:
                    data = data[server_sock.send(data) :]
                except TimeoutError:  # the buffers are full: the client stopped reading
                    blocked_at.append(n)
                    blocked.set()
                    server_sock.settimeout(None)

    flooder = threading.Thread(target=flood)
    flooder.start()
    assert blocked.wait(30), "the sender should be blocked by flow control while nobody consumes"
    assert blocked_at[0] < sent - 1
    received = [client.next_event(timeout=10).data["n"] for _ in range(sent)]
    flooder.join(10)
    assert received == list(range(sent))
    client.close()
    server_sock.close()


def test_end_of_stream_fails_pending_calls_and_ends_the_event_stream():
    sock, agent = fake_agent_pair()
    agent.silent_methods.add("workers.list")
    client = _client(sock)
    client.start(timeout=10)
    future = client.call_async("workers.list")
    agent.send(protocol.event("log", {"line": "last words"}))  # read before the end of the stream, in order
    agent.close()
    with pytest.raises(ConnectionLost):
        future.result(10)
    assert client.next_event(timeout=10).data == {"line": "last words"}  # queued events are still delivered
    with pytest.raises(ConnectionLost):
        client.next_event(timeout=10)
    with pytest.raises(ConnectionLost):
        client.call("inventory", timeout=1)
    client.close()


def test_oversized_line_from_the_agent_closes_the_connection(monkeypatch):
    monkeypatch.setattr(protocol, "MAX_LINE_BYTES", 1024)
    client_sock, server_sock = socket.socketpair()
    client = _client(client_sock)
    server_sock.sendall(protocol.encode(protocol.hello("x")))
    client.start(timeout=10)
    server_sock.sendall(json.dumps({"event": "log", "data": {"pad": "y" * 4096}}).encode())
    with pytest.raises(ConnectionLost, match="over 1024 bytes"):
        client.next_event(timeout=10)
    client.close()
    server_sock.close()
