"""DeepSeek-V4 inside the GPU planner: the evaluator's questions (what a shard holds, what a stage's KV block costs and
how many a request needs) answered by core.v4_weights and core.v4_kv instead of V3's arithmetic.

Weights are exact per stage (each V4 layer differs: compressors on ratio-4 / ratio-128 layers, the indexer on
ratio-4 ones, hash-routed gates on the first layers), so every pipeline stage is its own kind. The KV cache is
grouped and sized as the planned release does (core.v4_kv.V4_KV_RULES, read from each release's source; a release
serving V4 that was not read is refused). The activation / sampler reserve keeps core.reserve's terms at V4's widths (the
residual stream hc_mult times wider); no public V4 startup log has checked it yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from meshdeck.core.errors import InputError
from meshdeck.core.gpu_spec import GpuSpec
from meshdeck.core.kv_cache import KvFormat
from meshdeck.core.model_card import ModelCard
from meshdeck.core.v4_kv import (
    MAX_KV_BYTES,
    V4Backend,
    V4KvPlan,
    cuda_backend,
    plan_v4_kv,
    resolve_kv_cache_dtype,
    v4_kv_rules,
)
from meshdeck.core.v4_weights import V4Bytes, V4Shard, stage_bytes
from meshdeck.core.v4_weights import invalid_shard_reason as v4_invalid_shard_reason
from meshdeck.core.vllm_releases import Release
from meshdeck.core.weights import ShardShape, ShardTotals

FP8_DS_MLA_ROW_BYTES = 584  # one V4 latent row: 448 fp8 NoPE + 64 bf16 RoPE + 8 B of UE8M0 scales (attention.py)


def v4_backend(gpu: GpuSpec) -> V4Backend:
    """The V4 attention class vLLM builds on this GPU (`_select_dsv4_attn_cls`; ROCm: DeepseekV4ROCMAiterMLAAttention)."""
    if gpu.vendor == "amd":
        return V4Backend.ROCM
    major = gpu.compute_capability[0]
    return cuda_backend(major)


def v4_shard(card: ModelCard, shape: ShardShape) -> V4Shard:
    """The V4 shard of the evaluator's ShardShape: as the checkpoint ships it unless BF16 is asked for."""
    weights = "bf16" if shape.weights_dtype == "bf16" and card.checkpoint_dtype != "bf16" else "checkpoint"
    return V4Shard(
        tensor_parallel=shape.tensor_parallel,
        moe_ranks=shape.moe_ranks,
        expert_parallel=shape.expert_parallel,
        weights=weights,
    )


def v4_shard_problem(card: ModelCard, shape: ShardShape) -> str | None:
    """Why vLLM would not build this shard of V4 (core.v4_weights), or why meshdeck cannot plan it."""
    if shape.weights_dtype not in ("bf16", card.checkpoint_dtype):
        return f"DeepSeek-V4 is planned as its checkpoint ships ({card.checkpoint_dtype}) or in bf16"
    return v4_invalid_shard_reason(card, v4_shard(card, shape))


def v4_stage_bytes(
    card: ModelCard,
    shape: ShardShape,
    layers: tuple[int, int],
    *,
    first_stage: bool,
    last_stage: bool,
    mtp: bool,
    pipeline_parallel: int,
    max_num_batched_tokens: int,
    release: Release,
) -> V4Bytes:
    """One GPU of the stage holding decoder layers [start, end): parameters and init-time buffers, by component, as
    `release` allocates them (core.v4_weights.V4_WEIGHT_RULES)."""
    return stage_bytes(
        card,
        v4_shard(card, shape),
        layers[0],
        layers[1],
        first_stage=first_stage,
        last_stage=last_stage,
        mtp=mtp,
        pipeline_parallel=pipeline_parallel,
        max_num_batched_tokens=max_num_batched_tokens,
        release=release,
    )


@lru_cache(maxsize=256)
def v4_shard_totals(
    card: ModelCard, shape: ShardShape, mtp: bool, max_num_batched_tokens: int, release: Release
) -> ShardTotals:
    """The whole model on one rank folded into V3's per-layer pieces — for the roofline decode estimate only (it reads
    bytes per layer and per expert); the memory plan uses v4_stage_bytes, exact per stage."""
    whole = v4_stage_bytes(
        card,
        shape,
        (0, card.num_hidden_layers),
        first_stage=True,
        last_stage=True,
        mtp=mtp,
        pipeline_parallel=1,
        max_num_batched_tokens=max_num_batched_tokens,
        release=release,
    ).as_dict()
    layers = card.num_hidden_layers
    per_layer = ("attention", "compressor_indexer", "hyper_connections", "norms", "gate", "shared_expert")
    routed = whole.get("routed_experts", 0)
    layer_bytes = sum(whole.get(name, 0) for name in per_layer) + routed
    return ShardTotals(
        dense_layer=0,
        moe_layer=layer_bytes // layers,
        routed_per_moe_layer=routed // layers,
        scales_dense_layer=0,
        scales_moe_layer=0,
        embed=whole.get("embedding", 0),
        last_stage_extra=whole.get("lm_head", 0) + whole.get("mtp", 0),
        every_stage_extra=whole.get("rope_caches", 0) + whole.get("buffers", 0),
    )


@dataclass(frozen=True)
class V4StageKv:
    """What one stage's KV blocks cost and how many a request at max_model_len needs (independent of the budget)."""

    shape: V4KvPlan  # planned against an unbounded budget: its groups, bytes per block, blocks per request

    @property
    def bytes_per_block(self) -> int:
        return self.shape.bytes_per_block

    @property
    def blocks_per_request(self) -> int:
        return self.shape.blocks_per_request

    def blocks(self, budget_bytes: int) -> int:
        """vLLM's num_blocks for this budget: budget // bytes per block (get_kv_cache_config_from_groups)."""
        return max(0, budget_bytes) // self.bytes_per_block

    @property
    def required_bytes(self) -> int:
        """The least KV budget vLLM starts with (`_check_enough_kv_cache_memory` as the release calls it)."""
        return self.shape.required_bytes

    def holds_one_request(self, blocks: int) -> bool:
        """`_check_enough_kv_cache_memory` on the memory of `blocks` blocks: one request at max_model_len (from 0.29
        with the null block held back; 0.23–0.28 count layer tuples, see core.v4_kv)."""
        return blocks * self.bytes_per_block >= self.required_bytes


@lru_cache(maxsize=512)
def v4_stage_kv(
    card: ModelCard,
    backend: V4Backend,
    kv_cache_dtype: str,
    max_model_len: int,
    max_num_batched_tokens: int,
    concurrent_batches: int,
    layers: tuple[int, int],
    mtp: bool,
    num_speculative_tokens: int,
    release: Release,
) -> V4StageKv:
    """The V4 KV groups of one stage's worker (core.v4_kv), cached: a plan asks each stage shape once."""
    plan = plan_v4_kv(
        card,
        backend=backend,
        kv_cache_dtype=kv_cache_dtype,
        kv_budget_bytes=MAX_KV_BYTES,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens,
        concurrent_batches=concurrent_batches,
        release=release,
        stage=layers,
        mtp=mtp,
        num_speculative_tokens=max(1, num_speculative_tokens),
    )
    return V4StageKv(plan)


def concurrent_batches(release: Release, pipeline_parallel: int, gpu: GpuSpec | None = None) -> int:
    """`VllmConfig.max_concurrent_batches` on GPUs in `release` (core.v4_kv.V4KvRules.max_concurrent_batches): async
    scheduling is on by default with the multiprocessing executor; V4 runs on Model Runner V2 from 0.28 (PP + 1
    batches; V1 on ROCm in 0.28–0.31), on V1 before (2 at PP 1, PP otherwise). 0.23–0.25 size the window pages
    for one batch whatever this is. An unread release is refused (InputError naming --vllm-version)."""
    rocm = gpu is not None and gpu.vendor == "amd"
    return v4_kv_rules(release).max_concurrent_batches(pipeline_parallel, rocm)


def v4_kv_format(card: ModelCard, gpu: GpuSpec, kv_cache_dtype: str) -> KvFormat:
    """The KvFormat stand-in the rest of the planner reads for V4 (the flag to emit, the roofline's bytes per
    token per layer): one latent row per token per layer as the backend stores it, the indexer's keys, and the
    256-token block of the compressed caches. The KV pool itself is sized by v4_stage_kv."""
    backend = v4_backend(gpu)
    try:
        resolved = resolve_kv_cache_dtype(backend, kv_cache_dtype)
    except InputError as exc:
        raise InputError("--kv-cache-dtype", exc.problem) from None
    v4 = card.v4
    assert v4 is not None
    if resolved == "fp8_ds_mla":
        storage, row = "fp8", FP8_DS_MLA_ROW_BYTES
    elif resolved in ("auto", "bfloat16"):
        storage, row = "bf16", v4.head_dim * 2
    else:
        storage, row = "fp8", v4.head_dim
    indexer = card.index_head_dim + (card.index_head_dim // 128) * 4 if card.index_head_dim else 0
    return KvFormat(storage, kv_cache_dtype, row, indexer, 256, backend.value)
