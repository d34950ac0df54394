"""The demo's vLLM profile says what it is: the layout the demo chooses for its two hosts, with its rank in the
plan (it once called itself "the planner's best layout" while the planner ranked it third)."""

from __future__ import annotations

from meshdeck.core.cluster import ClusterSpec, default_inter_node_bytes_per_s, default_intra_node_link
from meshdeck.core.plan_request import PlanRequest
from meshdeck.core.planner import plan
from meshdeck.services.catalog import load_gpu_catalog, load_model
from meshdeck.services.demo import choose_demo_layout, demo_layout_note
from meshdeck.services.vllm_release import STAND_IN_VLLM_RELEASE


def _demo_plan():  # type: ignore[no-untyped-def]
    gpu = next(g for g in load_gpu_catalog() if g.name == "H200-SXM-141GB")
    link = default_intra_node_link(gpu)
    cluster = ClusterSpec(2, 8, gpu, link, default_inter_node_bytes_per_s(8, link))
    return plan(PlanRequest(load_model("deepseek-v3.2"), cluster, vllm_version=STAND_IN_VLLM_RELEASE))


def test_the_demo_profile_names_its_rank_and_why_the_layouts_above_it_were_passed_over() -> None:
    result = _demo_plan()
    layout = choose_demo_layout(result, 2)
    assert layout is not None
    rank = result.layouts.index(layout) + 1
    assert rank > 1 and result.layouts[0].instances > 1  # the planner's best is several instances
    note = demo_layout_note(result, layout)
    assert note == (
        f"the layout the demo chooses for its two hosts: rank {rank} of the plan, {layout.label()}, the best-ranked "
        f"that runs as one deployment over both hosts (ranks 1–{rank - 1} do not: several independent instances, "
        "or fewer hosts)"
    )


def test_a_demo_layout_ranked_first_is_called_the_planners_best() -> None:
    result = _demo_plan()
    assert demo_layout_note(result, result.layouts[0]).endswith(f"rank 1 of the plan, {result.layouts[0].label()}, "
                                                                "the planner's best")  # fmt: skip
