"""The sample pump: one thread, hosts' feeds drained round-robin in turns of time, a failing feed never stops the
others."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from meshdeck.core.foreground import ForegroundGate
from meshdeck.remote import sample_pump
from meshdeck.remote.sample_pump import SamplePump


class _Feed:
    """`events` to take, each costing `cost_s` of work, until the turn ends; records the order of all feeds'
    takes in `log` and how many each turn took in `turns`."""

    def __init__(
        self, name: str, events: int, log: list[str], done: threading.Event | None = None, cost_s: float = 0.0
    ) -> None:
        self.name, self.left, self.log, self.done, self.cost_s = name, events, log, done, cost_s
        self.turns: list[int] = []

    def drain(self, until: float) -> bool:
        taken = 0
        while self.left:
            time.sleep(self.cost_s)
            self.left -= 1
            taken += 1
            self.log.append(self.name)
            if time.perf_counter() >= until:
                break
        self.turns.append(taken)
        if not self.left and self.done is not None:
            self.done.set()
        return self.left > 0


def test_a_backlog_is_taken_a_turn_at_a_time_so_another_host_is_not_kept_waiting():
    log: list[str] = []
    gate, both = threading.Event(), threading.Event()
    pump = SamplePump(name="test-pump", turn_s=0.02)
    pump.schedule(_Gate(gate))  # holds the pump's thread until both feeds are scheduled
    backlog, live = _Feed("backlog", 40, log, cost_s=0.005), _Feed("live", 2, log, both)
    pump.schedule(backlog)
    pump.schedule(live)
    gate.set()
    assert both.wait(10)
    assert log.index("live") == backlog.turns[0] < 40  # after the backlog's first turn, not after its 40 events
    _wait(lambda: backlog.left == 0)
    assert len(backlog.turns) > 1 and sum(backlog.turns) == 40


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
    assert feed.turns == [1]


def test_a_feed_that_raises_is_logged_and_the_pump_serves_the_others(caplog):
    log: list[str] = []
    done = threading.Event()
    pump = SamplePump(name="test-pump")

    class Broken:
        def drain(self, until: float) -> bool:
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


def test_a_turn_of_no_time_is_refused():
    with pytest.raises(ValueError, match="turn"):
        SamplePump(turn_s=0)


def test_no_turn_starts_while_the_console_holds_the_foreground_gate():
    log: list[str] = []
    done = threading.Event()
    foreground = ForegroundGate(max_step_aside_s=30)
    pump = SamplePump(name="test-pump", gate=foreground)
    with foreground.hold():
        pump.schedule(_Feed("host", 3, log, done))
        time.sleep(0.2)
        assert log == []  # the pump waits for the redraw, not the other way round
    assert done.wait(10) and log == ["host"] * 3
    assert foreground.stepped_aside_s > 0.1


class _Gate:
    """A feed whose first drain waits for `gate`: what is scheduled meanwhile queues behind it."""

    def __init__(self, gate: threading.Event) -> None:
        self.gate = gate
        self.started = threading.Event()

    def drain(self, until: float) -> bool:
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
