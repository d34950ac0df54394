"""The host supervisor against a fake agent whose ring survives reconnects (as the real daemon's does)."""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from typing import Any

import pytest
from meshdeck.remote.bootstrap import RUN_REFUSED_EXIT, RUN_REFUSED_MARK
from meshdeck.remote.connectors import AgentLink
from meshdeck.remote.errors import (
    AgentVersionConflict,
    AuthFailed,
    BootstrapError,
    ConnectError,
    NotConnected,
    ProtocolMismatch,
)
from meshdeck.remote.events import HostStateChanged, InventoryReceived, SamplesReceived
from meshdeck.remote.sample_pump import SamplePump
from meshdeck.remote.streams import SocketStream, _StderrTail
from meshdeck.remote.supervisor import Backoff, HostSupervisor, SupervisorSettings
from meshdeck_agent import protocol
from remote_fake_agent import FakeConnector, Recorder

FAST = SupervisorSettings(
    hello_timeout_s=10, call_timeout_s=10, stall_after_s=60, backoff=Backoff(initial_s=0.05, max_s=0.2)
)


@pytest.fixture
def harness():
    made: list[tuple[HostSupervisor, FakeConnector]] = []

    def make(
        since_seq: int | None = None,
        settings: SupervisorSettings = FAST,
        since_epoch: str | None = None,
        **connector_kwargs: Any,
    ):
        connector = FakeConnector(**connector_kwargs)
        recorder = Recorder()
        supervisor = HostSupervisor(
            "gpu-a",
            connector,
            recorder,
            since_seq=since_seq,
            since_epoch=since_epoch,
            settings=settings,
            rng=random.Random(7),
        )
        made.append((supervisor, connector))
        return supervisor, connector, recorder

    yield make
    for supervisor, connector in made:
        supervisor.stop()
        connector.close_all()


def _connected(supervisor: HostSupervisor, connector: FakeConnector, recorder: Recorder, connects: int = 1) -> None:
    recorder.wait_for(lambda: supervisor.connects >= connects and supervisor.state == "connected")
    assert connector.agent.subscribed.wait(10)


def _delivered_through(supervisor: HostSupervisor, recorder: Recorder, seq: int) -> None:
    """Wait until `seq` reached the sink, not only the gate: the gate moves last_seq before it delivers."""
    recorder.wait_for(lambda: supervisor.last_seq == seq and recorder.seqs()[-1:] == [seq])


class _ParkWatch(threading.Event):
    """The supervisor's wake-up event, recording when its thread waits without a timeout: parked until
    retry() or stop(), where a backoff would wait with a delay."""

    def __init__(self) -> None:
        super().__init__()
        self.parked = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is None:
            self.parked.set()
        return super().wait(timeout)


def _watch_parking(supervisor: HostSupervisor) -> _ParkWatch:
    watch = _ParkWatch()
    supervisor._wake = watch  # before start(): the thread only ever waits on this event
    return watch


def test_connects_reports_inventory_and_delivers_live_samples_in_order(harness):
    supervisor, connector, recorder = harness()
    supervisor.start()
    _connected(supervisor, connector, recorder)
    assert recorder.states()[:2] == ["connecting", "connected"]
    assert any(isinstance(e, InventoryReceived) and e.inventory.hostname == "fake" for e in recorder.events)
    connector.agent.emit(5)
    recorder.wait_for(lambda: len(recorder.seqs()) == 5)
    assert recorder.seqs() == [1, 2, 3, 4, 5]
    assert supervisor.last_seq == 5
    assert supervisor.call("agent.time")["time"] > 0


def test_after_a_drop_it_reconnects_and_backfills_without_loss_or_duplicates(harness):
    supervisor, connector, recorder = harness()
    supervisor.start()
    _connected(supervisor, connector, recorder)
    connector.agent.emit(10)
    recorder.wait_for(lambda: supervisor.last_seq == 10)
    first_agent = connector.agent
    first_agent.close()  # the link drops; the "daemon" (ring) lives on
    connector.emit_offline(25)
    recorder.wait_for(lambda: supervisor.connects >= 2 and supervisor.state == "connected")
    connector.agent.emit(5)
    _delivered_through(supervisor, recorder, 40)
    assert recorder.seqs() == list(range(1, 41))
    assert "disconnected" in recorder.states()
    backfilled = [seq for e in recorder.samples_events() if e.backfill for seq in e.batch.seqs]
    assert backfilled == list(range(11, 36))
    read = [r for r in connector.agent.requests if r.method == "samples.read"]
    assert read[0].params["since_seq"] == 10


def test_backlog_that_repeats_delivered_samples_is_deduplicated(harness):
    def careless_subscribe(params):  # an agent that resends its whole ring on subscribe
        agent = harness_connector[0].agent
        with agent._stream_lock:  # as the real agent: a sample is in the resent ring or sent live, never neither
            agent.send({"event": "samples", "data": {"samples": list(agent.ring), "dropped": 0}})
            agent.subscribed_since = 0
        agent.subscribed.set()
        return {"subscribed": True}

    harness_connector: list[FakeConnector] = []
    supervisor, connector, recorder = harness(since_seq=3, handlers={"samples.subscribe": careless_subscribe})
    harness_connector.append(connector)
    connector.emit_offline(6)
    supervisor.start()
    recorder.wait_for(lambda: supervisor.last_seq == 6)
    assert connector.agent.subscribed.wait(10)
    connector.agent.emit(2)
    _delivered_through(supervisor, recorder, 8)
    assert recorder.seqs() == [4, 5, 6, 7, 8]


def test_a_gap_in_the_live_stream_is_filled_from_the_ring(harness):
    supervisor, connector, recorder = harness()
    supervisor.start()
    _connected(supervisor, connector, recorder)
    connector.agent.emit(3)
    recorder.wait_for(lambda: supervisor.last_seq == 3)
    connector.emit_offline(4)  # 4..7 never sent live
    connector.agent.emit(1)  # 8 arrives: the supervisor must fetch 4..7 first
    _delivered_through(supervisor, recorder, 8)
    assert recorder.seqs() == list(range(1, 9))
    assert all(e.dropped == 0 for e in recorder.samples_events())


def test_samples_the_ring_rolled_over_are_counted_as_dropped(harness):
    supervisor, connector, recorder = harness(capacity=20)
    supervisor.start()
    _connected(supervisor, connector, recorder)
    connector.agent.emit(5)
    recorder.wait_for(lambda: supervisor.last_seq == 5)
    connector.agent.close()
    connector.emit_offline(50)  # 6..55 taken; the ring keeps only 36..55
    _delivered_through(supervisor, recorder, 55)
    assert recorder.seqs() == [1, 2, 3, 4, 5, *range(36, 56)]
    assert sum(e.dropped for e in recorder.samples_events()) == 30


def test_a_large_gap_is_paged_in_with_samples_read(harness):
    settings = SupervisorSettings(hello_timeout_s=10, call_timeout_s=10, read_page=10, backoff=FAST.backoff)
    supervisor, connector, recorder = harness(since_seq=5, settings=settings)
    connector.emit_offline(100)
    supervisor.start()
    _delivered_through(supervisor, recorder, 100)
    assert recorder.seqs() == list(range(6, 101))
    reads = [r.params for r in connector.agent.requests if r.method == "samples.read"]
    assert [p["since_seq"] for p in reads][:3] == [5, 15, 25] and all(p["limit"] == 10 for p in reads)
    assert connector.agent.subscribed.wait(10)
    subscribe = next(r for r in connector.agent.requests if r.method == "samples.subscribe")
    assert subscribe.params["since_seq"] == 100


def test_agent_without_epochs_whose_sequence_restarted_is_read_from_its_oldest_sample(harness):
    supervisor, connector, recorder = harness(since_seq=1000)
    connector.emit_offline(5)
    supervisor.start()
    _delivered_through(supervisor, recorder, 5)
    assert recorder.seqs() == [1, 2, 3, 4, 5]
    (reset,) = recorder.resets()
    assert reset.previous_seq == 1000 and reset.epoch is None and "restarted" in reset.reason
    assert sum(e.dropped for e in recorder.samples_events()) == 0


def test_bootstrap_steps_show_as_the_reason_beside_the_busy_state(harness):
    supervisor, connector, recorder = harness()
    connector.steps = ["bootstrapping", "probing python3 and the cache dir", "uploading the agent (412 KiB)",
                       "starting the agent"]  # fmt: skip
    supervisor.start()
    _connected(supervisor, connector, recorder)
    changes = [(e.state, e.reason) for e in recorder.events if isinstance(e, HostStateChanged)]
    assert changes[:5] == [
        ("connecting", ""),
        ("bootstrapping", ""),
        ("bootstrapping", "probing python3 and the cache dir"),
        ("bootstrapping", "uploading the agent (412 KiB)"),
        ("bootstrapping", "starting the agent"),
    ]
    assert supervisor.state == "connected" and supervisor.reason == ""


def test_a_new_epoch_resets_the_gate_even_when_the_new_sequence_is_already_past_the_held_seq(harness):
    supervisor, connector, recorder = harness(epoch="e1")
    supervisor.start()
    _connected(supervisor, connector, recorder)
    connector.agent.emit(50)
    recorder.wait_for(lambda: supervisor.last_seq == 50)
    connector.agent.close()
    connector.new_state("e2")  # a reinstalled server: its agent has taken 80 samples under a new epoch
    connector.emit_offline(80)
    recorder.wait_for(lambda: supervisor.connects >= 2 and supervisor.last_seq == 80)
    connector.agent.emit(2)
    _delivered_through(supervisor, recorder, 82)
    assert recorder.seqs() == list(range(1, 51)) + list(range(1, 83))  # nothing of the new sequence skipped
    (reset,) = recorder.resets()
    assert (reset.host, reset.previous_epoch, reset.epoch, reset.previous_seq) == ("gpu-a", "e1", "e2", 50)
    assert "e1 -> e2" in reset.reason
    assert sum(e.dropped for e in recorder.samples_events()) == 0  # a reset is an event, not a loss
    after = recorder.events[recorder.events.index(reset) :]
    assert {e.epoch for e in after if isinstance(e, SamplesReceived)} == {"e2"} and supervisor.epoch == "e2"
    read = [r for r in connector.agent.requests if r.method == "samples.read"]
    assert read[0].params["since_seq"] == 0


def test_a_stored_resume_point_is_trusted_only_within_its_epoch(harness):
    same, connector, recorder = harness(since_seq=30, since_epoch="e1", epoch="e1")
    connector.emit_offline(40)
    same.start()
    recorder.wait_for(lambda: same.last_seq == 40)
    assert recorder.seqs() == list(range(31, 41)) and not recorder.resets()

    other, connector, recorder = harness(since_seq=30, since_epoch="old", epoch="e1")
    connector.emit_offline(40)
    other.start()
    recorder.wait_for(lambda: other.last_seq == 40)
    assert recorder.seqs() == list(range(1, 41))
    assert [(r.previous_epoch, r.epoch, r.previous_seq) for r in recorder.resets()] == [("old", "e1", 30)]


def test_permanent_error_fails_without_retrying_until_asked(harness):
    supervisor, connector, recorder = harness()
    connector.failures.append(AuthFailed("root@10.0.0.1:22: authentication failed for user 'root'"))
    watch = _watch_parking(supervisor)
    supervisor.start()
    recorder.wait_for(lambda: supervisor.state == "failed")
    assert "authentication failed" in supervisor.reason
    assert isinstance(recorder.events[-1].error, AuthFailed)
    assert watch.parked.wait(10)  # waiting for retry(), not for a backoff to run out
    assert connector.opens == 1  # no retry loop against a server that refuses us
    with pytest.raises(NotConnected, match="failed"):
        supervisor.call("inventory")
    supervisor.retry()
    _connected(supervisor, connector, recorder)


def test_transient_errors_are_retried_with_backoff(harness):
    supervisor, connector, recorder = harness()
    connector.failures += [ConnectError("10.0.0.1:22: unreachable: No route to host")] * 3
    supervisor.start()
    _connected(supervisor, connector, recorder)
    assert connector.opens == 4
    reasons = [e.reason for e in recorder.events if isinstance(e, HostStateChanged) and e.state == "disconnected"]
    assert len(reasons) == 3 and all("No route to host" in r and "retrying in" in r for r in reasons)


def test_a_host_waiting_to_retry_says_when_so_a_view_can_count_down(harness):
    supervisor, connector, recorder = harness()
    connector.failures.append(ConnectError("10.0.0.1:22: unreachable: No route to host"))
    before = time.time()
    supervisor.start()
    _connected(supervisor, connector, recorder)
    waiting = next(e for e in recorder.events if isinstance(e, HostStateChanged) and e.state == "disconnected")
    delay = float(waiting.reason.rsplit("retrying in ", 1)[1].split()[0])
    assert waiting.retry_at is not None and before + delay - 0.1 <= waiting.retry_at <= waiting.ts + delay + 0.1
    assert waiting.cause == "10.0.0.1:22: unreachable: No route to host"
    connected = [e for e in recorder.events if isinstance(e, HostStateChanged) and e.state == "connected"][-1]
    assert connected.retry_at is None


def test_backoff_grows_exponentially_with_jitter_up_to_the_cap():
    backoff = Backoff(initial_s=1, factor=2, max_s=30)
    rng = random.Random(1)
    for attempt, base in enumerate([1, 2, 4, 8, 16, 30, 30]):
        delays = [backoff.delay(attempt, rng) for _ in range(50)]
        assert all(base / 2 <= d <= base for d in delays)
        assert len({round(d, 6) for d in delays}) > 1  # jittered


def test_no_samples_for_a_while_is_degraded_then_recovers(harness):
    settings = SupervisorSettings(hello_timeout_s=10, call_timeout_s=10, stall_after_s=0.5, backoff=FAST.backoff)
    supervisor, connector, recorder = harness(settings=settings)
    supervisor.start()
    recorder.wait_for(lambda: supervisor.state == "degraded")
    assert "no samples" in supervisor.reason
    connector.agent.emit(1)
    recorder.wait_for(lambda: supervisor.state == "connected" and supervisor.last_seq == 1)


def test_a_silent_link_is_dropped_and_reconnected(harness):
    settings = SupervisorSettings(hello_timeout_s=10, call_timeout_s=10, stall_after_s=0.3, backoff=FAST.backoff)
    supervisor, connector, recorder = harness(settings=settings, interval_s=0.1)
    supervisor.start()
    _connected(supervisor, connector, recorder)
    connector.agent.silent_methods.add("agent.time")  # the link still "works" but nothing comes back
    recorder.wait_for(lambda: connector.opens >= 2)
    reasons = [e.reason for e in recorder.events if isinstance(e, HostStateChanged) and e.state == "disconnected"]
    assert any("no answer from the agent" in r for r in reasons)
    recorder.wait_for(lambda: supervisor.state == "degraded" and supervisor.connects >= 2)


def test_stall_threshold_follows_a_slow_agent_sampling_interval(harness):
    settings = SupervisorSettings(hello_timeout_s=10, call_timeout_s=10, stall_after_s=0.2, backoff=FAST.backoff)
    supervisor, _connector, recorder = harness(settings=settings, interval_s=0.5)
    supervisor.start()
    recorder.wait_for(lambda: supervisor.state == "degraded")
    assert supervisor.reason == "no samples for 1.5 s"  # 3 x the agent's 0.5 s, not the 0.2 s floor


def test_stop_closes_the_connection_and_reports_disconnected(harness):
    supervisor, connector, recorder = harness()
    supervisor.start()
    _connected(supervisor, connector, recorder)
    supervisor.stop()
    assert supervisor.state == "disconnected" and recorder.states()[-1] == "disconnected"
    with pytest.raises(NotConnected):
        supervisor.call("inventory")


def test_an_agent_speaking_another_protocol_is_uploaded_again_once_and_then_connects(harness):
    supervisor, connector, recorder = harness(protocol_version=2, agent_version="0.9.0")
    supervisor.start()
    _connected(supervisor, connector, recorder)
    assert connector.reinstalls == 1 and connector.opens == 2
    assert "failed" not in recorder.states()


def test_a_mismatch_the_reupload_does_not_cure_fails_naming_both_versions(harness):
    supervisor, connector, recorder = harness(protocol_version=2, agent_version="0.9.0")
    connector.reinstall_fixes = False
    supervisor.start()
    recorder.wait_for(lambda: supervisor.state == "failed")
    assert connector.reinstalls == 1 and connector.opens == 2  # one re-upload, then no retry loop
    assert "speaks meshdeck protocol 1" in supervisor.reason and "(agent 0.9.0) speaks 2" in supervisor.reason
    assert isinstance(supervisor.error, ProtocolMismatch)


class _ExitedAttach:
    """The stream of an `attach` that wrote one error line and exited with `status` before any hello."""

    def __init__(self, status: int, line: str) -> None:
        ours, theirs = socket.socketpair()
        theirs.close()
        self._stream = SocketStream(ours)
        self.stderr = _StderrTail("gpu-a")
        self.stderr.feed(line.encode() + b"\n")
        self.status = status

    def recv(self, size: int) -> bytes:
        return self._stream.recv(size)

    def sendall(self, data: bytes) -> None:
        with contextlib.suppress(OSError):
            self._stream.sendall(data)

    def close(self) -> None:
        self._stream.close()

    def exit_status(self) -> int:
        return self.status


class _AttachConnector:
    def __init__(self, status: int, line: str) -> None:
        self.status, self.line, self.opens = status, line, 0

    def describe(self) -> str:
        return "attach stand-in"

    def open(self, progress) -> AgentLink:
        self.opens += 1
        return AgentLink(_ExitedAttach(self.status, self.line))


def test_an_old_daemon_attach_cannot_replace_fails_the_host_with_attachs_message():
    line = (
        "meshdeck-agent: error: agent 0.0.1 (protocol 0) serves /run/user/1000/meshdeck/agent.sock, not this "
        "agent 0.1.0 (protocol 1), and its pid is unknown (no readable .../agent.pid); stop it by hand"
    )
    connector = _AttachConnector(protocol.ATTACH_EXIT_VERSION_CONFLICT, line)
    recorder = Recorder()
    supervisor = HostSupervisor("gpu-a", connector, recorder, settings=FAST)
    watch = _watch_parking(supervisor)
    supervisor.start()
    try:
        recorder.wait_for(lambda: supervisor.state == "failed")
        assert supervisor.reason.startswith("gpu-a: agent 0.0.1 (protocol 0) serves ")
        assert "not this agent 0.1.0 (protocol 1)" in supervisor.reason
        assert isinstance(supervisor.error, AgentVersionConflict)
        assert watch.parked.wait(10)  # waiting for retry(), not for a backoff to run out
        assert connector.opens == 1
    finally:
        supervisor.stop()


@pytest.mark.parametrize("status", [RUN_REFUSED_EXIT, -1])  # -1: the channel closed before its exit status came
def test_an_agent_file_the_server_refused_to_run_fails_the_host_once_naming_it(status: int):
    line = f"{RUN_REFUSED_MARK}/home/ops/.cache/meshdeck/agent-x.pyz has SHA-256 {'b' * 64}, not {'a' * 64} as uploaded"
    connector = _AttachConnector(status, line)
    recorder = Recorder()
    supervisor = HostSupervisor("gpu-a", connector, recorder, settings=FAST)
    watch = _watch_parking(supervisor)
    supervisor.start()
    try:
        recorder.wait_for(lambda: supervisor.state == "failed")
        assert isinstance(supervisor.error, BootstrapError) and supervisor.error.reason == "agent_changed"
        assert supervisor.reason.startswith("gpu-a: the agent was not started: /home/ops/.cache/meshdeck/agent-x.pyz")
        assert watch.parked.wait(10) and connector.opens == 1  # not run again and again
    finally:
        supervisor.stop()


class _UploadedConnector(FakeConnector):
    """Links that say which agent version was uploaded, as SshConnector's do."""

    def open(self, progress) -> AgentLink:
        link = super().open(progress)
        link.details["agent_version"] = "0.2.0"
        return link


def test_an_agent_answering_as_another_version_than_the_one_uploaded_is_uploaded_again_once_then_fails():
    connector = _UploadedConnector(agent_version="6.6.6")
    recorder = Recorder()
    supervisor = HostSupervisor("gpu-a", connector, recorder, settings=FAST)
    supervisor.start()
    try:
        recorder.wait_for(lambda: supervisor.state == "failed")
        assert isinstance(supervisor.error, ProtocolMismatch)
        assert "answered as 6.6.6 (protocol 1), but agent 0.2.0 was uploaded" in supervisor.reason
        assert connector.reinstalls == 1 and connector.opens == 2
    finally:
        supervisor.stop()


def test_an_attach_that_crashed_otherwise_is_retried():
    connector = _AttachConnector(1, "Traceback (most recent call last): ...")
    recorder = Recorder()
    supervisor = HostSupervisor("gpu-a", connector, recorder, settings=FAST)
    supervisor.start()
    try:
        recorder.wait_for(lambda: connector.opens >= 3)
        assert "failed" not in recorder.states()
    finally:
        supervisor.stop()


class _GatedConnector(FakeConnector):
    """open() waits for `gate` and counts how many opens run at the same time."""

    running = 0
    most = 0
    guard = threading.Lock()

    def __init__(self, gate: threading.Event, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate = gate

    def open(self, progress):  # type: ignore[override]
        with _GatedConnector.guard:
            _GatedConnector.running += 1
            _GatedConnector.most = max(_GatedConnector.most, _GatedConnector.running)
        try:
            assert self.gate.wait(30)
            return super().open(progress)
        finally:
            with _GatedConnector.guard:
                _GatedConnector.running -= 1


def test_a_fleet_brings_up_at_most_its_connect_slots_at_once_and_every_host_gets_its_turn():
    """Issue 14: all 278 hosts connecting at once overran the hello timeout of 216 of them."""
    from meshdeck.remote.supervisor import ConnectSlots

    slots = ConnectSlots(3)
    gate = threading.Event()
    failing = FakeConnector()
    failing.failures = [AuthFailed("gpu-x: permission denied (publickey)")]  # failed for good: gives its turn back
    recorder = Recorder()
    connectors = [_GatedConnector(gate) for _ in range(8)]
    supervisors = [HostSupervisor("gpu-x", failing, recorder, settings=FAST, connect_slots=slots)]
    supervisors += [
        HostSupervisor(f"gpu-{i}", c, recorder, settings=FAST, connect_slots=slots) for i, c in enumerate(connectors)
    ]
    _GatedConnector.running = _GatedConnector.most = 0
    try:
        for supervisor in supervisors:
            supervisor.start()

        def waiting() -> list[HostSupervisor]:
            return [s for s in supervisors[1:] if s.state == "connecting" and "its turn" in s.reason]

        recorder.wait_for(lambda: _GatedConnector.running == 3 and len(waiting()) == 5)
        gate.set()
        recorder.wait_for(lambda: all(s.state == "connected" for s in supervisors[1:]))
        assert _GatedConnector.most == 3
        assert supervisors[0].state == "failed"
    finally:
        gate.set()
        for supervisor in supervisors:
            supervisor.stop()
        for connector in connectors:
            connector.close_all()


class _ThreadRecorder(Recorder):
    """Also notes which thread delivered each sample batch."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[tuple[str, list[int]]] = []

    def __call__(self, event: Any) -> None:
        if isinstance(event, SamplesReceived):
            self.threads.append((threading.current_thread().name, list(event.batch.seqs)))
        super().__call__(event)


def test_live_samples_go_through_the_pump_and_a_gap_through_the_hosts_own_thread():
    """The pump (one thread for every host) takes live events; a gap, which needs a samples.read, is handed to
    the host's thread, which fills it, delivers the rest of that event in order, and gives the pump back."""
    connector, recorder = FakeConnector(), _ThreadRecorder()
    pump = SamplePump(name="test-pump")
    supervisor = HostSupervisor("gpu-a", connector, recorder, settings=FAST, rng=random.Random(7), pump=pump)
    supervisor.start()
    try:
        _connected(supervisor, connector, recorder)
        connector.agent.emit(3)
        _delivered_through(supervisor, recorder, 3)
        connector.emit_offline(4)  # 4..7 never sent live
        connector.agent.emit(1)  # 8 arrives: 4..7 are read from the ring first
        _delivered_through(supervisor, recorder, 8)
        connector.agent.emit(2)
        _delivered_through(supervisor, recorder, 10)
    finally:
        supervisor.stop()
        connector.close_all()
    assert recorder.seqs() == list(range(1, 11))
    by_seq = {seq: thread for thread, seqs in recorder.threads for seq in seqs}
    assert {by_seq[seq] for seq in (1, 2, 3, 9, 10)} == {"test-pump"}
    assert {by_seq[seq] for seq in range(4, 9)} == {"meshdeck-host-gpu-a"}
