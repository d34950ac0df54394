"""The foreground gate: background threads step aside while it is held, never longer than its bound, and
at once when it is not held."""

from __future__ import annotations

import threading
import time

from meshdeck.core.foreground import ForegroundGate


def _step_aside_in_a_thread(gate: ForegroundGate) -> tuple[threading.Thread, list[float]]:
    returned: list[float] = []
    thread = threading.Thread(target=lambda: (gate.step_aside(), returned.append(time.perf_counter())))
    thread.start()
    return thread, returned


def test_an_open_gate_lets_a_step_aside_through_at_once() -> None:
    gate = ForegroundGate(max_step_aside_s=30)
    started = time.perf_counter()
    gate.step_aside()
    assert time.perf_counter() - started < 1 and gate.stepped_aside_s == 0 and not gate.held


def test_a_held_gate_keeps_the_background_waiting_until_the_outermost_hold_ends() -> None:
    gate = ForegroundGate(max_step_aside_s=30)
    with gate.hold():
        with gate.hold():
            thread, returned = _step_aside_in_a_thread(gate)
            time.sleep(0.1)
            assert returned == [] and gate.held
        time.sleep(0.1)
        assert returned == [] and gate.held  # the outer hold still runs
        released = time.perf_counter()
    thread.join(10)
    assert returned and returned[0] >= released and not gate.held
    assert 0.15 < gate.stepped_aside_s < 10


def test_a_hold_that_never_ends_costs_the_background_one_bound_per_step() -> None:
    gate = ForegroundGate(max_step_aside_s=0.05)
    with gate.hold():
        started = time.perf_counter()
        gate.step_aside()
        gate.step_aside()
        waited = time.perf_counter() - started
    assert 0.1 <= waited < 5


def test_a_hold_ends_on_an_exception_too() -> None:
    gate = ForegroundGate(max_step_aside_s=30)
    try:
        with gate.hold():
            raise RuntimeError("a redraw failed")
    except RuntimeError:
        pass
    assert not gate.held
