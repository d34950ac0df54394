"""Every warning fires where practice says it should, with its reason, and stays quiet elsewhere."""

from __future__ import annotations

import pytest
from meshdeck.core.planner import plan

ALL = {"tensor_parallel": None, "pipeline_parallel": None, "data_parallel": None}


def layout(request_for, card, gpu_name="H200-SXM-141GB", nodes=1, gpus_per_node=8, **kw):
    result = plan(request_for(card, gpu_name, nodes, gpus_per_node, **kw))
    assert result.layouts, "the filters must match one layout"
    return result.layouts[0]


def codes(lay) -> set[str]:
    return set(lay.warning_codes)


def test_tp_over_pcie_warns_and_names_the_fix(request_for, v3):
    lay = layout(
        request_for, v3, "L40S", 4, 8, tensor_parallel=4, pipeline_parallel=1, data_parallel=2, expert_parallel=False
    )
    assert "tp_over_pcie" in codes(lay)
    assert "PCIe" in next(w for w in lay.warnings if "TP=4" in w)


def test_tp_inside_an_nvlink_node_does_not_warn_about_links(request_for, v3):
    lay = layout(request_for, v3, tensor_parallel=8, pipeline_parallel=1, data_parallel=1, expert_parallel=False)
    assert not codes(lay) & {"tp_over_pcie", "tp_over_network"}


def test_tp_across_nodes_warns_about_the_network(request_for, v3):
    lay = layout(
        request_for,
        v3,
        "H100-SXM5-80GB",
        2,
        8,
        tensor_parallel=16,
        pipeline_parallel=1,
        data_parallel=1,
        expert_parallel=False,
    )
    assert "tp_over_network" in codes(lay)


def test_v32_tp8_on_hopper_pads_flashmla_sparse_heads(request_for, v32):
    lay = layout(request_for, v32, tensor_parallel=8, pipeline_parallel=1, data_parallel=1, expert_parallel=False)
    message = next(w for w in lay.warnings if "pads" in w)
    assert "16 heads per rank" in message and "64" in message and "TP=2" in message


def test_v32_tp2_on_hopper_does_not_pad(request_for, v32):
    lay = layout(request_for, v32, tensor_parallel=2, pipeline_parallel=1, data_parallel=4, expert_parallel=True)
    assert "sparse_mla_head_padding" not in codes(lay)


def test_v32_on_blackwell_pads_unless_tp1(request_for, v32):
    tp2 = layout(
        request_for, v32, "B200", tensor_parallel=2, pipeline_parallel=1, data_parallel=4, expert_parallel=True
    )
    tp1 = layout(
        request_for, v32, "B200", tensor_parallel=1, pipeline_parallel=1, data_parallel=8, expert_parallel=True
    )
    assert "sparse_mla_head_padding" in codes(tp2)
    assert "sparse_mla_head_padding" not in codes(tp1)


def test_ep_without_attention_dp_warns(request_for, v3):
    lay = layout(request_for, v3, tensor_parallel=8, pipeline_parallel=1, data_parallel=1, expert_parallel=True)
    assert "ep_without_dp_attention" in codes(lay)
    with_dp = layout(request_for, v3, tensor_parallel=1, pipeline_parallel=1, data_parallel=8, expert_parallel=True)
    assert "ep_without_dp_attention" not in codes(with_dp)


def test_pp_bubble_warns_at_low_concurrency(request_for, v3):
    lay = layout(
        request_for, v3, "H100-SXM5-80GB", 4, 8, tensor_parallel=8, pipeline_parallel=4, data_parallel=1,
        expert_parallel=False, max_num_seqs=2,
    )  # fmt: skip
    assert "pp_bubble" in codes(lay)
    assert lay.est_bound == "pipeline bubble"


def test_ampere_runs_fp8_through_marlin_and_cannot_run_v32(request_for, v3, v32):
    v3_a100 = layout(
        request_for,
        v3,
        "A100-SXM4-80GB",
        2,
        8,
        tensor_parallel=8,
        pipeline_parallel=2,
        data_parallel=1,
        expert_parallel=False,
    )
    assert "no_native_fp8" in codes(v3_a100) and v3_a100.supported
    v32_a100 = layout(
        request_for,
        v32,
        "A100-SXM4-80GB",
        2,
        8,
        tensor_parallel=8,
        pipeline_parallel=2,
        data_parallel=1,
        expert_parallel=False,
    )
    assert "no_sparse_mla_kernels" in codes(v32_a100)
    assert not v32_a100.supported


def test_ada_cannot_run_v32_sparse_attention(request_for, v32):
    lay = layout(
        request_for, v32, "L40S", 8, 8, tensor_parallel=4, pipeline_parallel=8, data_parallel=2, expert_parallel=False
    )
    assert "no_sparse_mla_kernels" in codes(lay) and not lay.supported


def test_v32_at_vllms_default_batch_warns_about_mla_combine_without_capping_it(request_for, v32):
    tp8 = {"tensor_parallel": 8, "pipeline_parallel": 1, "data_parallel": 1, "expert_parallel": False}
    default = layout(request_for, v32, **tp8)
    message = next(w for w in default.warnings if "mla_combine" in w)
    assert "vLLM's default max_num_seqs (1024 on this GPU)" in message and "--max-num-seqs 256" in message
    assert "--max-num-seqs" not in default.vllm_args  # the default is what vLLM runs; the planner accounts it
    capped = layout(request_for, v32, max_num_seqs=256, **tp8)
    assert "mla_combine_large_batch" not in codes(capped)
    assert capped.vllm_args[capped.vllm_args.index("--max-num-seqs") + 1] == "256"
    big = layout(request_for, v32, max_num_seqs=512, **tp8)
    assert any(w.startswith("--max-num-seqs 512 > 256") for w in big.warnings)


def test_dp_over_pipelines_warns_that_vllm_does_not_document_it(request_for, v32):
    lay = layout(request_for, v32, tensor_parallel=1, pipeline_parallel=2, data_parallel=4, expert_parallel=True)
    assert lay.valid and lay.fits  # kept and listed: no vLLM source refuses it
    message = next(w for w in lay.warnings if w.startswith("DP=4 × PP=2"))
    assert "data_parallel_deployment" in message and "ranks below" in message


def test_pp_inside_an_nvlink_node_warns_and_pp_across_nodes_does_not(request_for, v3):
    inside = layout(request_for, v3, tensor_parallel=4, pipeline_parallel=2, data_parallel=1, expert_parallel=False)
    assert "pp_inside_nvlink_node" in codes(inside)
    across = layout(
        request_for, v3, "H100-SXM5-80GB", 2, 8, tensor_parallel=8, pipeline_parallel=2, data_parallel=1,
        expert_parallel=False,
    )  # fmt: skip
    assert "pp_inside_nvlink_node" not in codes(across) and across.practice_tier == 0
    half = layout(
        request_for, v3, "H100-SXM5-80GB", 2, 8, tensor_parallel=4, pipeline_parallel=4, data_parallel=1,
        expert_parallel=False,
    )  # fmt: skip
    assert "pp_inside_nvlink_node" in codes(half)  # stages 0→1 and 2→3 hand off inside a node
    pcie = layout(
        request_for, v3, "L40S", 4, 8, tensor_parallel=4, pipeline_parallel=8, data_parallel=1, expert_parallel=False
    )
    assert "pp_inside_nvlink_node" not in codes(pcie) and pcie.practice_tier == 0  # PP is how PCIe boxes scale


def test_dp_without_expert_parallel_says_the_moe_is_sliced_over_every_rank(request_for, v32):
    lay = layout(request_for, v32, tensor_parallel=2, pipeline_parallel=1, data_parallel=4, expert_parallel=False)
    message = next(w for w in lay.warnings if w.startswith("DP=4 without --enable-expert-parallel"))
    assert "all 8 ranks" in message and "DeepEP" in message
    with_ep = layout(request_for, v32, tensor_parallel=2, pipeline_parallel=1, data_parallel=4, expert_parallel=True)
    assert "dp_without_ep" not in codes(with_ep)


def test_a_gpu_known_by_memory_alone_says_its_numbers_are_assumed(request_for, v3):
    from meshdeck.core.cluster import ClusterSpec
    from meshdeck.core.gpu_spec import gpu_from_memory
    from meshdeck.core.planner import PlanRequest

    cluster = ClusterSpec(2, 8, gpu_from_memory(141), "nvlink", 400e9)
    result = plan(
        PlanRequest(v3, cluster, tensor_parallel=8, pipeline_parallel=1, data_parallel=2, expert_parallel=True)
    )
    assert "assumed_gpu" in codes(result.layouts[0])


def test_moe_dispatch_over_the_network_warns(request_for, v3):
    lay = layout(
        request_for,
        v3,
        "H200-SXM-141GB",
        2,
        8,
        tensor_parallel=1,
        pipeline_parallel=1,
        data_parallel=16,
        expert_parallel=True,
    )
    assert "moe_over_network" in codes(lay)


def test_mtp_with_pp_is_invalid_with_the_vllm_issue(request_for, v32):
    lay = layout(
        request_for,
        v32,
        "H200-SXM-141GB",
        2,
        8,
        tensor_parallel=8,
        pipeline_parallel=2,
        data_parallel=1,
        expert_parallel=False,
        mtp=True,
    )
    assert not lay.valid and "pipeline parallelism" in lay.invalid_reason


@pytest.mark.parametrize("tp", [3, 5, 6])
def test_heads_not_divisible_by_tp_are_invalid(request_for, v3, tp):
    lay = layout(
        request_for,
        v3,
        "H200-SXM-141GB",
        1,
        6 if tp != 5 else 5,
        tensor_parallel=tp,
        pipeline_parallel=1,
        data_parallel=1,
        expert_parallel=False,
    )
    assert not lay.valid and "heads" in lay.invalid_reason
