"""The writer's inbox is bounded in values: a submitter waits while the writer is behind (the agents'
rings hold the samples meanwhile), and a stop releases every waiting submitter at once."""

from __future__ import annotations

import threading
import time

import pytest
from meshdeck.core.foreground import ForegroundGate
from meshdeck.services.synthetic_samples import sample_batch, wire_sample
from meshdeck.store.database import Database
from meshdeck.store.inbox import BoundedInbox, Empty, InboxClosed
from meshdeck.store.writer import SampleWriter, WriterSettings

T0 = 1_764_482_400.0


def test_put_waits_while_the_inbox_holds_its_capacity_and_an_idle_key_takes_anything() -> None:
    inbox = BoundedInbox(100)
    inbox.put("huge", 1000, key="flood")  # a key with nothing queued takes one item however large
    with pytest.raises(TimeoutError):
        inbox.put("more", 1, key="flood", timeout=0.05)
    assert inbox.get(timeout=0) == "huge"
    inbox.put("a", 60, key="flood")
    inbox.put("b", 40, key="flood")
    with pytest.raises(TimeoutError):
        inbox.put("c", 1, key="flood", timeout=0.05)
    inbox.put_token("flush token")  # tokens never wait
    assert inbox.held == 100 and inbox.waits == 0


def test_a_flood_never_holds_back_another_host_and_is_taken_in_turn() -> None:
    inbox = BoundedInbox(100)
    inbox.put("flood 0", 50, key="flood")
    inbox.put("flood 1", 50, key="flood")
    with pytest.raises(TimeoutError):
        inbox.put("flood 2", 50, key="flood", timeout=0.05)  # full for the flooding host...
    inbox.put("healthy 1", 1, key="healthy", timeout=0.05)  # ...not for a host with nothing queued
    assert [inbox.get(timeout=0), inbox.get(timeout=0)] == ["flood 0", "healthy 1"]  # round-robin, not FIFO
    assert inbox.get(timeout=0) == "flood 1"


def test_a_token_is_handed_out_only_after_everything_put_before_it() -> None:
    inbox = BoundedInbox(1000)
    inbox.put("a1", 1, key="a")
    inbox.put("a2", 1, key="a")
    inbox.put("b1", 1, key="b")
    inbox.put_token("flush")
    inbox.put("b2", 1, key="b")  # after the flush: it waits behind it
    taken = [inbox.get(timeout=0) for _ in range(5)]
    assert taken.index("flush") == 3 and set(taken[:3]) == {"a1", "a2", "b1"} and taken[4] == "b2"


def test_a_waiting_put_proceeds_when_the_consumer_takes_an_item() -> None:
    inbox = BoundedInbox(10)
    inbox.put("first", 10, key="gpu-a")
    done = threading.Event()
    producer = threading.Thread(target=lambda: (inbox.put("second", 5, key="gpu-a"), done.set()))
    producer.start()
    assert not done.wait(0.1)  # it waits
    assert inbox.get(timeout=1) == "first"
    assert done.wait(5)
    producer.join()
    assert inbox.waits == 1


def test_close_releases_every_waiting_put_at_once_and_refuses_later_ones() -> None:
    inbox = BoundedInbox(1)
    inbox.put("full", 1, key="gpu-a")
    errors: list[BaseException] = []

    def put() -> None:
        try:
            inbox.put("blocked", 1, key="gpu-a")
        except InboxClosed as exc:
            errors.append(exc)

    waiters = [threading.Thread(target=put) for _ in range(3)]
    for thread in waiters:
        thread.start()
    started = time.monotonic()
    inbox.close()
    for thread in waiters:
        thread.join(5)
    assert len(errors) == 3 and time.monotonic() - started < 2
    with pytest.raises(InboxClosed):
        inbox.put("late", 1, key="gpu-b")
    inbox.put_token("stop", control=True)  # the writer's own stop token still gets in
    assert [inbox.get(timeout=0), inbox.get(timeout=0)] == ["full", "stop"]


def test_a_writer_far_behind_makes_submitters_wait_and_a_stop_releases_them(db: Database) -> None:
    batch = sample_batch([wire_sample(seq, T0 + seq, gpus=8) for seq in range(1, 11)])
    writer = SampleWriter(db, settings=WriterSettings(inbox_cells=batch.cells, commit_interval_s=30.0)).start()
    stall = threading.Event()
    original = writer._stage  # hold the writer thread inside its staging step

    def stalled_stage(ingest, item):  # type: ignore[no-untyped-def]
        stall.wait(30)
        original(ingest, item)

    writer._stage = stalled_stage  # type: ignore[method-assign]
    writer.submit_samples("gpu-a", batch)  # taken by the thread, which now stalls
    writer.submit_samples("gpu-a", batch)  # fills the inbox
    outcome: list[str] = []

    def submit() -> None:
        try:
            writer.submit_samples("gpu-a", batch)
            outcome.append("submitted")
        except RuntimeError:
            outcome.append("refused: stopping")

    blocked = threading.Thread(target=submit)
    blocked.start()
    blocked.join(0.3)
    assert blocked.is_alive() and outcome == []  # waiting for room: memory does not grow with the backlog
    stopper = threading.Thread(target=writer.stop)
    stopper.start()
    blocked.join(5)
    assert outcome == ["refused: stopping"]
    stall.set()
    stopper.join(30)
    assert not writer.running
    assert writer.stats().inbox_waits == 1


def test_a_quick_stop_commits_what_was_staged_and_leaves_the_queue_to_the_agents(db: Database) -> None:
    first = sample_batch([wire_sample(seq, T0 + seq, gpus=1) for seq in range(1, 4)])
    queued = sample_batch([wire_sample(seq, T0 + seq, gpus=1) for seq in range(4, 7)])
    writer = SampleWriter(db, settings=WriterSettings(commit_interval_s=30.0)).start()
    staged = threading.Event()
    release = threading.Event()
    original = writer._stage

    def stage_then_hold(ingest, item):  # type: ignore[no-untyped-def]
        original(ingest, item)
        staged.set()
        release.wait(30)

    writer._stage = stage_then_hold  # type: ignore[method-assign]
    writer.submit_samples("gpu-a", first)
    assert staged.wait(10)  # the thread holds `first` staged
    writer.submit_samples("gpu-a", queued)  # waits in the inbox
    flushed: list[bool] = []
    flusher = threading.Thread(target=lambda: flushed.append(writer.flush(30)))
    flusher.start()
    deadline = time.monotonic() + 10
    while len(writer._inbox) < 2 and time.monotonic() < deadline:  # the batch and the flush token wait
        time.sleep(0.01)
    stopper = threading.Thread(target=lambda: writer.stop(roll_up_open_buckets=False, commit_queued=False))
    stopper.start()
    flusher.join(10)
    assert flushed == [False]  # what it waited for was dropped: never acknowledged
    release.set()
    stopper.join(30)
    assert writer.committed_seq("gpu-a") == 3  # the resume point: seqs 4..6 come again from the agent


def test_the_writer_stages_nothing_while_the_console_holds_the_foreground_gate(db: Database) -> None:
    foreground = ForegroundGate(max_step_aside_s=30)
    writer = SampleWriter(db, settings=WriterSettings(commit_interval_s=0.05), gate=foreground).start()
    try:
        with foreground.hold():
            writer.submit_samples("gpu-a", sample_batch([wire_sample(seq, T0 + seq, gpus=1) for seq in (1, 2)]))
            assert not writer.flush(0.3)  # waits for the redraw to end
            assert writer.committed_seq("gpu-a") is None
        assert writer.flush(10) and writer.committed_seq("gpu-a") == 2
        assert foreground.stepped_aside_s > 0.2
    finally:
        writer.stop()


class _CountingCondition(threading.Condition):
    entered = 0  # waits begun
    wakeups = 0  # waits returned
    guard = threading.Lock()

    def wait(self, timeout: float | None = None) -> bool:
        with _CountingCondition.guard:
            _CountingCondition.entered += 1
        result = super().wait(timeout)
        with _CountingCondition.guard:
            _CountingCondition.wakeups += 1
        return result


def _until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


def test_taking_an_item_wakes_only_the_putters_it_lets_in_not_every_waiting_host(monkeypatch) -> None:
    """At fleet size every host's supervisor can be waiting at once: one take must not wake them all."""
    monkeypatch.setattr("meshdeck.store.inbox.threading.Condition", _CountingCondition)
    hosts, cost = 40, 10
    inbox = BoundedInbox(hosts * cost)
    for index in range(hosts):  # full, and every host has one item queued
        inbox.put(("first", index), cost, key=index)
    _CountingCondition.entered = _CountingCondition.wakeups = 0
    threads = [
        threading.Thread(target=inbox.put, args=(("second", index), cost), kwargs={"key": index, "timeout": 30})
        for index in range(hosts)
    ]
    for thread in threads:
        thread.start()
    _until(lambda: _CountingCondition.entered >= hosts)  # every putter waits
    _CountingCondition.wakeups = 0
    taken = []
    for _ in range(hosts):  # one take at a time, as the writer takes; its host's putter then gets in
        taken.append(inbox.get(timeout=5))
        _until(lambda: len(inbox) >= hosts)
    for thread in threads:
        thread.join(5)
    assert sorted(taken) == [("first", index) for index in range(hosts)]
    assert sorted(inbox.get(timeout=0) for _ in range(hosts)) == [("second", index) for index in range(hosts)]
    # one wake per host let in (a few spurious at most); waking every waiting host on each take was ~hosts²/2
    assert _CountingCondition.wakeups <= 2 * hosts


def test_a_flooding_host_waits_on_its_own_share_while_others_still_queue() -> None:
    inbox = BoundedInbox(capacity=100, key_capacity=30)
    for _ in range(3):
        inbox.put("flood", 10, key="flooding")  # its share, 30, is now full
    done = threading.Event()
    thread = threading.Thread(target=lambda: (inbox.put("flood", 10, key="flooding"), done.set()))
    thread.start()
    assert not done.wait(0.2)  # the fleet's inbox has room (30 of 100): the flood waits on its own share
    for host in ("gpu-a", "gpu-b", "gpu-c"):
        inbox.put("sample", 10, key=host, timeout=1)  # other hosts are not held back
    taken = [inbox.get(timeout=0) for _ in range(3)]  # round-robin: one flood item, then gpu-a, gpu-b
    assert taken == ["flood", "sample", "sample"]
    inbox.get(timeout=0)
    inbox.get(timeout=0)  # the flood's share drains below half: its putter is let in
    assert done.wait(5)
    thread.join(5)


def _filled() -> BoundedInbox:
    inbox = BoundedInbox(1000)
    for item, key in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("c1", "c")):
        inbox.put(item, 1, key=key)
    inbox.put_token("flush")
    inbox.put("b2", 1, key="b")
    return inbox


def test_a_drain_takes_what_gets_would_take_in_their_order_under_one_hold_of_the_lock() -> None:
    one_by_one = _filled()
    expected = [one_by_one.get(timeout=0) for _ in range(6)]
    inbox = _filled()
    acquired = []

    class CountingLock:
        def __init__(self, lock) -> None:
            self.lock = lock

        def __enter__(self):
            acquired.append(1)
            return self.lock.__enter__()

        def __exit__(self, *exc):
            return self.lock.__exit__(*exc)

        def __getattr__(self, name):
            return getattr(self.lock, name)

    inbox._cond = CountingLock(inbox._cond)  # type: ignore[assignment]
    assert inbox.get_many(4, timeout=0) == expected[:4]  # at most `most`, round-robin, the token as a barrier
    assert inbox.get_many(10, timeout=0) == expected[4:]
    assert len(acquired) == 2
    assert inbox.held == 0 and len(inbox) == 0
    with pytest.raises(Empty):
        inbox.get_many(10, timeout=0.01)


def test_a_drain_lets_waiting_putters_in() -> None:
    inbox = BoundedInbox(10)
    inbox.put("first", 10, key="a")
    put_done = threading.Event()
    threading.Thread(target=lambda: (inbox.put("second", 10, key="a"), put_done.set()), daemon=True).start()
    time.sleep(0.05)
    assert not put_done.is_set()
    assert inbox.get_many(8, timeout=0) == ["first"]
    assert put_done.wait(5)
    assert inbox.get_many(8, timeout=1) == ["second"]
