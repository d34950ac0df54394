"""The serving arithmetic on top of any speed model: KV-capped concurrency, Little's law, queueing, SLA search."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck.core.errors import InputError
from meshdeck.core.serving import (
    SOURCE_KERNELS,
    Deployment,
    EngineShape,
    SpeedQuery,
    SpeedSource,
    StepTimes,
    Workload,
    aggregated_estimate,
    capacity_per_replica,
    pareto_front,
)


class LinearSpeed:
    """TPOT grows by 1 ms per request in the batch from 10 ms; TTFT 100 ms + 2 ms per request. Counts questions."""

    def __init__(self, *, answer_up_to: int = 10**9) -> None:
        self.asked: list[SpeedQuery] = []
        self.answer_up_to = answer_up_to
        self.source = SpeedSource(SOURCE_KERNELS, "test tables")

    def times(self, query: SpeedQuery) -> StepTimes | None:
        self.asked.append(query)
        if query.batch_per_rank > self.answer_up_to:
            return None
        return StepTimes(100.0 + 2.0 * query.batch_per_rank, 10.0 + query.batch_per_rank)


class FixedSpeed:
    def __init__(self, label: str) -> None:
        self.source = SpeedSource("roofline", label)

    def times(self, query: SpeedQuery) -> StepTimes | None:
        return StepTimes(50.0, 20.0)


def deployment(*, dp: int = 8, instances: int = 1, kv: int = 100_000, seqs: int = 1024) -> Deployment:
    return Deployment(EngineShape(1, 1, dp, True, 8), instances, kv, seqs, 8192)


def test_workload_errors_name_the_flag_and_bound_huge_values() -> None:
    for kwargs, flag in (
        ({"input_tokens": 0}, "--isl"),
        ({"output_tokens": -1}, "--osl"),
        ({"concurrency": 10**12}, "--concurrency"),
        ({"ttft_ms": math.nan}, "--ttft-ms"),
        ({"tpot_ms": 0.0}, "--tpot-ms"),
        ({"tpot_ms": True}, "--tpot-ms"),
    ):
        with pytest.raises(InputError) as error:
            Workload(**kwargs)  # type: ignore[arg-type]
        assert error.value.field == flag


def test_concurrency_is_split_over_every_replica_and_capped_by_kv_capacity() -> None:
    speed = LinearSpeed()
    # DP8: 100 requests hold 13 per rank (the busiest rank's share)
    estimate = aggregated_estimate(deployment(), Workload(1000, 1000, 100), speed)
    assert not isinstance(estimate, str)
    assert speed.asked[-1].batch_per_rank == 13 and estimate.concurrency == 100
    # KV for 20 requests of 2,000 tokens per replica: 1,000 asked, 160 held, the rest wait
    capped = aggregated_estimate(deployment(kv=40_000), Workload(1000, 1000, 1000), speed)
    assert not isinstance(capped, str)
    assert capped.batch_per_replica == 20 == capacity_per_replica(deployment(kv=40_000), Workload(1000, 1000))
    assert capped.concurrency == 160 and capped.queued == 840
    assert capped.ttft_ms > 100.0 + 2.0 * 20 and "wait" in capped.notes[0]


def test_throughput_is_littles_law_over_the_request_latency() -> None:
    estimate = aggregated_estimate(deployment(dp=1), Workload(500, 101, 10), LinearSpeed())
    assert not isinstance(estimate, str)
    latency_s = (100.0 + 20.0 + 100 * 20.0) / 1000  # TTFT + (osl - 1) × TPOT at batch 10
    assert estimate.output_tokens_per_s == pytest.approx(10 / latency_s * 101)
    assert estimate.tokens_per_s_per_user == pytest.approx(1000 / 20.0)
    assert estimate.output_tokens_per_s_per_gpu == pytest.approx(estimate.output_tokens_per_s)


def test_without_concurrency_each_layout_runs_at_what_it_holds() -> None:
    estimate = aggregated_estimate(deployment(instances=2, kv=1_000_000, seqs=64), Workload(1000, 1000), LinearSpeed())
    assert not isinstance(estimate, str)
    assert estimate.batch_per_replica == 64 and estimate.concurrency == 64 * 16 and estimate.gpus == 16


def test_sla_search_finds_the_largest_batch_meeting_both_targets() -> None:
    speed = LinearSpeed()
    estimate = aggregated_estimate(deployment(dp=1), Workload(1000, 1000, ttft_ms=1000.0, tpot_ms=40.0), speed)
    assert not isinstance(estimate, str)
    assert estimate.batch_per_replica == 30  # TPOT 10 + b ≤ 40
    assert estimate.sla is not None and estimate.sla.meets
    assert len(speed.asked) < 20  # a binary search, not a scan of 1,024 batches


def test_sla_no_layout_meets_reports_the_miss_at_one_request() -> None:
    estimate = aggregated_estimate(deployment(dp=1), Workload(1000, 1000, tpot_ms=5.5), LinearSpeed())
    assert not isinstance(estimate, str)
    assert estimate.batch_per_replica == 1 and estimate.sla is not None and not estimate.sla.meets
    assert estimate.sla.tpot_miss == pytest.approx(11 / 5.5 - 1)


def test_a_request_longer_than_a_replicas_kv_cannot_be_served_and_says_so() -> None:
    problem = aggregated_estimate(deployment(kv=1500), Workload(1000, 1000), LinearSpeed())
    assert isinstance(problem, str) and "does not fit" in problem


def test_where_the_kernels_have_no_answer_the_fallback_answers_under_its_own_name() -> None:
    estimate = aggregated_estimate(
        deployment(dp=1), Workload(1000, 1000, 64), LinearSpeed(answer_up_to=8), fallback=FixedSpeed("roofline")
    )
    assert not isinstance(estimate, str)
    assert estimate.source.label == "roofline" and estimate.tpot_ms == 20.0


def test_pareto_front_keeps_points_no_other_beats_on_both_axes() -> None:
    points = [(10.0, 100.0), (20.0, 80.0), (15.0, 70.0), (30.0, 30.0), (5.0, 90.0)]
    assert pareto_front(points) == [0, 1, 3]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 1e6, allow_nan=False), st.floats(0, 1e6, allow_nan=False)), min_size=1, max_size=30)
)
def test_pareto_front_property_every_other_point_is_dominated(points: list[tuple[float, float]]) -> None:
    front = set(pareto_front(points))
    for index, (x, y) in enumerate(points):
        if index not in front:
            assert any(points[f][0] >= x and points[f][1] >= y for f in front)


@settings(max_examples=100, deadline=None)
@given(
    isl=st.integers(1, 100_000),
    osl=st.integers(1, 100_000),
    concurrency=st.one_of(st.none(), st.integers(1, 1_000_000)),
    kv=st.integers(1, 10_000_000),
    dp=st.sampled_from([1, 2, 4, 8, 16]),
)
def test_estimates_are_finite_and_hold_at_most_what_was_asked(
    isl: int, osl: int, concurrency: int | None, kv: int, dp: int
) -> None:
    workload = Workload(isl, osl, concurrency)
    estimate = aggregated_estimate(deployment(dp=dp, kv=kv), workload, LinearSpeed())
    if isinstance(estimate, str):
        assert kv < isl + osl
        return
    assert math.isfinite(estimate.output_tokens_per_s) and estimate.output_tokens_per_s > 0
    assert estimate.batch_per_replica <= capacity_per_replica(deployment(dp=dp, kv=kv), workload)
    if concurrency is not None:
        assert estimate.concurrency <= concurrency
