"""Ranking by practice before estimate: documented layouts first, EP with attention DP on ties.

vLLM documents data-parallel engines that each own TP workers (docs/serving/data_parallel_deployment.md)
and its DeepSeek-V3.2 recipe recommends `-dp 8 --enable-expert-parallel` on 8×H200 / 8×H20 (141 GB) /
8×B200; DESIGN.md: TP inside an NVLink domain, PP across nodes, EP with DP-attention for MoE throughput.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from meshdeck.core.layout_plan import LayoutPlan
from meshdeck.core.placement import Placement
from meshdeck.core.planner import plan, rank_layouts
from meshdeck.core.rules import (
    EP_TIE_TOLERANCE,
    PRACTICE_DOCUMENTED,
    PRACTICE_DP_WITH_PP,
    PRACTICE_PP_INSIDE_NVLINK_NODE,
)
from meshdeck.core.serving import SOURCE_KERNELS, SOURCE_ROOFLINE, ServingEstimate, SpeedSource
from meshdeck.core.units import GB

ROOFLINE = SpeedSource(SOURCE_ROOFLINE, "roofline")
KERNELS = SpeedSource(SOURCE_KERNELS, "aiconfigurator-core test tables")

GOALS = ("throughput", "latency", "context")


def serving_at(rate: float, source: SpeedSource = ROOFLINE) -> ServingEstimate:
    """A serving estimate of `rate` output tokens/s and rate / 100 tokens/s per user (TPOT 100,000 / rate ms)."""
    return ServingEstimate(
        ttft_ms=100.0, tpot_ms=100_000.0 / rate if rate else 0.0, output_tokens_per_s=rate, gpus=8, nodes=1.0,
        concurrency=1, concurrency_requested=None, batch_per_replica=1, capacity_per_replica=1, source=source,
    )  # fmt: skip


def fitting(tp: int, pp: int, dp: int, ep: bool, rate: float, *, tier: int = PRACTICE_DOCUMENTED) -> LayoutPlan:
    """A layout that fits, with only what ranking reads filled in."""
    return LayoutPlan(
        tp, pp, dp, ep, Placement(tp * pp * dp, 1, 8), True, None, True, fits=True,
        est_decode_tokens_per_s=rate, est_decode_tokens_per_s_per_request=rate / 100,
        kv_tokens_per_replica=int(rate), practice_tier=tier, serving=serving_at(rate),
    )  # fmt: skip


def labels(layouts: list[LayoutPlan]) -> list[str]:
    return [layout.label() for layout in layouts]


def test_ep_variant_of_a_dp_layout_wins_a_tie_and_says_why():
    plain, ep = fitting(1, 1, 8, False, 1000.0), fitting(1, 1, 8, True, 1000.0 * (1 - EP_TIE_TOLERANCE / 2))
    ranked, notes = rank_layouts([plain, ep], "throughput")
    assert labels(ranked) == ["TP1·DP8·EP", "TP1·DP8"]
    assert notes[0].startswith("ranked ahead of TP1·DP8") and "DeepEP" in notes[0] and notes[1] == ""
    assert ranked[0] is ep  # the numbers are never altered


def test_ep_variant_clearly_slower_than_its_twin_stays_behind():
    plain, ep = fitting(1, 1, 8, False, 1000.0), fitting(1, 1, 8, True, 1000.0 * (1 - 2 * EP_TIE_TOLERANCE))
    assert labels(rank_layouts([ep, plain], "throughput").layouts) == ["TP1·DP8", "TP1·DP8·EP"]


def test_ep_without_dp_gets_no_preference():
    plain, ep = fitting(8, 1, 1, False, 1000.0), fitting(8, 1, 1, True, 990.0)
    assert labels(rank_layouts([ep, plain], "throughput").layouts) == ["TP8", "TP8·EP"]


@pytest.mark.parametrize("goal", GOALS)
def test_practice_tier_outranks_any_estimate_for_every_goal(goal):
    documented = fitting(8, 1, 1, False, 100.0)
    in_node_pp = fitting(4, 2, 1, False, 5000.0, tier=PRACTICE_PP_INSIDE_NVLINK_NODE)
    dp_pp = fitting(1, 2, 4, True, 9000.0, tier=PRACTICE_DP_WITH_PP)
    ranked, notes = rank_layouts([dp_pp, in_node_pp, documented], goal)
    assert labels(ranked) == ["TP8", "TP4·PP2", "TP1·PP2·DP4·EP"]
    assert notes[0] == ""
    assert "PP inside an NVLink node" in notes[1]
    assert "not DP over pipelines" in notes[2]


def test_a_layout_that_does_not_fit_never_outranks_one_that_does():
    dp_pp = fitting(1, 2, 4, True, 10.0, tier=PRACTICE_DP_WITH_PP)
    short = replace(fitting(8, 1, 1, False, 0.0), fits=False, shortfall_bytes=1)
    assert labels(rank_layouts([short, dp_pp], "throughput").layouts) == ["TP1·PP2·DP4·EP", "TP8"]


def test_context_goal_ranks_in_node_pp_by_kv_only_when_nothing_documented_fits():
    in_node_pp = fitting(1, 8, 1, False, 100.0, tier=PRACTICE_PP_INSIDE_NVLINK_NODE)
    dp_pp = fitting(1, 4, 2, False, 900.0, tier=PRACTICE_DP_WITH_PP)
    ranked, notes = rank_layouts([dp_pp, in_node_pp], "context")
    assert labels(ranked) == ["TP1·PP8", "TP1·PP4·DP2"]
    assert "no layout without it holds" in notes[0]
    documented = fitting(8, 1, 1, False, 50.0)
    assert labels(rank_layouts([in_node_pp, documented], "context").layouts) == ["TP8", "TP1·PP8"]


@pytest.mark.parametrize(("gpu_name", "nodes", "model"), [("H200-SXM-141GB", 1, "v32"), ("H100-SXM5-80GB", 2, "v3")])
def test_real_plans_list_dp_times_pp_below_every_documented_layout(request, request_for, gpu_name, nodes, model):
    card = request.getfixturevalue(model)
    for goal in GOALS:
        fits = plan(request_for(card, gpu_name, nodes, 8, goal=goal)).fitting
        tiers = [layout.practice_tier for layout in fits]
        assert tiers == sorted(tiers), goal
        dp_pp = [layout for layout in fits if layout.data_parallel > 1 and layout.pipeline_parallel > 1]
        assert dp_pp and all(layout.practice_tier == PRACTICE_DP_WITH_PP for layout in dp_pp)
        assert all("dp_with_pp" in layout.warning_codes for layout in dp_pp)


def test_context_goal_on_a_tight_node_puts_the_pp_layout_that_fits_first(request_for, v32):
    # At 0.68 utilization no TP/DP/EP layout of V3.2 holds a 163,840-token request on 8×H200; PP8 does.
    result = plan(request_for(v32, gpu_memory_utilization=0.68, goal="context"))
    assert all(layout.pipeline_parallel > 1 for layout in result.fitting)
    assert result.fitting[0].label() == "TP1·PP8"
    assert "despite PP inside an NVLink node" in result.top_reason


def _h20_141gb(gpu):
    """The H20 of vLLM's V3.2 recipe ("8xH200 (or H20) GPUs (141GB × 8)"): the H20's compute with HBM3e.

    resources/gpus.json lists the 96 GB H20 only; this spec takes its entry and the H200's memory and
    bandwidth (same 141 GB HBM3e) for the test.
    """
    h20, h200 = gpu("H20"), gpu("H200-SXM-141GB")
    return replace(h20, name="H20-141GB", memory_bytes=h200.memory_bytes, hbm_bytes_per_s=4800 * GB)


@pytest.mark.parametrize("gpu_name", ["H200-SXM-141GB", "H20-141GB", "B200"])
def test_v32_recipe_layout_leads_throughput_on_one_8_gpu_node(request_for, gpu, gpu_name, v32):
    from core_planner_inputs import make_cluster
    from meshdeck.core.planner import PlanRequest

    spec = _h20_141gb(gpu) if gpu_name == "H20-141GB" else gpu(gpu_name)
    result = plan(PlanRequest(v32, make_cluster(spec, 1, 8)))
    top = result.fitting[:2]
    recipe = next(layout for layout in result.fitting if layout.label() == "TP1·DP8·EP")
    assert recipe in top
    assert recipe.est_decode_tokens_per_s >= (1 - EP_TIE_TOLERANCE) * top[0].est_decode_tokens_per_s
    assert recipe.vllm_args[:5] == (
        "--tensor-parallel-size",
        "1",
        "--data-parallel-size",
        "8",
        "--enable-expert-parallel",
    )
    without_ep = next(layout for layout in result.fitting if layout.label() == "TP1·DP8")
    assert result.fitting.index(recipe) < result.fitting.index(without_ep)


def test_the_96gb_h20_cannot_hold_the_dp8_recipe_layout_at_any_utilization(request_for, gpu, v32):
    # TP1 replicates attention, embeddings and lm_head on every GPU: ~97 GiB of weights per GPU.
    layout = plan(
        request_for(v32, "H20", tensor_parallel=1, pipeline_parallel=1, data_parallel=8, expert_parallel=True)
    ).layouts[0]
    assert not layout.fits and layout.weights_bytes_per_gpu > gpu("H20").torch_visible_bytes


def test_in_a_measured_plan_a_roofline_stand_in_ranks_after_the_measured_layouts_and_says_why():
    measured = replace(fitting(8, 1, 1, False, 1000.0), serving=serving_at(1000.0, KERNELS))
    stand_in = fitting(1, 1, 8, True, 50_000.0)  # the roofline's number: not comparable with a measurement
    ranked, notes = rank_layouts([stand_in, measured], "throughput", measured_plan=True)
    assert labels(ranked) == ["TP8", "TP1·DP8·EP"]
    assert "roofline" in notes[1] and notes[0] == ""
    # a plan that is the roofline's throughout compares its own numbers
    assert labels(rank_layouts([measured, stand_in], "throughput").layouts) == ["TP1·DP8·EP", "TP8"]


def test_sla_meeting_layouts_rank_first_then_the_smallest_miss():
    from meshdeck.core.serving import SlaCheck

    def with_sla(layout: LayoutPlan, meets: bool, miss: float) -> LayoutPlan:
        sla = SlaCheck(1000.0, 50.0, meets, 0.0, miss)
        return replace(layout, serving=replace(layout.serving, sla=sla))

    fast_missing = with_sla(fitting(1, 1, 8, True, 9000.0), False, 0.5)
    slow_meeting = with_sla(fitting(8, 1, 1, False, 1000.0), True, 0.0)
    near_miss = with_sla(fitting(2, 1, 4, True, 5000.0), False, 0.1)
    ranked = rank_layouts([fast_missing, near_miss, slow_meeting], "throughput").layouts
    assert labels(ranked) == ["TP8", "TP2·DP4·EP", "TP1·DP8·EP"]
