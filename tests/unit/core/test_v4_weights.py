"""DeepSeek-V4 weights per GPU and parameter counts (core.v4_weights): hand checks per component, splits that sum
back to the whole model, and the shards vLLM 0.32.0 refuses."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from meshdeck.core.errors import InputError
from meshdeck.core.model_card import ModelCard, model_card_from_config
from meshdeck.core.v4_kv import V4_KV_RULES
from meshdeck.core.v4_weights import (
    V4_WEIGHT_RULES,
    V4Shard,
    checkpoint_bytes,
    checkpoint_elements,
    invalid_shard_reason,
    layer_tensors,
    parameter_counts,
    stage_bytes,
    v4_weight_rules,
)
from meshdeck.services.catalog import load_model

TINY = Path(__file__).resolve().parents[3] / "resources" / "vllm-models" / "tiny-deepseek-v4" / "config.json"
GIB = 1 << 30


@pytest.fixture(scope="module")
def pro() -> ModelCard:
    return load_model("deepseek-v4-pro")


@pytest.fixture(scope="module")
def flash() -> ModelCard:
    return load_model("deepseek-v4-flash")


@pytest.fixture(scope="module")
def tiny() -> ModelCard:
    return model_card_from_config(json.loads(TINY.read_text()), str(TINY))


def _layer(card: ModelCard, shard: V4Shard, index: int) -> dict[str, int]:
    return {t.name: t.nbytes for t in layer_tensors(card, shard, index)}


def test_deepseeks_stated_totals_and_activated_parameters(pro: ModelCard, flash: ModelCard) -> None:
    # DeepSeek's model cards: V4-Pro 1.6T parameters (49B activated), V4-Flash 284B (13B activated).
    assert round(parameter_counts(flash).main_model / 1e9) == 284
    assert round(parameter_counts(flash).active_per_token / 1e9) == 13
    assert round(parameter_counts(pro).main_model / 1e11) == 16
    assert round(parameter_counts(pro).active_per_token / 1e9) == 49


def test_pro_attention_of_one_layer_by_hand_fp8(pro: ModelCard) -> None:
    shard = V4Shard(tensor_parallel=8, moe_ranks=8, expert_parallel=True)
    layer = _layer(pro, shard, 2)  # compress ratio 4: indexer + overlapping compressor
    assert layer["attn.fused_wqa_wkv.weight"] == (1536 + 512) * 7168  # replicated, FP8
    assert layer["attn.fused_wqa_wkv.weight_scale_inv"] == 16 * 56  # ue8m0, one byte per 128x128 block
    assert layer["attn.wq_b.weight"] == 128 * 512 // 8 * 1536
    assert layer["attn.wo_a.weight"] == 16 * 1024 // 8 * (128 * 512 // 16)
    assert layer["attn.wo_b.weight"] == 7168 * (16 * 1024 // 8)
    assert layer["attn.attn_sink"] == 64 * 4  # 16 local heads padded to FlashMLA's 64, fp32
    assert layer["attn.indexer.wq_b.weight"] == 64 * 128 * 1536
    assert layer["attn.indexer.weights_proj.weight"] == 64 * 7168 * 2
    assert layer["attn.indexer.compressor.fused_wkv_wgate.weight"] == 2 * 2 * 128 * 7168 * 2
    assert layer["attn.compressor.ape"] == 4 * 2 * 512 * 4
    assert layer["attn.compressor.fused_wkv_wgate.weight"] == 2 * 2 * 512 * 7168 * 2
    assert layer["hc_attn_fn"] == (2 + 4) * 4 * 4 * 7168 * 4
    assert layer["ffn.gate.tid2eid"] == 129280 * 6 * 4  # layers < num_hash_layers 3 route by token id
    routed = _layer(pro, shard, 4)
    assert "ffn.gate.tid2eid" not in routed and routed["ffn.gate.e_score_correction_bias"] == 384 * 4
    hash_layer = _layer(pro, shard, 0)
    assert hash_layer["attn.compressor.ape"] == 128 * 512 * 4  # ratio 128: no overlap, no indexer
    assert "attn.indexer.wq_b.weight" not in hash_layer


def test_pro_experts_mxfp4_and_shared_expert_fp8(pro: ModelCard) -> None:
    ep16 = _layer(pro, V4Shard(tensor_parallel=8, moe_ranks=16, expert_parallel=True), 5)
    experts = 384 // 16
    assert ep16["ffn.experts.routed_experts.w13_weight"] == experts * 2 * 3072 * 7168 // 2
    assert ep16["ffn.experts.routed_experts.w13_weight_scale"] == experts * 2 * 3072 * 7168 // 32
    assert ep16["ffn.experts.routed_experts.w2_weight"] == experts * 7168 * 3072 // 2
    assert ep16["ffn.experts.routed_experts.w2_weight_scale"] == experts * 7168 * 3072 // 32
    assert ep16["ffn.shared_experts.gate_up_proj.weight"] == 2 * 3072 // 8 * 7168
    # TP16: 24 blocks of 128 over 16 ranks -> 2 blocks each, the shared expert padded to 4096
    tp16 = _layer(pro, V4Shard(tensor_parallel=16, moe_ranks=16, expert_parallel=True), 5)
    assert tp16["ffn.shared_experts.down_proj.weight"] == 7168 * 256
    # uneven EP: the first 384 mod 256 ranks hold 2 experts
    ep256 = _layer(pro, V4Shard(tensor_parallel=8, moe_ranks=256, expert_parallel=True), 5)
    assert ep256["ffn.experts.routed_experts.w2_weight"] == 2 * 7168 * 3072 // 2


def test_bf16_weights_are_two_bytes_everywhere_but_fp32_and_int32_tensors(tiny: ModelCard) -> None:
    for tensor in layer_tensors(tiny, V4Shard(weights="bf16", sink_padding=False), 1):
        assert tensor.dtype in ("bf16", "fp32", "int32"), tensor
        assert (tensor.dtype == "fp32") == (
            tensor.name.startswith("hc_") or tensor.name.endswith(("ape", "attn_sink", "bias"))
        ), tensor


@pytest.mark.parametrize("weights", ["checkpoint", "bf16"])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_tensor_parallel_splits_sum_back_to_the_whole_model(pro: ModelCard, weights: str, tp: int) -> None:
    """TP-split components (wq_b, wo_a, wo_b, shared expert, embedding, head) sum back over TP ranks; replicated
    ones appear once per rank. Checked on the attention and shared expert of one layer."""
    whole = {t.name: t for t in layer_tensors(pro, V4Shard(weights=weights, moe_ranks=1), 2)}
    part = {t.name: t for t in layer_tensors(pro, V4Shard(tensor_parallel=tp, moe_ranks=tp, weights=weights), 2)}
    for name in ("attn.wq_b.weight", "attn.wo_a.weight", "attn.wo_b.weight", "ffn.shared_experts.down_proj.weight"):
        assert part[name].numel * tp == whole[name].numel, name
    for name in ("attn.fused_wqa_wkv.weight", "attn.indexer.wq_b.weight", "ffn.gate.weight", "hc_ffn_fn"):
        assert part[name].numel == whole[name].numel, name


@pytest.mark.parametrize("ep", [2, 8, 16, 32])
def test_expert_parallel_splits_sum_back(flash: ModelCard, ep: int) -> None:
    whole = stage_bytes(flash, V4Shard()).as_dict()["routed_experts"]
    part = stage_bytes(flash, V4Shard(tensor_parallel=1, moe_ranks=ep, expert_parallel=True)).as_dict()
    assert part["routed_experts"] * ep == whole
    tp_split = stage_bytes(flash, V4Shard(tensor_parallel=1, moe_ranks=ep, expert_parallel=False, mxfp4_round=1))
    assert tp_split.as_dict()["routed_experts"] * ep == whole


def test_pipeline_stages_sum_back_to_the_whole_model(flash: ModelCard) -> None:
    shard = V4Shard(tensor_parallel=4, moe_ranks=4, expert_parallel=True)
    whole = stage_bytes(flash, shard, mtp=True)
    cuts = [(0, 11), (11, 22), (22, 33), (33, 43)]
    stages = [
        stage_bytes(flash, shard, a, b, first_stage=a == 0, last_stage=b == 43, mtp=True, pipeline_parallel=4)
        for a, b in cuts
    ]
    summed: dict[str, int] = {}
    for stage in stages:
        for name, value in stage.components:
            summed[name] = summed.get(name, 0) + value
    hc_head = 4 * 4 * 4096 * 4 + 4 * 4 + 4  # every stage allocates the model's hc_head trio
    extra_mtp_embedding = 129280 // 4 * 4096 * 2  # PP > 1: the MTP keeps its own embedding
    for name, value in whole.components:
        if name == "hyper_connections":
            assert summed[name] == value + 3 * hc_head
        elif name == "mtp":
            assert summed[name] == value + extra_mtp_embedding
        elif name != "rope_caches":
            assert summed[name] == value, name
    assert "embedding" not in stages[1].as_dict() and "lm_head" not in stages[1].as_dict()
    assert "mtp" in stages[3].as_dict() and "mtp" not in stages[0].as_dict()


def test_rope_caches_per_distinct_rope_and_buffers(pro: ModelCard) -> None:
    shard = V4Shard(tensor_parallel=8, moe_ranks=8, expert_parallel=True)
    full = stage_bytes(pro, shard, max_num_batched_tokens=8192).as_dict()
    assert full["rope_caches"] == 65536 * 16 * 64 * 4  # every Pro layer compresses: one fp32 cache, YaRN x16 rows
    with_mtp = stage_bytes(pro, shard, mtp=True, max_num_batched_tokens=8192).as_dict()
    assert with_mtp["rope_caches"] == 65536 * 16 * 64 * 4 + 1048576 * 64 * 4  # + the MTP's sliding-window rope
    assert full["buffers"] == 8192 * 1024 * 4  # topk_indices_buffer
    assert with_mtp["buffers"] == 8192 * 1024 * 4 + 8192 * 4 * 7168 * 2  # + _mtp_hidden_buffer


@pytest.mark.parametrize(
    ("release", "without_mtp"), [((0, 23), True), ((0, 26), True), ((0, 27), False), ((0, 32), False)]
)
def test_mtp_hidden_buffer_by_release(flash: ModelCard, release: tuple[int, int], without_mtp: bool) -> None:
    """0.23–0.26 allocate `_mtp_hidden_buffer` on the last stage with no speculator (nvidia/model.py
    DeepseekV4Model.__init__ `if get_pp_group().is_last_rank:`); from 0.27 only with MTP. Never on an earlier stage."""
    shard = V4Shard(tensor_parallel=2, moe_ranks=2)
    topk = 8192 * 512 * 4
    mtp_hidden = 8192 * 4 * 4096 * 2
    plain = stage_bytes(flash, shard, max_num_batched_tokens=8192, release=release).as_dict()
    assert plain["buffers"] == topk + (mtp_hidden if without_mtp else 0)
    with_mtp = stage_bytes(flash, shard, mtp=True, max_num_batched_tokens=8192, release=release).as_dict()
    assert with_mtp["buffers"] == topk + mtp_hidden
    first = stage_bytes(flash, shard, 0, 22, last_stage=False, max_num_batched_tokens=8192, release=release)
    assert first.as_dict()["buffers"] == topk


def test_weight_rules_cover_every_release_v4_is_planned_for() -> None:
    for kv in V4_KV_RULES:
        for minor in range(kv.first[1], kv.last[1] + 1):
            assert v4_weight_rules((0, minor)).holds((0, minor))
    ranges = [(rules.first, rules.last) for rules in V4_WEIGHT_RULES]
    assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges))  # ordered, no overlap
    with pytest.raises(InputError, match=r"0\.22"):
        v4_weight_rules((0, 22))


def test_per_gpu_totals_at_common_layouts(pro: ModelCard, flash: ModelCard) -> None:
    two_nodes = stage_bytes(pro, V4Shard(tensor_parallel=8, moe_ranks=16, expert_parallel=True), mtp=True)
    assert 50 * GIB < two_nodes.weights < 60 * GIB
    one_node = stage_bytes(flash, V4Shard(tensor_parallel=8, moe_ranks=8, expert_parallel=True), mtp=True)
    assert 18 * GIB < one_node.weights < 22 * GIB


def test_checkpoint_size_against_hugging_face_count(pro: ModelCard) -> None:
    """Hugging Face lists deepseek-ai/DeepSeek-V4-Pro as "861B params" (safetensors elements, FP4 packed two per
    element; seen on https://theapplied.co/es/models/deepseek-ai-deepseek-v4-pro, "861.000 millones de
    parámetros"). Within 1 %. The index's metadata.total_size was not found; bytes are checked against elements."""
    assert abs(checkpoint_elements(pro) - 861e9) / 861e9 < 0.01
    assert checkpoint_bytes(pro) > checkpoint_elements(pro)  # BF16 / fp32 tensors are wider than one byte


@pytest.mark.parametrize(
    ("card_name", "shard", "rule"),
    [
        ("deepseek-v4-pro", V4Shard(tensor_parallel=3, moe_ranks=3), "assert self.n_heads % tp_size == 0"),
        ("deepseek-v4-flash", V4Shard(tensor_parallel=16, moe_ranks=16, expert_parallel=True), "n_local_groups"),
        ("deepseek-v4-flash", V4Shard(tensor_parallel=8, moe_ranks=512, expert_parallel=True), "determine_expert_map"),
        ("deepseek-v4-pro", V4Shard(tensor_parallel=8, moe_ranks=8, mega_moe=True), "requires expert parallel"),
        (
            "deepseek-v4-pro",
            V4Shard(tensor_parallel=8, moe_ranks=256, expert_parallel=True, mega_moe=True),
            "divisible by ep_size",
        ),
        ("deepseek-v4-pro", V4Shard(tensor_parallel=8, moe_ranks=128), "mxfp4.py create_weights"),
        ("deepseek-v4-flash", V4Shard(tensor_parallel=2, moe_ranks=6), "not divisible by TP×DP=6"),
        ("deepseek-v4-pro", V4Shard(tensor_parallel=8, moe_ranks=12), "multiple of TP=8"),
    ],
)
def test_refusals_name_the_rule(card_name: str, shard: V4Shard, rule: str) -> None:
    reason = invalid_shard_reason(load_model(card_name), shard)
    assert reason is not None and rule in reason, reason


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_common_layouts_build(pro: ModelCard, flash: ModelCard, tp: int) -> None:
    for card in (pro, flash):
        assert invalid_shard_reason(card, V4Shard(tensor_parallel=tp, moe_ranks=tp, expert_parallel=True)) is None
        assert invalid_shard_reason(card, V4Shard(tensor_parallel=tp, moe_ranks=2 * tp, expert_parallel=True)) is None
