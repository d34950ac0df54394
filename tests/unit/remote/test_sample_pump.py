"""The sample pump: one thread, hosts' feeds drained round-robin, a failing feed never stops the others."""

from __future__ import annotations

import logging
import threading

import pytest
from meshdeck.remote import sample_pump
from meshdeck.remote.sample_pump import SamplePump


class _Feed:
    """`events` to take, `budget` at a time; records the order of all feeds' takes in `log`."""

    def __init__(self, name: str, events: int, log: list[str], done: threading.Event | None = None) -> None:
        self.name, self.left, self.log, self.done = name, events, log, done
        self.budgets: list[int] = []

    def drain(self, budget: int) -> bool:
        self.budgets.append(budget)
        taken = min(budget, self.left)
        self.left -= taken
        self.log.extend([self.name] * taken)
        if not self.left and self.done is not None:
            self.done.set()
        return self.left > 0


def test_a_backlog_is_taken_a_budget_at_a_time_so_another_host_is_not_kept_waiting():
    log: list[str] = []
    gate, both = threading.Event(), threading.Event()
    pump = SamplePump(name="test-pump", budget=3)
    pump.schedule(_Gate(gate))  # holds the pump's thread until both feeds are scheduled
    backlog, live = _Feed("backlog", 30, log), _Feed("live", 2, log, both)
    pump.schedule(backlog)
    pump.schedule(live)
    gate.set()
    assert both.wait(10)
    assert log.index("live") <= 3  # after one turn of the backlog, not after its 30 events
    _wait(lambda: backlog.left == 0)
    assert set(backlog.budgets) == {3} and len(backlog.budgets) == 10


def test_scheduling_a_feed_that_already_waits_drains_it_once():
    log: list[str] = []
    gate = threading.Event()
    pump = SamplePump(name="test-pump")
    blocker = _Gate(gate)
    pump.schedule(blocker)
    assert blocker.started.wait(10)
    feed = _Feed("a", 1, log)
    for _ in range(5):
        pump.schedule(feed)
    assert pump.waiting() == 1
    gate.set()
    _wait(lambda: pump.waiting() == 0 and feed.left == 0)
    assert feed.budgets == [sample_pump.EVENTS_PER_TURN]


def test_a_feed_that_raises_is_logged_and_the_pump_serves_the_others(caplog):
    log: list[str] = []
    done = threading.Event()
    pump = SamplePump(name="test-pump")

    class Broken:
        def drain(self, budget: int) -> bool:
            raise RuntimeError("decoder bug")

    with caplog.at_level(logging.ERROR, logger="meshdeck.remote.sample_pump"):
        pump.schedule(Broken())
        pump.schedule(_Feed("ok", 1, log, done))
        assert done.wait(10)
    assert log == ["ok"]
    assert "decoder bug" in caplog.text


def test_the_thread_ends_when_idle_and_the_next_schedule_starts_it(monkeypatch):
    monkeypatch.setattr(sample_pump, "IDLE_END_S", 0.05)
    log: list[str] = []
    pump = SamplePump(name="test-pump")
    first = threading.Event()
    pump.schedule(_Feed("a", 1, log, first))
    assert first.wait(10)
    _wait(lambda: pump.thread is None)
    second = threading.Event()
    pump.schedule(_Feed("b", 1, log, second))
    assert second.wait(10)
    assert log == ["a", "b"]


def test_a_budget_below_one_event_is_refused():
    with pytest.raises(ValueError, match="budget"):
        SamplePump(budget=0)


class _Gate:
    """A feed whose first drain waits for `gate`: what is scheduled meanwhile queues behind it."""

    def __init__(self, gate: threading.Event) -> None:
        self.gate = gate
        self.started = threading.Event()

    def drain(self, budget: int) -> bool:
        self.started.set()
        assert self.gate.wait(10)
        return False


def _wait(predicate, timeout: float = 10.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return
        done.wait(0.01)
    raise AssertionError("condition not met")
