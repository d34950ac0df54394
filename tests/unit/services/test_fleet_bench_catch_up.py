"""`bench fleet`'s catch-up: when every live sample started arriving within a second and the p99 after, and when
the fleet has settled after the connect storm (the window opens then)."""

from __future__ import annotations

from meshdeck.remote.events import SamplesReceived
from meshdeck.services.fleet_benchmark import SETTLED_AGE_S, DeliveryMeter, catch_up
from meshdeck.services.synthetic_samples import sample_batch, wire_sample


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


def _delivery(host: str, *times: float) -> SamplesReceived:
    return SamplesReceived(host, sample_batch([wire_sample(i + 1, ts, gpus=1) for i, ts in enumerate(times)]), 0)


def test_the_window_opens_once_every_host_delivered_a_sample_taken_under_two_seconds_ago() -> None:
    meter = DeliveryMeter(hosts=2)
    now = 1_764_482_400.0
    meter(_delivery("a", now - 30.0, now - 0.5))  # caught up
    meter(_delivery("b", now - 25.0))  # still behind: the connect storm's backlog
    assert meter.all_connected.is_set()
    assert not meter.settled(now)
    meter(_delivery("b", now - 24.0, now - SETTLED_AGE_S + 0.1))
    assert meter.settled(now)
    assert not meter.settled(now + 5.0)  # a host that stops delivering is behind again


def test_the_window_also_waits_for_the_writer_to_hold_under_two_seconds_of_the_fleets_samples() -> None:
    meter = DeliveryMeter(hosts=2)
    now = 1_764_482_400.0
    a, b = _delivery("a", now - 0.5), _delivery("b", now - 0.5)
    meter(a)
    meter(b)
    per_second = a.batch.cells + b.batch.cells  # one sample per host per second
    assert meter.cells_per_second() == per_second
    assert meter.settled(now, writer_backlog=0)
    assert meter.settled(now, writer_backlog=int(SETTLED_AGE_S * per_second) - 1)
    assert not meter.settled(now, writer_backlog=int(SETTLED_AGE_S * per_second))  # the storm is still being written


def test_the_agents_start_from_bytecode_compiled_once_where_it_was_missing(tmp_path, monkeypatch) -> None:
    import types

    from meshdeck.services import fleet_benchmark

    package = tmp_path / "fake_agent"
    (package / "gpu").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "gpu" / "catalog.py").write_text("X = 1\n")
    monkeypatch.setattr(fleet_benchmark, "meshdeck_agent", types.SimpleNamespace(__file__=str(package / "__init__.py")))
    assert fleet_benchmark.agent_bytecode() == "compiled now (2 modules had none)"
    assert list((package / "gpu" / "__pycache__").glob("catalog.*.pyc"))
    assert fleet_benchmark.agent_bytecode() == "compiled before the run"
