"""Enumeration, placement and ranking: what the planner lists and in which order."""

from __future__ import annotations

import pytest
from meshdeck.core.errors import InputError
from meshdeck.core.planner import candidate_layouts, instance_sizes, plan


def test_one_h200_node_lists_dp_ep_tp_and_pp_layouts(request_for, v32):
    result = plan(request_for(v32))
    labels = {layout.label() for layout in result.fitting}
    assert {"TP8", "TP2·DP4·EP", "TP1·DP8·EP", "TP4·PP2"} <= labels
    assert all(layout.gpus <= 8 for layout in result.layouts)


def test_fitting_layouts_come_first_in_practice_then_goal_order(request_for, v32):
    from meshdeck.core.rules import EP_TIE_TOLERANCE

    for goal, metric in (
        ("throughput", lambda lay: lay.serving.output_tokens_per_s),
        ("latency", lambda lay: lay.serving.tokens_per_s_per_user),
        ("context", lambda lay: lay.kv_tokens_per_replica),
    ):
        layouts = plan(request_for(v32, goal=goal)).layouts
        fitting = [lay for lay in layouts if lay.fits]
        assert layouts[: len(fitting)] == fitting
        assert [lay.practice_tier for lay in fitting] == sorted(lay.practice_tier for lay in fitting)
        twins = {
            (lay.tensor_parallel, lay.pipeline_parallel, lay.data_parallel): lay
            for lay in fitting
            if not lay.expert_parallel
        }

        def ranked_by(lay, twins=twins, metric=metric):
            """The goal's metric, an EP layout with DP taking its non-EP twin's when within the tolerance."""
            value = metric(lay)
            twin = twins.get((lay.tensor_parallel, lay.pipeline_parallel, lay.data_parallel))
            tie = twin is not None and value >= (1 - EP_TIE_TOLERANCE) * metric(twin)
            if lay.expert_parallel and lay.data_parallel > 1 and tie:
                return max(value, metric(twin))
            return value

        for tier in {lay.practice_tier for lay in fitting}:
            values = [ranked_by(lay) for lay in fitting if lay.practice_tier == tier]
            assert values == sorted(values, reverse=True), goal


def test_an_80gb_node_cannot_hold_deepseek_but_two_can(request_for, v3):
    one = plan(request_for(v3, "H100-SXM5-80GB", 1, 8))
    assert not one.fitting
    assert "nothing fits" in one.top_reason
    assert one.layouts[0].shortfall_bytes > 0
    two = plan(request_for(v3, "H100-SXM5-80GB", 2, 8))
    assert two.fitting and two.fitting[0].nodes == 2


def test_rank_map_keeps_tp_inside_a_node_and_steps_pp_across_nodes(request_for, v3):
    lay = plan(
        request_for(
            v3, "H100-SXM5-80GB", 2, 8, tensor_parallel=8, pipeline_parallel=2, data_parallel=1, expert_parallel=False
        )
    ).layouts[0]
    by_rank = {r.rank: r for r in lay.rank_map}
    assert {by_rank[r].node for r in range(8)} == {0}
    assert {by_rank[r].node for r in range(8, 16)} == {1}
    assert [by_rank[r].pipeline_stage for r in (0, 7, 8, 15)] == [0, 0, 1, 1]
    assert by_rank[9].gpu == 1 and by_rank[9].tensor_rank == 1


def test_small_instances_repeat_over_the_cluster(request_for, v32):
    lay = plan(
        request_for(
            v32, "H200-SXM-141GB", 4, 8, tensor_parallel=2, pipeline_parallel=1, data_parallel=4, expert_parallel=True
        )
    ).layouts[0]
    assert lay.instances == 4 and lay.gpus == 32 and lay.nodes == 4
    assert lay.kv_tokens_total == 4 * 4 * lay.kv_tokens_per_replica
    assert len({(r.instance, r.node) for r in lay.rank_map}) == 4


def test_instance_sizes_cover_node_slices_powers_of_two_and_the_cluster():
    assert instance_sizes(8, 6, 256) == [1, 2, 4, 8, 16, 24, 32, 48]
    assert max(instance_sizes(8, 64, 256)) == 256  # no single instance beyond the expert count


def test_layout_filters_narrow_the_enumeration(request_for, v32):
    request = request_for(v32, "H200-SXM-141GB", 2, 8, tensor_parallel=2, expert_parallel=True)
    shapes = list(candidate_layouts(request))
    assert shapes and all(shape.tensor_parallel == 2 and shape.expert_parallel for shape in shapes)


def test_layout_that_does_not_divide_the_cluster_is_refused(request_for, v32):
    with pytest.raises(InputError) as err:
        plan(request_for(v32, "H200-SXM-141GB", 1, 8, tensor_parallel=3, pipeline_parallel=1, data_parallel=1))
    assert err.value.field == "--tensor-parallel"


def test_top_reason_names_the_pick_and_its_estimate(request_for, v32):
    result = plan(request_for(v32))
    top = result.layouts[0]
    assert result.top_reason.startswith(top.label())
    assert f"TPOT {top.serving.tpot_ms:,.1f} ms" in result.top_reason and "(roofline)" in result.top_reason


def test_json_form_has_the_issue_keys_and_labels_estimates(request_for, v32):
    data = plan(request_for(v32)).as_dict(top=3)
    layout = data["layouts"][0]
    for key in ("est_decode_tokens_per_s", "traffic_per_token", "rank_map", "reserve_gib", "weights_gib_by_component"):
        assert key in layout
    assert any("estimate" in note for note in data["notes"])
    assert {t["link"] for t in layout["traffic_per_token"]} <= {"nvlink", "pcie", "network"}


def test_group_links_agree_with_walking_every_rank():
    import itertools

    from meshdeck.core.cluster import ClusterSpec, LinkClass
    from meshdeck.core.gpu_spec import gpu_from_memory
    from meshdeck.core.placement import Placement, group_links, rank_of

    gpu = gpu_from_memory(80)
    for gpn, nodes in itertools.product((4, 6, 8), (2, 3, 4)):
        cluster = ClusterSpec(nodes, gpn, gpu, "nvlink", 1e9)
        for tp, pp, dp in itertools.product((1, 2, 4, 8), (1, 2, 3, 4), (1, 2, 4)):
            size = tp * pp * dp
            if size <= gpn or size % gpn or size > nodes * gpn:
                continue
            links = group_links(cluster, Placement(size, 1, gpn), tp, pp, dp)

            def node(rank: int, gpn: int = gpn) -> int:
                return rank // gpn

            tensor = any(
                len({node(rank_of(t, s, d, tp, pp)) for t in range(tp)}) > 1 for s in range(pp) for d in range(dp)
            )
            expert = any(
                len({node(rank_of(t, s, d, tp, pp)) for t in range(tp) for d in range(dp)}) > 1 for s in range(pp)
            )
            pipe = any(
                node(rank_of(0, s, d, tp, pp)) != node(rank_of(0, s + 1, d, tp, pp))
                for s in range(pp - 1)
                for d in range(dp)
            )
            assert (links.tensor is LinkClass.NETWORK) == tensor, (gpn, tp, pp, dp)
            assert (links.expert is LinkClass.NETWORK) == expert, (gpn, tp, pp, dp)
            assert (links.pipeline is LinkClass.NETWORK) == pipe, (gpn, tp, pp, dp)
