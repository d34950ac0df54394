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
group-wise BF16 scales, as Kimi-K2-Thinking ships), every other linear layer BF16; `nvfp4` = NVIDIA's
ModelOpt recipe for DeepSeek (TensorRT-Model-Optimizer examples/deepseek/ptq.py: "*attn*" and "*head*"
disabled, the MTP layer excluded): dense MLP, shared and routed experts NVFP4, MLA and indexer BF16.
A checkpoint read from its config.json is priced as it declares (model_card / checkpoint_quant): the
families its exclusion list leaves BF16, whole BF16 layers (an AWQ list naming `model.layers.60.`).
On AMD GPUs (ShardShape.rocm_row_padding) vLLM re-allocates each FP8 block-quantized linear weight and each
BF16 routed-expert weight 256 bytes wider per 512-byte-aligned row (VLLM_ROCM_FP8_PADDING / VLLM_ROCM_MOE_PADDING,
see core.rocm): kept apart as `rocm_row_padding`.
Bytes per format, as vLLM 0.33 allocates them (layers/quantization/):
- NVFP4 (modelopt.py ModelOptNvFp4FusedMoE.create_weights, ModelOptLinearMethod): uint8 weight holding two
  e2m1 values (out × in/2), an fp8 e4m3 weight_scale per group of 16 inputs (out × in/16), and fp32
  per-tensor weight_scale_2 and input_scale per logical shard (per expert in the MoE).
- MXFP4 (vLLM 0.22 quark/schemes/quark_ocp_mx.py create_weights, quark_moe.py QuarkOCP_MX_MoEMethod): uint8
  weight holding two e2m1 values (out × in/2) and a uint8 e8m0 weight_scale per 32 inputs (out × in/32).
- AWQ / GPTQ int4 (auto_awq.py, auto_gptq.py create_weights): int32-packed qweight (in × out / 2 bytes),
  scales in the model dtype per group (in/group × out × 2), int32-packed qzeros (in/group × out / 2) —
  GPTQ allocates qzeros always, AWQ with zero_point.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from meshdeck.core.checkpoint_quant import FAMILIES, MXFP4_GROUP
from meshdeck.core.model_card import CHECKPOINT_FP8_BLOCK, ModelCard
from meshdeck.core.rocm import padding_bytes_per_row

WEIGHTS_DTYPES = ("fp8", "bf16", "int4", "nvfp4", "mxfp4")
WEIGHTS_CONVENTIONS = {
    "fp8": "FP8 e4m3 linear layers with an fp32 scale per 128x128 block; embeddings, lm_head, norms, router, "
    "indexer wk/weights_proj and MTP eh_proj in BF16 (as DeepSeek ships it)",
    "bf16": "every parameter in BF16 (2 bytes)",
    "int4": "routed experts int4 weight-only (0.5 byte + one BF16 scale per 32 inputs), everything else BF16",
    "nvfp4": "NVFP4 (0.5 byte + one fp8 scale per 16 inputs) dense MLP, shared and routed experts; MLA, indexer, "
    "embeddings, lm_head, norms, router and the MTP layer in BF16 (NVIDIA's ModelOpt DeepSeek recipe)",
    "mxfp4": "OCP MXFP4 (0.5 byte + one e8m0 scale byte per 32 inputs) dense MLP, shared and routed experts; MLA, "
    "indexer, embeddings, lm_head, norms and router in BF16 (AMD's Quark recipe for DeepSeek-R1 and Kimi-K2.5)",
}
# What each --weights-dtype quantizes when the checkpoint does not say (see the module docstring).
_DEFAULT_FAMILIES = {
    "fp8": FAMILIES,
    "bf16": (),
    "int4": ("routed_experts",),
    "nvfp4": ("dense_mlp", "shared_experts", "routed_experts"),
    "mxfp4": ("dense_mlp", "shared_experts", "routed_experts"),
}
NVFP4_GROUP = 16
VOCAB_PADDING = 64  # vLLM DEFAULT_VOCAB_PADDING_SIZE
BF16 = 2
FP32 = 4


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class LinearCost:
    weight_bytes: int
    scale_bytes: int


@dataclass(frozen=True)
class WeightFormat:
    """How every family of linear layers is stored under one --weights-dtype for one checkpoint."""

    dtypes: tuple[tuple[str, str], ...]  # family -> fp8 | bf16 | int4 | nvfp4 | mxfp4
    block: tuple[int, int]
    group: int  # int4 / NVFP4 / MXFP4 scale group
    zero_points: bool

    def of(self, family: str) -> str:
        return dict(self.dtypes)[family]


_NATIVE = {"fp8": "fp8", "bf16": "bf16", "int4": "int4", "nvfp4": "nvfp4", "mxfp4": "mxfp4"}


@lru_cache(maxsize=256)
def weight_format(card: ModelCard, weights_dtype: str, whole_layer_bf16: bool = False) -> WeightFormat:
    """The storage of each family: as the checkpoint declares when weights_dtype is its own format."""
    native = card.quant_method and _NATIVE.get(card.checkpoint_dtype) == weights_dtype
    quantized = card.quantized_families if native else _DEFAULT_FAMILIES[weights_dtype]
    if whole_layer_bf16:
        quantized = ()
    if weights_dtype == "nvfp4":
        group, zeros = (card.quant_group_size if native else 0) or NVFP4_GROUP, False
    elif weights_dtype == "mxfp4":
        group, zeros = MXFP4_GROUP, False
    else:
        group, zeros = card.int4_group_size or 32, bool(native and card.int4_zero_points)
    dtypes = tuple((f, weights_dtype if f in quantized else "bf16") for f in FAMILIES)
    return WeightFormat(dtypes, card.weight_block_size, group, zeros)


def _linear(out_features: int, in_features: int, dtype: str, fmt: WeightFormat, shards: int = 1) -> LinearCost:
    """Bytes of one (local shard of a) linear layer in the given storage format; `shards` fused logical layers."""
    if dtype == "fp8":
        block = fmt.block
        scales = _ceil_div(out_features, block[0]) * _ceil_div(in_features, block[1]) * FP32
        return LinearCost(out_features * in_features, scales)
    if dtype == "int4":
        groups = out_features * _ceil_div(in_features, fmt.group)
        zeros = groups // 2 if fmt.zero_points else 0
        return LinearCost(out_features * in_features // 2, groups * BF16 + zeros)
    if dtype == "nvfp4":
        scales = out_features * _ceil_div(in_features, fmt.group) + 2 * shards * FP32
        return LinearCost(out_features * in_features // 2, scales)
    if dtype == "mxfp4":
        return LinearCost(out_features * in_features // 2, out_features * _ceil_div(in_features, fmt.group))
    return LinearCost(out_features * in_features * BF16, 0)


@dataclass(frozen=True)
class ShardShape:
    """How one rank's slice of the model is cut (independent of which layers it holds)."""

    tensor_parallel: int
    moe_ranks: int  # TP × DP: the group routed experts are spread over
    expert_parallel: bool
    weights_dtype: str
    rocm_row_padding: bool = False  # vLLM on ROCm pads FP8 linear and BF16 expert weights (see core.rocm)
    vision_whole: bool = False  # --mm-encoder-tp-mode data: every rank holds the whole vision tower


@dataclass(frozen=True)
class LayerBytes:
    """Per-GPU bytes of one decoder layer, by component (FP8 scales kept apart)."""

    components: tuple[tuple[str, int], ...]

    def as_dict(self) -> dict[str, int]:
        return dict(self.components)


@lru_cache(maxsize=1024)
def _tensor_parallel_parts(
    card: ModelCard, tensor_parallel: int, fmt: WeightFormat, moe: bool, rocm_row_padding: bool = False
) -> tuple[tuple[tuple[str, int], ...], int]:
    """The parts of one layer that only TP splits (all but the routed experts), and their FP8 block scales.

    Kept apart from layer_bytes so the shardings that differ only in DP or EP share them.
    """
    tp = tensor_parallel
    h = card.hidden_size
    parts: dict[str, int] = {}
    scales = 0

    def add(name: str, family: str, out_features: int, in_features: int, shards: int = 1) -> None:
        nonlocal scales
        dtype = fmt.of(family)
        cost = _linear(out_features, in_features, dtype, fmt, shards)
        parts[name] = parts.get(name, 0) + cost.weight_bytes
        if dtype == "fp8":
            scales += cost.scale_bytes
            if rocm_row_padding:
                padding = out_features * padding_bytes_per_row(in_features, 1)
                parts["rocm_row_padding"] = parts.get("rocm_row_padding", 0) + padding
        else:  # int4 / NVFP4 / MXFP4 scales are part of the format
            parts[name] += cost.scale_bytes

    heads_local = card.num_attention_heads // tp
    q_lora = card.q_lora_rank
    latent = card.mla_latent_dim
    if q_lora:
        add("mla_projections", "fused_qkv_a", q_lora + latent, h, 2)  # fused_qkv_a_proj, replicated
        add("mla_projections", "q_b_proj", heads_local * card.qk_head_dim, q_lora)
        parts["norms"] = parts.get("norms", 0) + q_lora * BF16
    else:
        add("mla_projections", "fused_qkv_a", latent, h)
        add("mla_projections", "q_b_proj", heads_local * card.qk_head_dim, h)
    kv_b_out = heads_local * (card.qk_nope_head_dim + card.v_head_dim)
    add("mla_projections", "kv_b_proj", kv_b_out, card.kv_lora_rank)
    add("mla_projections", "o_proj", h, heads_local * card.v_head_dim)
    parts["mla_absorbed_bf16"] = card.kv_lora_rank * kv_b_out * BF16  # W_UK_T / W_UV
    parts["norms"] = parts.get("norms", 0) + (card.kv_lora_rank + 2 * h) * BF16

    if card.has_sparse_indexer and q_lora:
        index_q = card.index_n_heads * card.index_head_dim
        add("indexer", "indexer", index_q, q_lora)  # wq_b
        parts["indexer"] = parts.get("indexer", 0) + h * (card.index_head_dim + card.index_n_heads) * BF16
        parts["indexer"] += 2 * card.index_head_dim * BF16  # k_norm weight + bias

    if moe:
        parts["router"] = card.n_routed_experts * h * BF16 + card.n_routed_experts * FP32
        if card.n_shared_experts:
            shared_inter = card.moe_intermediate_size * card.n_shared_experts
            add("shared_experts", "shared_experts", 2 * shared_inter // tp, h, 2)
            add("shared_experts", "shared_experts", h, shared_inter // tp)
    else:
        add("dense_mlp", "dense_mlp", 2 * card.intermediate_size // tp, h, 2)
        add("dense_mlp", "dense_mlp", h, card.intermediate_size // tp)
    return tuple(parts.items()), scales


@lru_cache(maxsize=4096)
def layer_bytes(card: ModelCard, shape: ShardShape, moe: bool, whole_layer_bf16: bool = False) -> LayerBytes:
    """Bytes one GPU holds for one decoder layer (dense or MoE) under `shape`; a checkpoint's BF16 layer whole."""
    fmt = weight_format(card, shape.weights_dtype, whole_layer_bf16)
    tp_parts, scales = _tensor_parallel_parts(card, shape.tensor_parallel, fmt, moe, shape.rocm_row_padding)
    parts = dict(tp_parts)
    if moe:
        h = card.hidden_size
        expert_dtype = fmt.of("routed_experts")
        inter = card.moe_intermediate_size
        if shape.expert_parallel:
            local_experts = _ceil_div(card.n_routed_experts, shape.moe_ranks)
            local_inter = inter
        else:
            local_experts = card.n_routed_experts
            local_inter = inter // shape.moe_ranks
        w13 = _linear(2 * local_inter, h, expert_dtype, fmt, 2)
        w2 = _linear(h, local_inter, expert_dtype, fmt)
        parts["routed_experts"] = local_experts * (w13.weight_bytes + w2.weight_bytes)
        if shape.rocm_row_padding and expert_dtype == "bf16":  # _maybe_pad_weight of the Triton MoE backend
            rows = 2 * local_inter * padding_bytes_per_row(h, BF16) + h * padding_bytes_per_row(local_inter, BF16)
            parts["rocm_row_padding"] = parts.get("rocm_row_padding", 0) + local_experts * rows
        scale_bytes = local_experts * (w13.scale_bytes + w2.scale_bytes)
        if expert_dtype in ("int4", "nvfp4", "mxfp4"):
            parts["routed_experts"] += scale_bytes  # group scales are part of the int4 / NVFP4 / MXFP4 format
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
    if shape.weights_dtype == "nvfp4" and not shape.expert_parallel:
        group = weight_format(card, "nvfp4").group
        if (card.moe_intermediate_size // shape.moe_ranks) % group:
            return f"NVFP4 expert shard is not a multiple of the scale group {group}"
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
    dense_layer_bf16: int = 0  # a dense / MoE layer the checkpoint keeps BF16 whole (unquantized_layers)
    moe_layer_bf16: int = 0


def _rope_cache_bytes(card: ModelCard) -> int:
    # get_rope caches cos/sin for every position in BF16, one per distinct rope (V3.2's indexer has its own)
    ropes = 2 if card.has_sparse_indexer else 1
    return ropes * card.max_position_embeddings * card.qk_rope_head_dim * BF16


def vision_tower_bytes(card: ModelCard, shape: ShardShape) -> int:
    """A multimodal card's BF16 vision tower + projector on one GPU of every stage (core/vision_tower.py): the
    encoder blocks split over TP (`--mm-encoder-tp-mode weights`, vLLM's default) or whole (`data`)."""
    split = 1 if shape.vision_whole else shape.tensor_parallel
    return (_ceil_div(card.vision_params_tp, split) + card.vision_params_replicated) * BF16


def _mtp_bytes(card: ModelCard, shape: ShardShape, table: int) -> int:
    bf16_layer = card.num_hidden_layers in card.unquantized_layers
    per_layer = sum(v for _, v in layer_bytes(card, shape, card.n_routed_experts > 0, bf16_layer).components)
    per_layer += 2 * card.hidden_size * card.hidden_size * BF16  # eh_proj, BF16, replicated
    per_layer += 3 * card.hidden_size * BF16  # enorm, hnorm, shared_head.norm
    per_layer += table  # shared_head.head (ParallelLMHead)
    return card.num_nextn_predict_layers * per_layer


@lru_cache(maxsize=4096)
def shard_totals(card: ModelCard, shape: ShardShape, mtp: bool, max_num_batched_tokens: int) -> ShardTotals:
    table = padded_vocab_per_rank(card, shape.tensor_parallel) * card.hidden_size * BF16
    every = _rope_cache_bytes(card) + vision_tower_bytes(card, shape)
    if card.has_sparse_indexer:
        every += max_num_batched_tokens * card.index_topk * 4  # topk_indices_buffer (int32)
    last = table + card.hidden_size * BF16 + (_mtp_bytes(card, shape, table) if mtp else 0)
    dense, moe = layer_bytes(card, shape, False).as_dict(), layer_bytes(card, shape, True).as_dict()
    bf16_layers = bool(card.unquantized_layers)
    return ShardTotals(
        dense_layer=sum(dense.values()),
        moe_layer=sum(moe.values()),
        routed_per_moe_layer=moe.get("routed_experts", 0),
        scales_dense_layer=dense.get("fp8_block_scales", 0),
        scales_moe_layer=moe.get("fp8_block_scales", 0),
        embed=table,
        last_stage_extra=last,
        every_stage_extra=every,
        dense_layer_bf16=_layer_total(card, shape, False) if bf16_layers else 0,
        moe_layer_bf16=_layer_total(card, shape, True) if bf16_layers else 0,
    )


def _layer_total(card: ModelCard, shape: ShardShape, moe: bool) -> int:
    return sum(v for _, v in layer_bytes(card, shape, moe, True).components)


def stage_total(
    totals: ShardTotals,
    dense_layers: int,
    moe_layers: int,
    first_stage: bool,
    last_stage: bool,
    bf16_dense_layers: int = 0,
    bf16_moe_layers: int = 0,
) -> int:
    """Same number as stage_weights(...).total_bytes, from precomputed pieces.

    dense_layers / moe_layers count every layer of the stage; bf16_* those of them the checkpoint keeps BF16.
    """
    total = dense_layers * totals.dense_layer + moe_layers * totals.moe_layer + totals.every_stage_extra
    total += bf16_dense_layers * (totals.dense_layer_bf16 - totals.dense_layer)
    total += bf16_moe_layers * (totals.moe_layer_bf16 - totals.moe_layer)
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

    bf16 = [i for i in card.unquantized_layers if first_layer <= i < end_layer]
    bf16_moe = sum(1 for i in bf16 if card.is_moe_layer(i))
    moe_layers = card.moe_layers_between(first_layer, end_layer) - bf16_moe
    dense_layers = (end_layer - first_layer) - moe_layers - len(bf16)
    if dense_layers:
        merge(layer_bytes(card, shape, False), dense_layers)
    if moe_layers:
        merge(layer_bytes(card, shape, True), moe_layers)
    if len(bf16) - bf16_moe:
        merge(layer_bytes(card, shape, False, True), len(bf16) - bf16_moe)
    if bf16_moe:
        merge(layer_bytes(card, shape, True, True), bf16_moe)
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
    totals["vision_tower"] = vision_tower_bytes(card, shape)
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
        "rocm_row_padding",
        "rope_caches",
        "vision_tower",
        "lm_head",
        "mtp_layer",
    )
    components = tuple((name, totals[name]) for name in order if totals.get(name))
    return StageWeights(components, sum(value for _, value in components))
