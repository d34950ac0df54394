"""A client's problems are logged `burst` times, then counted and summarised once per interval."""

from __future__ import annotations

import logging

from meshdeck_agent.lograte import LogBudget


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _messages(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records]


def test_the_first_burst_is_logged_then_one_summary_per_interval_then_one_at_flush(caplog):
    clock = _Clock()
    budget = LogBudget(logging.getLogger("meshdeck_agent.test"), "client-3", burst=2, interval_s=60.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="meshdeck_agent.test"):
        for number in range(1000):
            budget.log(logging.WARNING, "bad line %d", number)
        assert _messages(caplog) == [
            "client-3: bad line 0",
            "client-3: bad line 1",
            "client-3: further problems from this client are counted and summarised every 60 s",
        ]
        clock.now += 61.0
        budget.log(logging.WARNING, "bad line %d", 1000)
        assert _messages(caplog)[-1] == "client-3: 999 more problems in the last 61.0 s were not logged"
        budget.log(logging.WARNING, "bad line %d", 1001)
        clock.now += 5.0
        budget.flush()
        assert _messages(caplog)[-1] == "client-3: 1 more problems in the last 5.0 s were not logged"
        budget.flush()
    assert len(caplog.records) == 5


def test_a_client_within_its_budget_leaves_no_summary(caplog):
    budget = LogBudget(logging.getLogger("meshdeck_agent.test"), "client-4", burst=5)
    with caplog.at_level(logging.WARNING, logger="meshdeck_agent.test"):
        budget.log(logging.WARNING, "one bad line")
        budget.flush()
    assert _messages(caplog) == ["client-4: one bad line"]
