"""The Qt bridge delivers fleet events from other threads in order on the GUI thread; jobs run off it."""

from __future__ import annotations

import threading

import pytest
from meshdeck.remote.events import AgentEvent, HostStateChanged, InventoryReceived, SamplesReceived
from meshdeck.ui.bridge import SAMPLES_PER_CHUNK, FleetBridge
from meshdeck.ui.jobs import JobCancelled, JobRunner
from meshdeck_agent.wire_inventory import Inventory
from wire_samples import wire_batch


def test_events_posted_from_a_fleet_thread_arrive_as_typed_signals_on_the_gui_thread(qtbot) -> None:
    bridge = FleetBridge()
    seen: list[tuple[str, object, bool]] = []
    gui_thread = threading.current_thread()

    def record(kind: str):
        return lambda event: seen.append((kind, event, threading.current_thread() is gui_thread))

    bridge.host_state_changed.connect(record("state"))
    bridge.samples_received.connect(record("samples"))
    bridge.agent_event.connect(record("agent"))
    bridge.inventory_received.connect(record("inventory"))
    events = [
        HostStateChanged("demo-a", "connecting"),
        InventoryReceived("demo-a", Inventory(hostname="demo-a")),
        SamplesReceived("demo-a", wire_batch(2, 1e9, gpus=1)),
        AgentEvent("demo-a", "worker", {"id": "w1", "state": "running"}),
        HostStateChanged("demo-a", "connected"),
    ]
    poster = threading.Thread(target=lambda: [bridge.post(e) for e in events])
    poster.start()
    poster.join()
    qtbot.waitUntil(lambda: len(seen) == len(events), timeout=30000)
    # host states and inventories first, in their order; then the rest in theirs
    assert [kind for kind, _, _ in seen] == ["state", "inventory", "state", "samples", "agent"]
    assert [event for _, event, _ in seen] == [events[0], events[1], events[4], events[2], events[3]]
    assert all(on_gui for _, _, on_gui in seen)
    bridge.stop()


def test_a_host_and_its_gpus_are_known_before_the_samples_queued_ahead_of_them(qtbot) -> None:
    bridge = FleetBridge(budget_s=0.0)  # one event per drain
    bridge.stop()
    seen: list[str] = []
    bridge.samples_received.connect(lambda event: seen.append(f"samples {event.host}"))
    bridge.host_state_changed.connect(lambda event: seen.append(f"state {event.host} {event.state}"))
    bridge.inventory_received.connect(lambda event: seen.append(f"inventory {event.host}"))
    for host in range(50):
        bridge.post(SamplesReceived(f"old-{host}", wire_batch(1, 1e9, gpus=1)))
    bridge.post(HostStateChanged("late", "connected"))
    bridge.post(InventoryReceived("late", Inventory(hostname="late")))
    bridge.post(HostStateChanged("late", "disconnected", "gone"))
    assert bridge.backlog == 53 and bridge.cells_waiting > 0
    for _ in range(4):
        bridge.drain()
    assert seen == ["state late connected", "inventory late", "state late disconnected", "samples old-0"]
    while bridge.drain():
        pass
    assert bridge.backlog == 0 and bridge.cells_waiting == 0 and len(seen) == 53


def test_a_large_backfill_is_delivered_in_chunks_spread_over_ticks_in_order(qtbot) -> None:
    bridge = FleetBridge(budget_s=0.0)  # one event per tick: the smallest budget
    bridge.stop()
    chunks: list[SamplesReceived] = []
    bridge.samples_received.connect(chunks.append)
    backfill = SamplesReceived("demo-b", wire_batch(3 * SAMPLES_PER_CHUNK + 5, 1e9, gpus=1), dropped=7)
    bridge.post(backfill)
    bridge.post(HostStateChanged("demo-b", "connected"))
    assert bridge.drain() == 1 and not chunks  # the host's state goes ahead of the samples
    assert bridge.drain() == 1
    assert len(chunks) == 1 and chunks[0].dropped == 7
    while bridge.backlog:
        bridge.drain()
    seqs = [seq for chunk in chunks for seq in chunk.batch.seqs]
    assert seqs == list(range(1, 3 * SAMPLES_PER_CHUNK + 6))
    assert all(len(c.batch) <= SAMPLES_PER_CHUNK for c in chunks)
    assert sum(c.dropped for c in chunks) == 7  # the loss is reported once


def test_a_job_reports_progress_and_its_result_on_the_gui_thread(qtbot) -> None:
    runner = JobRunner()
    progress: list[tuple[float, str]] = []

    def work(p):
        p.report(0.5, "half")
        p.report(None, "unknown")
        return 42

    job = runner.start("plan", work)
    job.progressed.connect(lambda f, m: progress.append((f, m)))
    with qtbot.waitSignal(job.succeeded, timeout=30000) as blocker:
        pass
    assert blocker.args == [42]
    assert progress == [(0.5, "half"), (-1.0, "unknown")]
    qtbot.waitUntil(lambda: runner.running("plan") is None, timeout=30000)
    assert job.wait(5)


def test_starting_a_job_again_lets_the_old_one_go_at_once_and_runs_the_new_one_after_its_worker(qtbot) -> None:
    """The GUI thread never joins a worker: the old job (whose work ignores cancellation) ends at once, and the
    new one runs only once the old worker returned — one worker per name, none waited for."""
    runner = JobRunner()
    release = threading.Event()
    order: list[str] = []

    def stubborn(_p):
        release.wait(30)
        order.append("old returned")
        return "stale"

    first = runner.start("history", stubborn)
    stale, cancelled = [], []
    first.succeeded.connect(stale.append)
    first.cancelled.connect(lambda: cancelled.append(True))
    second = runner.start("history", lambda p: order.append("new ran") or "fresh")
    qtbot.waitUntil(lambda: cancelled == [True], timeout=5000)  # the old job ended before its worker did
    assert first.is_running() and not second.started and order == []  # the new one waits for that worker
    assert runner.running("history") is second
    release.set()
    with qtbot.waitSignal(second.succeeded, timeout=30000) as blocker:
        pass
    assert blocker.args == ["fresh"] and order == ["old returned", "new ran"]
    assert stale == []  # the old job's late result is never delivered
    assert first.wait(5) and second.wait(5)


def test_a_new_job_overtakes_an_old_worker_that_ignores_its_cancellation_too_long(qtbot) -> None:
    runner = JobRunner(overtake_after_s=0.2)
    release = threading.Event()
    first = runner.start("plan", lambda _p: release.wait(30))
    second = runner.start("plan", lambda _p: "fresh")
    with qtbot.waitSignal(second.succeeded, timeout=30000):
        pass
    assert first.is_running()  # still blocked: the new job did not wait for it for good
    release.set()
    assert first.wait(5)


def test_cancelling_a_job_without_side_effects_ends_it_at_once_and_drops_its_late_result(qtbot) -> None:
    runner = JobRunner()
    release = threading.Event()
    job = runner.start("plan", lambda _p: release.wait(30) and "late", abandon_on_cancel=True)
    results: list[object] = []
    job.succeeded.connect(results.append)
    with qtbot.waitSignal(job.ended, timeout=5000):
        job.cancel()
    assert job.is_running() and runner.running("plan") is None
    release.set()
    assert job.wait(5)
    qtbot.wait(50)
    assert results == []


def test_a_job_cancelled_before_its_turn_never_runs(qtbot) -> None:
    runner = JobRunner()
    release = threading.Event()
    ran: list[str] = []
    runner.start("launch", lambda _p: release.wait(30))
    waiting = runner.start("launch", lambda _p: ran.append("ran"))
    with qtbot.waitSignal(waiting.cancelled, timeout=5000):
        waiting.cancel()
    release.set()
    assert runner.shutdown(5)
    qtbot.wait(50)
    assert ran == [] and not waiting.started


def test_a_failing_job_reports_one_line_and_a_cancelled_one_does_not_fail(qtbot) -> None:
    runner = JobRunner()

    def broken(_p):
        raise RuntimeError("agent on demo-b refused: bad_params")

    job = runner.start("preflight", broken)
    with qtbot.waitSignal(job.failed, timeout=30000) as blocker:
        pass
    assert blocker.args == ["agent on demo-b refused: bad_params"]

    def cancelled_work(p):
        p.cancelled.set()
        raise JobCancelled()

    other = runner.start("launch", cancelled_work)
    with qtbot.waitSignal(other.cancelled, timeout=30000):
        pass
    assert runner.shutdown(5)


@pytest.mark.parametrize("fraction, expected", [(-1.0, 0.0), (2.0, 1.0), (0.25, 0.25)])
def test_progress_fractions_are_clamped(qtbot, fraction: float, expected: float) -> None:
    runner = JobRunner()
    job = runner.start("clamp", lambda p: p.report(fraction, "x"))
    with qtbot.waitSignal(job.progressed, timeout=30000) as blocker:
        pass
    assert blocker.args[0] == expected
    assert job.wait(5)


def test_a_flood_the_window_cannot_absorb_is_shed_oldest_first_and_states_are_never_lost(qtbot) -> None:
    bridge = FleetBridge(max_cells=wire_batch(10, 1e9, gpus=1).cells * 20, max_events=100)
    bridge.stop()  # nothing drains: the GUI thread is "busy"
    for second in range(100):  # ten times what fits
        bridge.post(SamplesReceived("flood", wire_batch(10, 1e9 + 10 * second, gpus=1)))
    bridge.post(HostStateChanged("calm", "connected"))
    for line in range(1000):
        bridge.post(AgentEvent("flood", "log", {"line": line}))
    assert bridge.skipped["flood"] >= 800  # at most what fits is held, whatever arrives
    assert bridge.shed_events >= 900
    states: list[HostStateChanged] = []
    batches: list[SamplesReceived] = []
    logs: list[AgentEvent] = []
    bridge.host_state_changed.connect(states.append)
    bridge.samples_received.connect(batches.append)
    bridge.agent_event.connect(logs.append)
    while bridge.backlog:
        bridge.drain(budget_s=1.0)
    assert [s.host for s in states] == ["calm"]
    delivered = [seq for b in batches for seq in b.batch.seqs]
    assert len(delivered) + bridge.skipped["flood"] == 1000  # every sample either delivered or counted
    assert batches[0].skipped_before == bridge.skipped["flood"]  # the first one after the shed span says so
    assert [e.data["line"] for e in logs] == list(range(1000 - len(logs), 1000))  # the newest kept, in order
