"""Weight bytes per GPU, component by component, split the way vLLM's DeepseekV2 model splits them.

vLLM (model_executor/models/deepseek_v2.py, deepseek_mtp.py, layers/fused_moe):
- embed_tokens: VocabParallelEmbedding, vocab padded to a multiple of 64, sharded over TP, first PP stage;
  lm_head: ParallelLMHead, same split, last stage; final norm last stage. BF16.
- MLA: fused_qkv_a_proj (q_a + kv_a, `disable_tp=True`) replicated; q_b_proj and kv_b_proj
  ColumnParallel, o_proj RowParallel; q_a/kv_a layernorms and the two layer norms BF16, replicated.
  process_weights_after_loading keeps W_UK_T and W_UV as views of one BF16 copy of the local
  kv_b_proj (dequantized), next to the FP8 kv_b_proj used by prefill: counted once, in BF16.
- V3.2 Indexer: wq_b ReplicatedLinear (quantized), wk + weights_proj fused in BF16 (`quant_config=None`,
  FP8 wk upcast at load), k_norm LayerNorm; all replicated.
- Dense MLP (first_k_dense_replace layers) and shared experts: gate_up ColumnParallel, down RowParallel over TP.
- MoE router: GateLinear BF16 + e_score_correction_bias FP32, replicated.
- Routed experts (FusedMoE): without expert parallel every rank holds every expert with the intermediate
  dim split over TP×DP; with `--enable-expert-parallel` whole experts are split over EP = TP×DP
  (the first `E mod EP` ranks hold one more).
- FP8 block quantization: fp32 scale per 128×128 block; vLLM refuses a shard whose output (merged
  gate_up, fused-MoE intermediate) or split input is not a multiple of the block ("not divisible by
  weight quantization block_n") — such layouts are reported invalid with that reason.
- MTP (only with MTP speculative decoding): one more decoder layer (MoE) with its own shared_head
  (norm + ParallelLMHead over TP) and eh_proj (BF16, replicated); the V1 proposer shares the target's
  embed_tokens when PP = 1.
Conventions: `bf16` = 2 bytes for everything; `int4` = routed experts weight-only int4 (W4A16,
group-wise BF16 scales, as Kimi-K2-Thinking ships), every other linear layer BF16.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from meshdeck.core.model_card import CHECKPOINT_FP8_BLOCK, ModelCard

WEIGHTS_DTYPES = ("fp8", "bf16", "int4")
WEIGHTS_CONVENTIONS = {
    "fp8": "FP8 e4m3 linear layers with an fp32 scale per 128x128 block; embeddings, lm_head, norms, router, "
    "indexer wk/weights_proj and MTP eh_proj in BF16 (as DeepSeek ships it)",
    "bf16": "every parameter in BF16 (2 bytes)",
    "int4": "routed experts int4 weight-only (0.5 byte + one BF16 scale per 32 inputs), everything else BF16",
}
VOCAB_PADDING = 64  # vLLM DEFAULT_VOCAB_PADDING_SIZE
BF16 = 2
FP32 = 4


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class LinearCost:
    weight_bytes: int
    scale_bytes: int


def _linear(out_features: int, in_features: int, dtype: str, block: tuple[int, int], group: int = 32) -> LinearCost:
    """Bytes of one (local shard of a) linear layer in the given storage format."""
    if dtype == "fp8":
        scales = _ceil_div(out_features, block[0]) * _ceil_div(in_features, block[1]) * FP32
        return LinearCost(out_features * in_features, scales)
    if dtype == "int4":
        return LinearCost(out_features * in_features // 2, out_features * _ceil_div(in_features, group) * BF16)
    return LinearCost(out_features * in_features * BF16, 0)


@dataclass(frozen=True)
class ShardShape:
    """How one rank's slice of the model is cut (independent of which layers it holds)."""

    tensor_parallel: int
    moe_ranks: int  # TP × DP: the group routed experts are spread over
    expert_parallel: bool
    weights_dtype: str


@dataclass(frozen=True)
class LayerBytes:
    """Per-GPU bytes of one decoder layer, by component (FP8 scales kept apart)."""

    components: tuple[tuple[str, int], ...]

    def as_dict(self) -> dict[str, int]:
        return dict(self.components)


def _attention_dtype(card: ModelCard, shape: ShardShape) -> str:
    # Attention / dense / shared-expert linears follow the checkpoint unless the user picks bf16;
    # the int4 convention keeps them BF16.
    if shape.weights_dtype == "fp8":
        return "fp8"
    return "bf16"


@lru_cache(maxsize=1024)
def _tensor_parallel_parts(
    card: ModelCard, tensor_parallel: int, dense_dtype: str, moe: bool
) -> tuple[tuple[tuple[str, int], ...], int]:
    """The parts of one layer that only TP splits (all but the routed experts), and their FP8 block scales.

    Kept apart from layer_bytes so the shardings that differ only in DP or EP share them.
    """
    tp = tensor_parallel
    h = card.hidden_size
    block = card.weight_block_size
    parts: dict[str, int] = {}
    scales = 0

    def add(name: str, cost: LinearCost) -> None:
        nonlocal scales
        parts[name] = parts.get(name, 0) + cost.weight_bytes
        scales += cost.scale_bytes

    heads_local = card.num_attention_heads // tp
    q_lora = card.q_lora_rank
    latent = card.mla_latent_dim
    if q_lora:
        add("mla_projections", _linear(q_lora + latent, h, dense_dtype, block))  # fused_qkv_a_proj, replicated
        add("mla_projections", _linear(heads_local * card.qk_head_dim, q_lora, dense_dtype, block))  # q_b_proj
        parts["norms"] = parts.get("norms", 0) + q_lora * BF16
    else:
        add("mla_projections", _linear(latent, h, dense_dtype, block))
        add("mla_projections", _linear(heads_local * card.qk_head_dim, h, dense_dtype, block))
    kv_b_out = heads_local * (card.qk_nope_head_dim + card.v_head_dim)
    add("mla_projections", _linear(kv_b_out, card.kv_lora_rank, dense_dtype, block))  # kv_b_proj
    add("mla_projections", _linear(h, heads_local * card.v_head_dim, dense_dtype, block))  # o_proj
    parts["mla_absorbed_bf16"] = card.kv_lora_rank * kv_b_out * BF16  # W_UK_T / W_UV
    parts["norms"] = parts.get("norms", 0) + (card.kv_lora_rank + 2 * h) * BF16

    if card.has_sparse_indexer and q_lora:
        index_q = card.index_n_heads * card.index_head_dim
        add("indexer", _linear(index_q, q_lora, dense_dtype, block))  # wq_b
        parts["indexer"] = parts.get("indexer", 0) + h * (card.index_head_dim + card.index_n_heads) * BF16
        parts["indexer"] += 2 * card.index_head_dim * BF16  # k_norm weight + bias

    if moe:
        parts["router"] = card.n_routed_experts * h * BF16 + card.n_routed_experts * FP32
        if card.n_shared_experts:
            shared_inter = card.moe_intermediate_size * card.n_shared_experts
            add("shared_experts", _linear(2 * shared_inter // tp, h, dense_dtype, block))
            add("shared_experts", _linear(h, shared_inter // tp, dense_dtype, block))
    else:
        add("dense_mlp", _linear(2 * card.intermediate_size // tp, h, dense_dtype, block))
        add("dense_mlp", _linear(h, card.intermediate_size // tp, dense_dtype, block))
    return tuple(parts.items()), scales


@lru_cache(maxsize=4096)
def layer_bytes(card: ModelCard, shape: ShardShape, moe: bool) -> LayerBytes:
    """Bytes one GPU holds for one decoder layer (dense or MoE) under `shape`."""
    dense_dtype = _attention_dtype(card, shape)
    tp_parts, scales = _tensor_parallel_parts(card, shape.tensor_parallel, dense_dtype, moe)
    parts = dict(tp_parts)
    if moe:
        h = card.hidden_size
        block = card.weight_block_size
        expert_dtype = "int4" if shape.weights_dtype == "int4" else dense_dtype
        group = card.int4_group_size or 32
        inter = card.moe_intermediate_size
        if shape.expert_parallel:
            local_experts = _ceil_div(card.n_routed_experts, shape.moe_ranks)
            local_inter = inter
        else:
            local_experts = card.n_routed_experts
            local_inter = inter // shape.moe_ranks
        w13 = _linear(2 * local_inter, h, expert_dtype, block, group)
        w2 = _linear(h, local_inter, expert_dtype, block, group)
        parts["routed_experts"] = local_experts * (w13.weight_bytes + w2.weight_bytes)
        scale_bytes = local_experts * (w13.scale_bytes + w2.scale_bytes)
        if expert_dtype == "int4":
            parts["routed_experts"] += scale_bytes  # group scales are part of the int4 format
        else:
            scales += scale_bytes
    if scales:
        parts["fp8_block_scales"] = scales
    return LayerBytes(tuple(parts.items()))


def padded_vocab_per_rank(card: ModelCard, tensor_parallel: int) -> int:
    padded = _ceil_div(card.vocab_size, VOCAB_PADDING) * VOCAB_PADDING
    return _ceil_div(padded, tensor_parallel)


def invalid_shard_reason(card: ModelCard, shape: ShardShape) -> str | None:
    """Why vLLM would refuse to build this sharding, or None when it builds."""
    tp = shape.tensor_parallel
    if card.num_attention_heads % tp:
        return (
            f"{card.num_attention_heads} attention heads are not divisible by TP={tp} "
            "(vLLM asserts num_heads % tp_size == 0)"
        )
    if card.intermediate_size % tp or card.moe_intermediate_size * max(card.n_shared_experts, 1) % tp:
        return f"MLP intermediate sizes are not divisible by TP={tp}"
    if shape.expert_parallel:
        if shape.moe_ranks > card.n_routed_experts:
            return (
                f"EP={shape.moe_ranks} exceeds the {card.n_routed_experts} routed experts "
                "(every EP rank needs at least one expert)"
            )
    elif card.moe_intermediate_size % shape.moe_ranks:
        return f"moe_intermediate_size {card.moe_intermediate_size} is not divisible by TP×DP={shape.moe_ranks}"
    uses_fp8 = shape.weights_dtype == "fp8" and card.checkpoint_dtype == CHECKPOINT_FP8_BLOCK
    block_n = card.weight_block_size[0]
    if uses_fp8 and tp > 1:
        dense_shard = card.intermediate_size // tp
        if dense_shard % block_n:
            return (
                f"dense MLP gate_up shard {card.intermediate_size}/TP{tp} = {dense_shard} is not divisible by "
                f"the FP8 block {block_n} (vLLM: 'not divisible by weight quantization block_n')"
            )
        shared_shard = card.moe_intermediate_size * max(card.n_shared_experts, 1) // tp
        if shared_shard % block_n:
            return (
                f"shared-expert gate_up shard {shared_shard} (TP={tp}) is not divisible by the FP8 block {block_n} "
                "(vLLM: 'not divisible by weight quantization block_n')"
            )
    if uses_fp8 and not shape.expert_parallel and shape.moe_ranks > 1:
        moe_shard = card.moe_intermediate_size // shape.moe_ranks
        if moe_shard % block_n:
            return (
                f"fused-MoE intermediate shard {card.moe_intermediate_size}/(TP×DP={shape.moe_ranks}) = {moe_shard} "
                f"is not divisible by the FP8 block {block_n}; use --enable-expert-parallel "
                "(vLLM: 'not divisible by weight quantization block_n')"
            )
    if shape.weights_dtype == "int4" and not shape.expert_parallel:
        group = card.int4_group_size or 32
        if (card.moe_intermediate_size // shape.moe_ranks) % group:
            return f"int4 expert shard is not a multiple of the quantization group {group}"
    return None


@dataclass(frozen=True)
class ShardTotals:
    """Per-GPU bytes of the pieces a stage is made of, for fast stage totals (see stage_total)."""

    dense_layer: int
    moe_layer: int
    routed_per_moe_layer: int  # the routed-experts part of moe_layer
    scales_dense_layer: int  # FP8 block scales inside dense_layer
    scales_moe_layer: int  # FP8 block scales inside moe_layer
    embed: int  # first stage
    last_stage_extra: int  # lm_head, final norm, MTP module when on
    every_stage_extra: int  # buffers and caches every stage allocates


def _rope_cache_bytes(card: ModelCard) -> int:
    # get_rope caches cos/sin for every position in BF16, one per distinct rope (V3.2's indexer has its own)
    ropes = 2 if card.has_sparse_indexer else 1
    return ropes * card.max_position_embeddings * card.qk_rope_head_dim * BF16


def _mtp_bytes(card: ModelCard, shape: ShardShape, table: int) -> int:
    per_layer = sum(v for _, v in layer_bytes(card, shape, card.n_routed_experts > 0).components)
    per_layer += 2 * card.hidden_size * card.hidden_size * BF16  # eh_proj, BF16, replicated
    per_layer += 3 * card.hidden_size * BF16  # enorm, hnorm, shared_head.norm
    per_layer += table  # shared_head.head (ParallelLMHead)
    return card.num_nextn_predict_layers * per_layer


@lru_cache(maxsize=4096)
def shard_totals(card: ModelCard, shape: ShardShape, mtp: bool, max_num_batched_tokens: int) -> ShardTotals:
    table = padded_vocab_per_rank(card, shape.tensor_parallel) * card.hidden_size * BF16
    every = _rope_cache_bytes(card)
    if card.has_sparse_indexer:
        every += max_num_batched_tokens * card.index_topk * 4  # topk_indices_buffer (int32)
    last = table + card.hidden_size * BF16 + (_mtp_bytes(card, shape, table) if mtp else 0)
    dense, moe = layer_bytes(card, shape, False).as_dict(), layer_bytes(card, shape, True).as_dict()
    return ShardTotals(
        dense_layer=sum(dense.values()),
        moe_layer=sum(moe.values()),
        routed_per_moe_layer=moe.get("routed_experts", 0),
        scales_dense_layer=dense.get("fp8_block_scales", 0),
        scales_moe_layer=moe.get("fp8_block_scales", 0),
        embed=table,
        last_stage_extra=last,
        every_stage_extra=every,
    )


def stage_total(totals: ShardTotals, dense_layers: int, moe_layers: int, first_stage: bool, last_stage: bool) -> int:
    """Same number as stage_weights(...).total_bytes, from precomputed pieces."""
    total = dense_layers * totals.dense_layer + moe_layers * totals.moe_layer + totals.every_stage_extra
    if first_stage:
        total += totals.embed
    if last_stage:
        total += totals.last_stage_extra
    return total


@dataclass(frozen=True)
class StageWeights:
    """Per-GPU weight bytes of one pipeline stage, by component."""

    components: tuple[tuple[str, int], ...]
    total_bytes: int

    def as_dict(self) -> dict[str, int]:
        return dict(self.components)


@lru_cache(maxsize=8192)
def stage_weights(
    card: ModelCard,
    shape: ShardShape,
    first_layer: int,
    end_layer: int,
    *,
    first_stage: bool,
    last_stage: bool,
    mtp: bool,
    max_num_batched_tokens: int,
) -> StageWeights:
    """Bytes one GPU of a stage holding layers [first_layer, end_layer) loads (vLLM's 'Model loading took')."""
    totals: dict[str, int] = {}

    def merge(layer: LayerBytes, times: int = 1) -> None:
        for name, value in layer.components:
            totals[name] = totals.get(name, 0) + value * times

    moe_layers = card.moe_layers_between(first_layer, end_layer)
    dense_layers = (end_layer - first_layer) - moe_layers
    if dense_layers:
        merge(layer_bytes(card, shape, False), dense_layers)
    if moe_layers:
        merge(layer_bytes(card, shape, True), moe_layers)
    vocab_rows = padded_vocab_per_rank(card, shape.tensor_parallel)
    table = vocab_rows * card.hidden_size * BF16
    if first_stage:
        totals["embed_tokens"] = table
    if last_stage:
        totals["lm_head"] = table
        totals["norms"] = totals.get("norms", 0) + card.hidden_size * BF16
    if card.has_sparse_indexer:
        # DeepseekV2Model allocates topk_indices_buffer[max_num_batched_tokens, index_topk] int32 at init.
        totals["indexer"] = totals.get("indexer", 0) + max_num_batched_tokens * card.index_topk * 4
    totals["rope_caches"] = _rope_cache_bytes(card)
    if mtp and last_stage and card.num_nextn_predict_layers:
        totals["mtp_layer"] = _mtp_bytes(card, shape, table)
    order = (
        "embed_tokens",
        "mla_projections",
        "mla_absorbed_bf16",
        "indexer",
        "norms",
        "dense_mlp",
        "shared_experts",
        "router",
        "routed_experts",
        "fp8_block_scales",
        "rope_caches",
        "lm_head",
        "mtp_layer",
    )
    components = tuple((name, totals[name]) for name in order if totals.get(name))
    return StageWeights(components, sum(value for _, value in components))
