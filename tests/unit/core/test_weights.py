"""Weights per GPU are split the way vLLM splits each component, and invalid shardings say why."""

from __future__ import annotations

import pytest
from meshdeck.core.layout_parts import pp_partition
from meshdeck.core.weights import (
    ShardShape,
    invalid_shard_reason,
    layer_bytes,
    shard_totals,
    stage_total,
    stage_weights,
)


def layer(card, tp, moe, *, ep=False, dp=1, dtype="fp8"):
    return layer_bytes(card, ShardShape(tp, tp * dp, ep, dtype), moe).as_dict()


def test_column_and_row_parallel_parts_halve_with_tp_while_replicated_parts_do_not(v32):
    tp2, tp4 = layer(v32, 2, True), layer(v32, 4, True)
    assert tp2["mla_absorbed_bf16"] == 2 * tp4["mla_absorbed_bf16"]
    assert tp2["shared_experts"] == 2 * tp4["shared_experts"]
    assert tp2["router"] == tp4["router"]  # GateLinear is replicated
    assert tp2["indexer"] == tp4["indexer"]  # wq_b and wk/weights_proj are replicated
    # fused_qkv_a_proj is replicated, so MLA projections shrink by less than half
    assert tp4["mla_projections"] > tp2["mla_projections"] / 2


def test_experts_split_intermediate_without_ep_and_whole_experts_with_ep(v3):
    no_ep = layer(v3, 8, True)["routed_experts"]
    ep = layer(v3, 8, True, ep=True)["routed_experts"]
    assert no_ep == ep  # 256 experts × 1/8 slice == 32 whole experts
    ep_dp = layer(v3, 1, True, ep=True, dp=8)["routed_experts"]
    assert ep_dp == ep
    assert layer(v3, 1, True, ep=True, dp=16)["routed_experts"] * 2 == ep


def test_uneven_ep_gives_the_first_ranks_one_more_expert(v3):
    per_expert = layer(v3, 1, True, ep=True, dp=256)["routed_experts"]
    assert layer(v3, 3, True, ep=True, dp=1)["routed_experts"] == 86 * per_expert  # ceil(256 / 3)


def test_fp8_block_scales_are_fp32_per_128x128_block(v3):
    scales = layer(v3, 1, False)["fp8_block_scales"]
    assert scales > 0
    assert "fp8_block_scales" not in layer(v3, 1, False, dtype="bf16")


def test_bf16_doubles_the_linear_layers(v3):
    fp8, bf16 = layer(v3, 8, True), layer(v3, 8, True, dtype="bf16")
    assert bf16["routed_experts"] == 2 * fp8["routed_experts"]


def test_int4_experts_take_half_a_byte_plus_group_scales(v3):
    int4 = layer(v3, 8, True, dtype="int4")["routed_experts"]
    fp8 = layer(v3, 8, True)["routed_experts"]
    assert int4 == pytest.approx(fp8 * (0.5 + 2 / 32), rel=1e-6)


def test_embedding_on_first_stage_and_lm_head_on_last(v32):
    shape = ShardShape(8, 8, False, "fp8")
    (a, b), (c, d) = pp_partition(61, 2)
    first = stage_weights(v32, shape, a, b, first_stage=True, last_stage=False, mtp=False, max_num_batched_tokens=8192)
    last = stage_weights(v32, shape, c, d, first_stage=False, last_stage=True, mtp=False, max_num_batched_tokens=8192)
    assert "embed_tokens" in first.as_dict() and "lm_head" not in first.as_dict()
    assert "lm_head" in last.as_dict() and "embed_tokens" not in last.as_dict()
    assert first.as_dict()["embed_tokens"] == 129280 // 8 * 7168 * 2


def test_mtp_adds_a_moe_layer_and_its_head_to_the_last_stage(v32):
    shape = ShardShape(8, 8, False, "fp8")
    plain = stage_weights(v32, shape, 0, 61, first_stage=True, last_stage=True, mtp=False, max_num_batched_tokens=8192)
    mtp = stage_weights(v32, shape, 0, 61, first_stage=True, last_stage=True, mtp=True, max_num_batched_tokens=8192)
    extra = mtp.total_bytes - plain.total_bytes
    moe_layer = sum(layer(v32, 8, True).values())
    assert moe_layer < extra < moe_layer + 2 * mtp.as_dict()["lm_head"] + 300e6


def test_fast_stage_totals_equal_the_component_sum(v32):
    shape = ShardShape(4, 8, True, "fp8")
    totals = shard_totals(v32, shape, False, 8192)
    for first, last, (a, b) in ((True, False, (0, 16)), (False, False, (16, 31)), (False, True, (46, 61))):
        full = stage_weights(
            v32, shape, a, b, first_stage=first, last_stage=last, mtp=False, max_num_batched_tokens=8192
        )
        moe = v32.moe_layers_between(a, b)
        assert stage_total(totals, b - a - moe, moe, first, last) == full.total_bytes


def test_pp_partition_matches_vllm_get_pp_indices():
    # floor(L/PP) each; the remainder goes one by one to the stages before the last
    assert [b - a for a, b in pp_partition(61, 4)] == [15, 15, 16, 15]
    assert [b - a for a, b in pp_partition(61, 2)] == [31, 30]
    assert [b - a for a, b in pp_partition(61, 8)] == [7, 7, 8, 8, 8, 8, 8, 7]
    assert pp_partition(61, 3)[-1][1] == 61


@pytest.mark.parametrize(
    ("tp", "moe_ranks", "ep", "needle"),
    [
        (3, 3, False, "heads are not divisible by TP=3"),
        (32, 32, False, "dense MLP gate_up shard 18432/TP32 = 576"),
        (1, 32, False, "fused-MoE intermediate shard 2048/(TP×DP=32) = 64"),
        (1, 512, True, "exceeds the 256 routed experts"),
    ],
)
def test_shardings_vllm_refuses_are_invalid_with_the_reason(v32, tp, moe_ranks, ep, needle):
    reason = invalid_shard_reason(v32, ShardShape(tp, moe_ranks, ep, "fp8"))
    assert reason is not None and needle in reason


def test_bf16_weights_lift_the_fp8_block_limit_on_tp(v32):
    assert invalid_shard_reason(v32, ShardShape(32, 32, False, "bf16")) is None
    assert invalid_shard_reason(v32, ShardShape(16, 16, False, "fp8")) is None
    assert invalid_shard_reason(v32, ShardShape(1, 64, True, "fp8")) is None
