"""`bench fleet`'s catch-up keys: when every live sample started arriving within a second, and the p99 after."""

from __future__ import annotations

from meshdeck.services.fleet_benchmark import catch_up


def test_a_window_that_opens_on_a_backlog_says_when_the_client_caught_up_and_the_p99_after() -> None:
    # 10 s of 2-second-old samples (a backlog the connect storm left), then 50 s of fresh ones
    delivered = [t * 0.5 for t in range(120)]
    delays = [2.0 if at < 10 else 0.05 + 0.001 * (i % 7) for i, at in enumerate(delivered)]
    result = catch_up(delays, delivered, window_s=60.0)
    assert result["caught_up_s"] == 9.5
    assert result["delay_p99_ms_after_catch_up"] == 56.0


def test_a_client_that_never_fell_behind_caught_up_at_zero_and_one_that_never_caught_up_has_no_after() -> None:
    assert catch_up([0.01, 0.02], [1.0, 2.0], 60.0) == {"caught_up_s": 0.0, "delay_p99_ms_after_catch_up": 20.0}
    assert catch_up([5.0, 5.0], [1.0, 59.0], 60.0) == {"caught_up_s": 59.0, "delay_p99_ms_after_catch_up": None}
    assert catch_up([], [], 60.0) == {"caught_up_s": 0.0, "delay_p99_ms_after_catch_up": None}
