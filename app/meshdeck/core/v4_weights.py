"""DeepSeek-V4 (Flash, Pro): every tensor vLLM 0.32.0 allocates for the weights, per GPU, and the parameter counts.

The model is described tensor by tensor (`layer_tensors`, `model_tensors`), named as vLLM names its parameters, with
the local shape one GPU holds; bytes and counts are sums over those tensors. Rules, as vLLM 0.32.0 builds the model
(paths under vllm/models/deepseek_v4/ unless said otherwise):

- Attention (attention.py DeepseekV4Attention.__init__): `fused_wqa_wkv` [q_lora_rank + head_dim, hidden] replicated
  (MergedColumnParallelLinear, disable_tp); `q_norm` [q_lora_rank], `kv_norm` [head_dim] BF16; `wq_b`
  ColumnParallel [heads·head_dim / TP, q_lora_rank]; `wo_a` ColumnParallel [o_groups·o_lora_rank / TP,
  heads·head_dim / o_groups]; `wo_b` RowParallel [hidden, o_groups·o_lora_rank / TP]; `attn_sink` fp32, one per local
  head padded by the platform (nvidia/flashmla.py get_padded_num_q_heads: 64 or 128; the CPU build: none).
- Compressor (compressor.py DeepseekCompressor.__init__), on layers with compress ratio r > 1: `ape` fp32
  [r, coff·head_dim] (coff = 2 when r = 4), `fused_wkv_wgate` BF16 [2·coff·head_dim, hidden] (quant_config=None,
  replicated), `norm` [head_dim] BF16. Indexer (attention.py DeepseekV4Indexer.__init__), on r = 4 layers only:
  `wq_b` replicated and quantized [index_n_heads·index_head_dim, q_lora_rank], `weights_proj` BF16
  [index_n_heads, hidden], and its own r = 4 compressor at index_head_dim.
- Decoder layer (nvidia/model.py DeepseekV4DecoderLayer.__init__): `attn_norm`, `ffn_norm` BF16 [hidden]; the
  hyper-connections `hc_{attn,ffn}_fn` fp32 [(2+m)·m, m·hidden], `hc_*_base` fp32 [(2+m)·m], `hc_*_scale` fp32 [3],
  m = hc_mult. The model (DeepseekV4Model.__init__) adds `hc_head_fn` [m, m·hidden], `hc_head_base` [m],
  `hc_head_scale` [1] fp32 on every PP stage, `embed_tokens` on the first, `norm` on the last; DeepseekV4ForCausalLM
  adds `lm_head` on the last. Embedding and head: vocab padded to 64 and split over TP (vocab_parallel_embedding.py).
- MoE (nvidia/model.py DeepseekV4MoE.__init__): `gate.weight` BF16 [experts, hidden] (GateLinear, unquantized);
  layers < num_hash_layers route by token id with `gate.tid2eid` int32 [vocab, top_k], the others carry
  `gate.e_score_correction_bias` fp32 [experts]. Shared expert (DeepseekV4MLP): gate_up ColumnParallel
  [2·I / TP, hidden], down RowParallel [hidden, I / TP]; with FP8 block quantization I is first padded to whole
  128-blocks per rank (cdiv(I / 128, TP)·128·TP). Routed experts (FusedMoE, `_init_fused_moe_experts`): with
  expert parallelism whole experts over EP = TP×DP (layers/fused_moe/expert_map_manager.py determine_expert_map: the
  first E mod EP ranks hold one more), else every expert with the intermediate split over TP×DP.
- MTP (nvidia/mtp.py DeepSeekV4MultiTokenPredictorLayer): `enorm`, `hnorm`, `e_proj` and `h_proj` (replicated,
  quantized [hidden, hidden]), its own hc_head trio, `shared_head.norm`, and one more decoder layer (compress ratio 1;
  attention.py: layers ≥ num_hidden_layers). The checkpoint's `shared_head.head` and `embed_tokens` are not held twice:
  v1/spec_decode/llm_base_proposer.py _maybe_share_lm_head always points the MTP head at the target's lm_head, and
  _maybe_share_embeddings shares the embedding when PP = 1 (with PP > 1 the MTP keeps its own, on the last stage).
- Buffers (not parameters, allocated at init): RoPE cos/sin caches in fp32 [positions, qk_rope_head_dim], one per
  distinct rope a stage uses (common/rope.py build_deepseek_v4_rope; rotary_embedding/deepseek_scaling_rope.py
  DeepseekV4ScalingRotaryEmbedding): sliding-window layers (and MTP) max_position_embeddings rows, compressed layers
  original_max_position_embeddings × factor rows; `topk_indices_buffer` int32 [max_num_batched_tokens, index_topk]
  (DeepseekV4Model), and `_mtp_hidden_buffer` BF16 [max_num_batched_tokens, hc_mult·hidden] on the last stage —
  from 0.27 only with an MTP / EAGLE / draft-model speculator, in 0.23–0.26 whatever the speculative config
  (`V4_WEIGHT_RULES`: the one tensor that differs by release; the MTP's own topk buffer is replaced by the target's in
  _maybe_share_lm_head).

Formats (`weights`): "checkpoint" as DeepSeek ships V4 (quant_config.py DeepseekV4FP8Config): every quantized linear
above (fused_wqa_wkv, wq_b, wo_a, wo_b, indexer.wq_b, shared expert, MTP e_proj/h_proj) FP8 e4m3 with one block
scale per 128×128 (layers/quantization/fp8.py Fp8LinearMethod.create_weights -> utils/fp8_utils.py
create_fp8_scale_parameter), the scale ue8m0 = 1 byte when `expert_dtype` is fp4 (DeepseekV4FP8Config.is_scale_e8m0)
else fp32; routed experts MXFP4 for fp4 (layers/quantization/mxfp4.py Mxfp4MoEMethod.create_weights: uint8 weight
holding 2 e2m1 values, one uint8 ue8m0 scale per 32 inputs, the per-rank intermediate rounded up to 128 by the GPU
backends: layers/fused_moe/oracle/mxfp4.py mxfp4_round_up_hidden_size_and_intermediate_size) or FP8 block experts
for fp8 (fp8.py Fp8MoEMethod.create_weights, fp32 block scales); embeddings, lm_head, norms, gate, compressors and
indexer weights_proj BF16; hyper-connections, ape, sinks and biases fp32. "bf16": what vLLM builds for a BF16
checkpoint (no quantization_config): every linear BF16, the rest as above.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import prod

from meshdeck.core.errors import InputError
from meshdeck.core.model_card import CHECKPOINT_FP8_BLOCK, ModelCard
from meshdeck.core.v4_shape import V4Shape
from meshdeck.core.vllm_releases import Release, ReleaseRange, release_text

V4_FORMATS = ("checkpoint", "bf16")
COMPONENTS = (
    "embedding",
    "attention",
    "compressor_indexer",
    "hyper_connections",
    "norms",
    "gate",
    "shared_expert",
    "routed_experts",
    "lm_head",
    "mtp",
)
BUFFER_COMPONENTS = ("rope_caches", "buffers")
DTYPE_BYTES = {"bf16": 2, "fp32": 4, "fp8": 1, "ue8m0": 1, "uint8": 1, "int32": 4}
VOCAB_PADDING = 64  # vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE
MXFP4_BLOCK = 32  # mxfp4.py Mxfp4MoEMethod.create_weights mxfp4_block
MXFP4_GPU_ROUND = 128  # oracle/mxfp4.py: DeepGEMM, CUTLASS, Marlin, TRT-LLM, FlashInfer round the intermediate to 128


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class V4WeightRules(ReleaseRange):
    """One range of releases that allocate the same tensors at init, and where the difference was read."""

    mtp_hidden_buffer_always: bool  # `_mtp_hidden_buffer` on the last PP stage even without a speculator
    source: str


V4_WEIGHT_RULES: tuple[V4WeightRules, ...] = (
    V4WeightRules(
        (0, 23),
        (0, 26),
        mtp_hidden_buffer_always=True,
        source="DeepseekV4Model.__init__ allocates `_mtp_hidden_buffer` under `if get_pp_group().is_last_rank:` "
        "alone: models/deepseek_v4/nvidia/model.py 0.23.0 965, 0.24.0 1009, 0.25.0 1030, 0.26.0 1049 (amd/model.py "
        "the same: 0.23.0 520, 0.24.0 523, 0.25.0 525, 0.26.0 529); it is counted in 'Model loading took' "
        "(v1/worker/gpu_model_runner.py load_model: DeviceMemoryProfiler around the model's construction)",
    ),
    V4WeightRules(
        (0, 27),
        (0, 33),
        mtp_hidden_buffer_always=False,
        source="`if get_pp_group().is_last_rank and needs_mtp_hidden_states:` with needs_mtp_hidden_states = "
        "speculative_config is not None and (use_eagle() or uses_draft_model()): nvidia/model.py 0.27.0 1095-1100, "
        "0.28.0 1094-1099, 0.29.0 1324-1329, 0.31.0 1503-1508, 0.32.0 1378-1383, 0.33.0 902-907; 0.30.0 was not "
        "read: it lies between two releases that agree",
    ),
)
WEIGHTS_RELEASE: Release = (0, 32)  # what the tensors above were proven against (and the CPU build plans for)


def v4_weight_rules(version: Release) -> V4WeightRules:
    """The init-time allocations of this release, or an InputError naming `--vllm-version` and the modelled ranges."""
    for rules in V4_WEIGHT_RULES:
        if rules.holds(version):
            return rules
    modelled = ", ".join(rules.label for rules in V4_WEIGHT_RULES)
    raise InputError(
        "--vllm-version",
        f"{release_text(version)}: what this release allocates for DeepSeek-V4 has not been read; the planner models "
        f"V4's weights for vLLM {modelled}",
    )


@dataclass(frozen=True)
class V4Shard:
    """How one GPU's slice is cut. moe_ranks = TP×DP, the group routed experts are spread over."""

    tensor_parallel: int = 1
    moe_ranks: int = 1
    expert_parallel: bool = False
    weights: str = "checkpoint"  # V4_FORMATS
    sink_padding: bool = True  # FlashMLA pads attn_sink to 64/128 heads (nvidia/flashmla.py); vLLM's CPU build does not
    mxfp4_round: int = MXFP4_GPU_ROUND  # per-rank expert intermediate rounding of the MXFP4 backends (1: none)
    mega_moe: bool = False  # --kernel-config moe_backend=<MegaMoE>: nvidia/model.py _init_mega_moe_experts


@dataclass(frozen=True)
class Tensor:
    """One tensor one GPU holds: vLLM's parameter name (below the layer), component, local shape and dtype."""

    name: str
    component: str
    shape: tuple[int, ...]
    dtype: str
    parameter: bool = True  # False: a buffer allocated at init (rope cache, topk indices)

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]


def _v4(card: ModelCard) -> V4Shape:
    if card.v4 is None:
        raise ValueError(f"{card.name} is not a DeepSeek-V4 card (architecture {card.architecture})")
    return card.v4


def _quantized(card: ModelCard, shard: V4Shard) -> bool:
    return shard.weights == "checkpoint" and card.checkpoint_dtype == CHECKPOINT_FP8_BLOCK


def _expert_dtype(card: ModelCard, shard: V4Shard) -> str:
    """bf16 | fp4 | fp8: quant_config.py DeepseekV4FP8Config.get_quant_method (fp4 -> Mxfp4MoEMethod)."""
    if not _quantized(card, shard):
        return "bf16"
    return "fp8" if _v4(card).expert_dtype == "fp8" else "fp4"


def _linear(
    card: ModelCard, shard: V4Shard, name: str, component: str, out_local: int, in_local: int, quantized: bool = True
) -> list[Tensor]:
    """One (local shard of a) linear layer: BF16, or FP8 + block scale (fp8.py Fp8LinearMethod.create_weights)."""
    if not (quantized and _quantized(card, shard)):
        return [Tensor(f"{name}.weight", component, (out_local, in_local), "bf16")]
    block_n, block_k = card.weight_block_size
    scale_dtype = "ue8m0" if _v4(card).expert_dtype == "fp4" else "fp32"  # DeepseekV4FP8Config.is_scale_e8m0
    return [
        Tensor(f"{name}.weight", component, (out_local, in_local), "fp8"),
        Tensor(
            f"{name}.weight_scale_inv",
            component,
            (_ceil_div(out_local, block_n), _ceil_div(in_local, block_k)),
            scale_dtype,
        ),
    ]


def _compressor(card: ModelCard, prefix: str, component: str, ratio: int, head_dim: int) -> list[Tensor]:
    """compressor.py DeepseekCompressor.__init__ (quant_config=None: BF16 whatever the checkpoint)."""
    coff = 2 if ratio == 4 else 1
    return [
        Tensor(f"{prefix}.ape", component, (ratio, coff * head_dim), "fp32"),
        Tensor(f"{prefix}.fused_wkv_wgate.weight", component, (2 * coff * head_dim, card.hidden_size), "bf16"),
        Tensor(f"{prefix}.norm.weight", component, (head_dim,), "bf16"),
    ]


def padded_sink_heads(local_heads: int, shard: V4Shard) -> int:
    """nvidia/flashmla.py get_padded_num_q_heads (64 if heads <= 64 else 128); cpu_sparse.py: unpadded."""
    if not shard.sink_padding:
        return local_heads
    return 64 if local_heads <= 64 else 128


def shared_intermediate(card: ModelCard, shard: V4Shard) -> int:
    """DeepseekV4MLP (nvidia/model.py): block-FP8 pads the shared expert to whole 128-blocks per TP rank."""
    inter = card.moe_intermediate_size * card.n_shared_experts
    if _quantized(card, shard):
        block = card.weight_block_size[0]
        return _ceil_div(inter // block, shard.tensor_parallel) * block * shard.tensor_parallel
    return inter


def local_experts(card: ModelCard, shard: V4Shard) -> tuple[int, int]:
    """(experts, intermediate) the busiest GPU holds: expert_map_manager.py determine_expert_map / FusedMoE."""
    if shard.expert_parallel:
        return _ceil_div(card.n_routed_experts, shard.moe_ranks), card.moe_intermediate_size
    return card.n_routed_experts, card.moe_intermediate_size // shard.moe_ranks


def _routed_experts(card: ModelCard, shard: V4Shard) -> list[Tensor]:
    experts, inter = local_experts(card, shard)
    h = card.hidden_size
    kind = _expert_dtype(card, shard)
    p = "ffn.experts.routed_experts"
    c = "routed_experts"
    if kind == "bf16":  # UnquantizedFusedMoEMethod
        return [
            Tensor(f"{p}.w13_weight", c, (experts, 2 * inter, h), "bf16"),
            Tensor(f"{p}.w2_weight", c, (experts, h, inter), "bf16"),
        ]
    if kind == "fp8":  # fp8.py Fp8MoEMethod.create_weights (block-quantized, fp32 scales)
        bn, bk = card.weight_block_size
        return [
            Tensor(f"{p}.w13_weight", c, (experts, 2 * inter, h), "fp8"),
            Tensor(f"{p}.w2_weight", c, (experts, h, inter), "fp8"),
            Tensor(f"{p}.w13_weight_scale_inv", c, (experts, 2 * _ceil_div(inter, bn), _ceil_div(h, bk)), "fp32"),
            Tensor(f"{p}.w2_weight_scale_inv", c, (experts, _ceil_div(h, bn), _ceil_div(inter, bk)), "fp32"),
        ]
    inter = _ceil_div(inter, shard.mxfp4_round) * shard.mxfp4_round  # mxfp4.py Mxfp4MoEMethod.maybe_roundup_sizes
    return [  # mxfp4.py Mxfp4MoEMethod.create_weights
        Tensor(f"{p}.w13_weight", c, (experts, 2 * inter, h // 2), "uint8"),
        Tensor(f"{p}.w13_weight_scale", c, (experts, 2 * inter, h // MXFP4_BLOCK), "uint8"),
        Tensor(f"{p}.w2_weight", c, (experts, h, inter // 2), "uint8"),
        Tensor(f"{p}.w2_weight_scale", c, (experts, h, inter // MXFP4_BLOCK), "uint8"),
    ]


@lru_cache(maxsize=4096)
def layer_tensors(card: ModelCard, shard: V4Shard, layer_index: int) -> tuple[Tensor, ...]:
    """Every parameter of decoder layer `layer_index` (num_hidden_layers and up: the MTP block) one GPU holds."""
    v4 = _v4(card)
    tp = shard.tensor_parallel
    h, heads = card.hidden_size, card.num_attention_heads
    q_lora = card.q_lora_rank or 0
    head_dim = v4.head_dim
    ratio = v4.compress_ratio(layer_index, card.num_hidden_layers)
    m = v4.hc_mult
    mix = (2 + m) * m
    out: list[Tensor] = []
    hc = "hyper_connections"
    for part in ("attn", "ffn"):
        out += [
            Tensor(f"hc_{part}_fn", hc, (mix, m * h), "fp32"),
            Tensor(f"hc_{part}_base", hc, (mix,), "fp32"),
            Tensor(f"hc_{part}_scale", hc, (3,), "fp32"),
        ]
    a = "attention"
    out.append(Tensor("attn.attn_sink", a, (padded_sink_heads(heads // tp, shard),), "fp32"))
    out += _linear(card, shard, "attn.fused_wqa_wkv", a, q_lora + head_dim, h)
    out.append(Tensor("attn.q_norm.weight", a, (q_lora,), "bf16"))
    out += _linear(card, shard, "attn.wq_b", a, heads * head_dim // tp, q_lora)
    out.append(Tensor("attn.kv_norm.weight", a, (head_dim,), "bf16"))
    out += _linear(card, shard, "attn.wo_a", a, v4.o_groups * v4.o_lora_rank // tp, heads * head_dim // v4.o_groups)
    out += _linear(card, shard, "attn.wo_b", a, h, v4.o_groups * v4.o_lora_rank // tp)
    ci = "compressor_indexer"
    if ratio == 4:
        index_q = card.index_n_heads * card.index_head_dim
        out += _linear(card, shard, "attn.indexer.wq_b", ci, index_q, q_lora)
        out.append(Tensor("attn.indexer.weights_proj.weight", ci, (card.index_n_heads, h), "bf16"))
        out += _compressor(card, "attn.indexer.compressor", ci, 4, card.index_head_dim)
    if ratio > 1:
        out += _compressor(card, "attn.compressor", ci, ratio, head_dim)
    g = "gate"
    out.append(Tensor("ffn.gate.weight", g, (card.n_routed_experts, h), "bf16"))
    if layer_index < v4.num_hash_layers:
        out.append(Tensor("ffn.gate.tid2eid", g, (card.vocab_size, card.num_experts_per_tok), "int32"))
    else:
        out.append(Tensor("ffn.gate.e_score_correction_bias", g, (card.n_routed_experts,), "fp32"))
    if card.n_shared_experts:
        inter = shared_intermediate(card, shard) // tp
        s = "shared_expert"
        out += _linear(card, shard, "ffn.shared_experts.gate_up_proj", s, 2 * inter, h)
        out += _linear(card, shard, "ffn.shared_experts.down_proj", s, h, inter)
    out += _routed_experts(card, shard)
    out += [Tensor("attn_norm.weight", "norms", (h,), "bf16"), Tensor("ffn_norm.weight", "norms", (h,), "bf16")]
    return tuple(out)


def padded_vocab_per_rank(card: ModelCard, tensor_parallel: int) -> int:
    """VocabParallelEmbedding / ParallelLMHead: vocab padded to 64, then split evenly over TP."""
    return _ceil_div(_ceil_div(card.vocab_size, VOCAB_PADDING) * VOCAB_PADDING, tensor_parallel)


def _rope_rows(card: ModelCard, compressed: bool) -> int:
    v4 = _v4(card)
    return (
        (v4.compressed_rope_positions or card.max_position_embeddings) if compressed else card.max_position_embeddings
    )


@lru_cache(maxsize=4096)
def model_tensors(
    card: ModelCard,
    shard: V4Shard,
    start_layer: int = 0,
    end_layer: int | None = None,
    *,
    first_stage: bool = True,
    last_stage: bool = True,
    mtp: bool = False,
    pipeline_parallel: int = 1,
    max_num_batched_tokens: int = 0,
    release: Release = WEIGHTS_RELEASE,
) -> tuple[Tensor, ...]:
    """Every tensor one GPU of the PP stage holding decoder layers [start_layer, end_layer) allocates.

    mtp: the MTP draft (--speculative-config method=mtp) on the last stage; pipeline_parallel decides whether it keeps
    its own embedding. max_num_batched_tokens > 0 adds the init-time buffers (0: weights and rope caches only), as
    `release` allocates them (v4_weight_rules).
    """
    v4 = _v4(card)
    end = card.num_hidden_layers if end_layer is None else end_layer
    h, m = card.hidden_size, v4.hc_mult
    vocab_local = padded_vocab_per_rank(card, shard.tensor_parallel)
    out: list[Tensor] = []
    hc_head = [
        Tensor("hc_head_fn", "hyper_connections", (m, m * h), "fp32"),
        Tensor("hc_head_base", "hyper_connections", (m,), "fp32"),
        Tensor("hc_head_scale", "hyper_connections", (1,), "fp32"),
    ]
    out += [Tensor(f"model.{t.name}", t.component, t.shape, t.dtype) for t in hc_head]
    if first_stage:
        out.append(Tensor("model.embed_tokens.weight", "embedding", (vocab_local, h), "bf16"))
    for index in range(start_layer, end):
        out += [
            Tensor(f"model.layers.{index}.{t.name}", t.component, t.shape, t.dtype, t.parameter)
            for t in layer_tensors(card, shard, index)
        ]
    with_mtp = mtp and last_stage and card.num_nextn_predict_layers > 0
    if last_stage:
        out.append(Tensor("model.norm.weight", "norms", (h,), "bf16"))
        out.append(Tensor("lm_head.weight", "lm_head", (vocab_local, h), "bf16"))
    if with_mtp:
        for index in range(card.num_hidden_layers, card.num_hidden_layers + card.num_nextn_predict_layers):
            p = f"mtp.layers.{index}"
            out += [Tensor(f"{p}.enorm.weight", "mtp", (h,), "bf16"), Tensor(f"{p}.hnorm.weight", "mtp", (h,), "bf16")]
            for proj in ("e_proj", "h_proj"):
                out += _linear(card, shard, f"{p}.{proj}", "mtp", h, h)
            out += [Tensor(f"{p}.{t.name}", "mtp", t.shape, t.dtype) for t in hc_head]
            out.append(Tensor(f"{p}.shared_head.norm.weight", "mtp", (h,), "bf16"))
            out += [
                Tensor(f"{p}.mtp_block.{t.name}", "mtp", t.shape, t.dtype) for t in layer_tensors(card, shard, index)
            ]
        if pipeline_parallel > 1:  # _maybe_share_embeddings shares only when PP = 1
            out.append(Tensor("mtp.embed_tokens.weight", "mtp", (vocab_local, h), "bf16"))
    ratios = [v4.compress_ratio(i, card.num_hidden_layers) for i in range(start_layer, end)]
    if any(r == 1 for r in ratios) or with_mtp:
        out.append(
            Tensor(
                "rope.sliding_window.cos_sin_cache",
                "rope_caches",
                (_rope_rows(card, False), card.qk_rope_head_dim),
                "fp32",
                False,
            )
        )
    if any(r > 1 for r in ratios):
        out.append(
            Tensor(
                "rope.compressed.cos_sin_cache",
                "rope_caches",
                (_rope_rows(card, True), card.qk_rope_head_dim),
                "fp32",
                False,
            )
        )
    if max_num_batched_tokens > 0:
        out.append(
            Tensor("model.topk_indices_buffer", "buffers", (max_num_batched_tokens, card.index_topk), "int32", False)
        )
        if with_mtp or (last_stage and v4_weight_rules(release).mtp_hidden_buffer_always):
            out.append(Tensor("model._mtp_hidden_buffer", "buffers", (max_num_batched_tokens, m * h), "bf16", False))
    return tuple(out)


@dataclass(frozen=True)
class V4Bytes:
    """Bytes one GPU holds, by component (COMPONENTS, then the buffers), and their total."""

    components: tuple[tuple[str, int], ...]

    @property
    def total(self) -> int:
        return sum(value for _, value in self.components)

    @property
    def weights(self) -> int:
        """Parameters only (what the checkpoint fills), without the rope caches and index buffers."""
        return sum(value for name, value in self.components if name not in BUFFER_COMPONENTS)

    def as_dict(self) -> dict[str, int]:
        return dict(self.components)


def by_component(tensors: tuple[Tensor, ...], measure: str = "bytes") -> tuple[tuple[str, int], ...]:
    totals: dict[str, int] = {}
    for t in tensors:
        totals[t.component] = totals.get(t.component, 0) + (t.nbytes if measure == "bytes" else t.numel)
    return tuple((name, totals[name]) for name in COMPONENTS + BUFFER_COMPONENTS if name in totals)


@lru_cache(maxsize=4096)
def stage_bytes(
    card: ModelCard,
    shard: V4Shard,
    start_layer: int = 0,
    end_layer: int | None = None,
    *,
    first_stage: bool = True,
    last_stage: bool = True,
    mtp: bool = False,
    pipeline_parallel: int = 1,
    max_num_batched_tokens: int = 0,
    release: Release = WEIGHTS_RELEASE,
) -> V4Bytes:
    """Bytes one GPU of a stage holds, by component (see model_tensors for the arguments)."""
    tensors = model_tensors(
        card,
        shard,
        start_layer,
        end_layer,
        first_stage=first_stage,
        last_stage=last_stage,
        mtp=mtp,
        pipeline_parallel=pipeline_parallel,
        max_num_batched_tokens=max_num_batched_tokens,
        release=release,
    )
    return V4Bytes(by_component(tensors))


@dataclass(frozen=True)
class V4ParameterCounts:
    """Logical (unsharded) parameter counts, by component; `mtp` apart from the main model."""

    components: tuple[tuple[str, int], ...]  # main model, COMPONENTS order, mtp excluded
    mtp: int
    active_per_token: int

    @property
    def main_model(self) -> int:
        return sum(value for _, value in self.components)

    @property
    def total(self) -> int:
        return self.main_model + self.mtp

    def as_dict(self) -> dict[str, int]:
        return {
            "total": self.total,
            "main_model": self.main_model,
            "mtp": self.mtp,
            "active_per_token": self.active_per_token,
            **dict(self.components),
        }


_WHOLE = V4Shard(weights="bf16", sink_padding=False)


@lru_cache(maxsize=64)
def parameter_counts(card: ModelCard) -> V4ParameterCounts:
    """Parameters as vLLM's BF16 model at TP = 1 holds them (every element of every parameter, the hash tables
    tid2eid included; rope caches excluded). `mtp` counts the MTP module's own parameters (its embedding and head
    are the target's copies, see the module docstring). Active per token: everything but the routed experts, plus
    num_experts_per_tok of them per layer, less the embedding table (a token reads one row of it; DeepSeek's
    "activated": V4-Flash 13B, V4-Pro 49B)."""
    main = model_tensors(card, _WHOLE, mtp=False)
    with_mtp = model_tensors(card, _WHOLE, mtp=True)
    params = tuple(t for t in main if t.parameter)
    mtp = sum(t.numel for t in with_mtp if t.parameter) - sum(t.numel for t in params)
    components = by_component(params, "numel")
    routed = dict(components).get("routed_experts", 0)
    per_expert_all_layers = routed // card.n_routed_experts
    embedding = dict(components).get("embedding", 0)
    active = sum(v for _, v in components) - routed + card.num_experts_per_tok * per_expert_all_layers - embedding
    return V4ParameterCounts(components, mtp, active)


def _checkpoint_tensors(card: ModelCard, weights: str) -> tuple[Tensor, ...]:
    shard = V4Shard(weights=weights, sink_padding=False, mxfp4_round=1)
    return tuple(t for t in model_tensors(card, shard, mtp=True) if t.parameter)


def checkpoint_bytes(card: ModelCard, weights: str = "checkpoint") -> int:
    """Bytes of every parameter of the whole model with its MTP module, unsharded (TP = 1, no padding): the size of
    the checkpoint's tensors when its MTP module stores no copy of the embedding and head (vLLM holds none)."""
    return sum(t.nbytes for t in _checkpoint_tensors(card, weights))


def checkpoint_elements(card: ModelCard) -> int:
    """Stored elements of the shipped checkpoint (FP4 packed two per uint8 element, scales one per element): what
    Hugging Face shows as a safetensors model's "params"."""
    return sum(t.numel for t in _checkpoint_tensors(card, "checkpoint"))


def invalid_shard_reason(card: ModelCard, shard: V4Shard) -> str | None:
    """Why vLLM 0.32.0 would refuse to build this shard of DeepSeek-V4, naming the rule; None when it builds."""
    v4 = _v4(card)
    tp, ranks = shard.tensor_parallel, shard.moe_ranks
    if shard.weights not in V4_FORMATS:
        return f"weights must be one of {', '.join(V4_FORMATS)}, got {shard.weights!r}"
    if tp < 1 or ranks < tp or ranks % tp:
        return f"moe_ranks (TP×DP={ranks}) must be a positive multiple of TP={tp}"
    heads = card.num_attention_heads
    if heads % tp:
        return (
            f"{heads} attention heads are not divisible by TP={tp} "
            "(attention.py DeepseekV4Attention: assert self.n_heads % tp_size == 0)"
        )
    if v4.o_groups % tp:
        return (
            f"o_groups {v4.o_groups} is not divisible by TP={tp}: wo_a is split into o_groups // TP = "
            f"{v4.o_groups // tp} local groups (attention.py: n_local_groups = n_groups // tp_size, "
            "wo_a.bmm_batch_size)"
        )
    if shard.sink_padding and heads // tp > 128:
        return (
            f"{heads // tp} local heads exceed FlashMLA's 128 (nvidia/flashmla.py get_padded_num_q_heads: "
            "'FP8 decode kernel requires h_q in {64, 128}')"
        )
    if shard.mega_moe and not shard.expert_parallel:
        return "MegaMoE requires expert parallel (nvidia/model.py DeepseekV4MoE: 'Enable it with --enable-expert-parallel')"
    if shard.expert_parallel:
        if ranks > card.n_routed_experts:
            return (
                f"EP={ranks} exceeds the {card.n_routed_experts} routed experts "
                "(expert_map_manager.py determine_expert_map leaves ranks with no expert)"
            )
        if shard.mega_moe and card.n_routed_experts % ranks:
            return (
                f"{card.n_routed_experts} routed experts are not divisible by EP={ranks} "
                "(nvidia/model.py _init_mega_moe_experts: n_physical_experts must be divisible by ep_size)"
            )
    elif card.moe_intermediate_size % ranks:
        return (
            f"moe_intermediate_size {card.moe_intermediate_size} is not divisible by TP×DP={ranks} "
            "(FusedMoE splits the expert intermediate over TP×DP without expert parallel)"
        )
    quantized = _quantized(card, shard)
    if not quantized and card.n_shared_experts and (card.moe_intermediate_size * card.n_shared_experts) % tp:
        return f"the shared expert's intermediate is not divisible by TP={tp} (MergedColumnParallelLinear divide)"
    if quantized:
        block_n, block_k = card.weight_block_size
        columns = {
            "wq_b": heads * v4.head_dim // tp,
            "wo_a": v4.o_groups * v4.o_lora_rank // tp,
        }
        for name, size in columns.items():
            if tp > 1 and size % block_n:
                return (
                    f"{name} output shard {size} (TP={tp}) is not divisible by the FP8 block {block_n} "
                    "(utils/fp8_utils.py validate_fp8_block_shape: 'not divisible by weight quantization block_n')"
                )
        wo_b_in = v4.o_groups * v4.o_lora_rank // tp
        if tp > 1 and wo_b_in % block_k:
            return (
                f"wo_b input shard {wo_b_in} (TP={tp}) is not divisible by the FP8 block {block_k} "
                "(validate_fp8_block_shape: 'not divisible by weight quantization block_k')"
            )
        if (card.q_lora_rank or 0) % block_n:
            return (
                f"q_lora_rank {card.q_lora_rank} is not a multiple of the FP8 block {block_n}: fused_wqa_wkv merges "
                "it with the KV head (validate_fp8_block_shape, merged weights)"
            )
        expert = _expert_dtype(card, shard)
        if expert == "fp8" and not shard.expert_parallel and (card.moe_intermediate_size // ranks) % block_n:
            return (
                f"fused-MoE intermediate shard {card.moe_intermediate_size // ranks} (TP×DP={ranks}) is not "
                f"divisible by the FP8 block {block_n} (fp8.py validate_fp8_block_shape_moe); use expert parallel"
            )
        if expert == "fp4" and not shard.expert_parallel and (card.moe_intermediate_size // ranks) % MXFP4_BLOCK:
            return (
                f"MXFP4 expert intermediate shard {card.moe_intermediate_size // ranks} (TP×DP={ranks}) is not a "
                f"multiple of the {MXFP4_BLOCK}-value scale block (mxfp4.py create_weights: I // 32 scales)"
            )
    return None
