"""One read hub thread serves every agent connection: no reader thread per host, and one host's back-pressure
never holds up another's answers."""

from __future__ import annotations

import os
import socket
import threading

from meshdeck.remote.read_hub import ReadHub
from meshdeck.remote.rpc import RpcClient
from meshdeck.remote.streams import SocketStream
from meshdeck_agent import protocol
from remote_fake_agent import fake_agent_pair

HOSTS = 40


def _reader_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(("meshdeck-rpc-", "meshdeck-stderr-"))]


def test_many_agent_connections_are_read_by_the_one_hub_thread_not_a_thread_each():
    hub = ReadHub(name="test-hub")
    pairs = [fake_agent_pair() for _ in range(HOSTS)]
    clients = [RpcClient(SocketStream(sock), host=f"gpu-{i}", hub=hub) for i, (sock, _) in enumerate(pairs)]
    try:
        for client in clients:
            client.start(timeout=10)
        assert _reader_threads() == []
        assert hub.watching() == HOSTS
        assert all(client.call("agent.time", timeout=10) is not None for client in clients)
        thread = hub.thread
        assert thread is not None and thread.is_alive()
    finally:
        for client in clients:
            client.close()
        for _, agent in pairs:
            agent.close()
    assert hub.watching() == 0
    thread.join(10)
    assert not thread.is_alive() and hub.thread is None  # no connection left: no thread left
    sock, agent = fake_agent_pair()  # the next connection starts it again
    with RpcClient(SocketStream(sock), host="gpu-again", hub=hub) as client:
        client.start(timeout=10)
        assert client.call("agent.time", timeout=10) is not None
    agent.close()


def test_a_host_whose_consumer_is_full_pauses_alone_and_keeps_its_answers_until_drained():
    hub = ReadHub(name="test-hub")
    flooded_sock, flooding_side = socket.socketpair()
    flooding_side.sendall(protocol.encode(protocol.hello("9.9.9")))
    flooded = RpcClient(SocketStream(flooded_sock), host="flooded", hub=hub, event_queue_size=8)
    quiet_sock, quiet_agent = fake_agent_pair()
    quiet = RpcClient(SocketStream(quiet_sock), host="quiet", hub=hub)
    try:
        flooded.start(timeout=10)
        quiet.start(timeout=10)
        # far more events than the flooded client's queue holds, then the answer to its call behind them
        answer = flooded.call_async("agent.time")
        events = 64
        sender = threading.Thread(
            target=lambda: flooding_side.sendall(
                b"".join(protocol.encode(protocol.event("log", {"n": n})) for n in range(events))
                + protocol.encode(protocol.response(1, {"late": True}))
            )
        )
        sender.start()
        # the flooded host is paused (nobody takes its events), the other host is answered meanwhile
        for _ in range(20):
            assert quiet.call("agent.time", timeout=10) is not None
        assert not answer.done()
        received = [flooded.next_event(timeout=10).data["n"] for _ in range(events)]
        assert received == list(range(events))  # none lost, in order
        assert answer.result(timeout=10) == {"late": True}  # the answer behind them came through
        sender.join(10)
    finally:
        flooded.close()
        quiet.close()
        quiet_agent.close()
        flooding_side.close()


def test_cancel_waits_for_a_read_in_progress_and_the_watch_is_never_called_after():
    hub = ReadHub(name="test-hub")
    read_fd, write_fd = os.pipe()
    inside, release = threading.Event(), threading.Event()
    calls = []

    def on_readable() -> bool:
        calls.append(os.read(read_fd, 100))
        inside.set()
        release.wait(10)
        return True

    watch = hub.watch(read_fd, on_readable)
    os.write(write_fd, b"x")
    assert inside.wait(10)
    cancelled = threading.Event()
    canceller = threading.Thread(target=lambda: (watch.cancel(), cancelled.set()))
    canceller.start()
    assert not cancelled.wait(0.3)  # still inside the callback: cancel waits
    release.set()
    assert cancelled.wait(10)
    canceller.join(10)
    os.write(write_fd, b"y")
    probe_r, probe_w = os.pipe()  # a later watch is served: the hub went past the cancelled one
    seen = threading.Event()
    hub.watch(probe_r, lambda: bool(os.read(probe_r, 10)) and not seen.set())
    os.write(probe_w, b"z")
    assert seen.wait(10)
    assert calls == [b"x"]
    for fd in (read_fd, write_fd, probe_r, probe_w):
        os.close(fd)


def test_a_resume_that_races_the_pause_keeps_the_watch_reading():
    hub = ReadHub(name="test-hub")
    read_fd, write_fd = os.pipe()
    got: list[bytes] = []
    second = threading.Event()
    holder: dict[str, object] = {}

    def on_readable() -> bool:
        got.append(os.read(read_fd, 1))
        if len(got) == 1:
            holder["watch"].resume()  # the consumer made room before this callback returned its "pause"
            return False
        second.set()
        return True

    holder["watch"] = hub.watch(read_fd, on_readable)
    os.write(write_fd, b"ab")
    assert second.wait(10), "the watch stayed paused although it was resumed"
    assert got == [b"a", b"b"]
    holder["watch"].cancel()
    os.close(read_fd)
    os.close(write_fd)


def test_watching_a_descriptor_closed_meanwhile_fails_and_leaves_its_number_free():
    """A connection closed between its start and its watch (a fleet shutting down under a reconnect)."""
    hub = ReadHub(name="test-hub-closed")
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        try:
            hub.watch(read_end, lambda: True)
        except OSError:
            pass
        else:
            raise AssertionError("a closed descriptor was watched")
        assert hub.watching() == 0
        again, other = os.pipe()  # the lowest free number: most likely the closed one's, reused
        try:
            watch = hub.watch(again, lambda: True)
            assert hub.watching() == 1
            watch.cancel()
        finally:
            os.close(again)
            os.close(other)
    finally:
        os.close(write_end)
    assert hub.watching() == 0
