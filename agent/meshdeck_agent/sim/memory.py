"""The startup numbers a simulated vLLM reports: what a real one would measure on these GPUs.

A real vLLM measures them: it loads its shard of the checkpoint ("Model loading took X GiB"), runs one
profile forward pass, and gives the KV cache what is left of total × gpu_memory_utilization
(gpu_worker.determine_available_memory: "Available KV cache memory", "GPU KV cache size: N tokens").
The stand-in has no checkpoint and no GPU, and the launcher sends it only what a real vLLM gets, so it
works the numbers out here from the model's config.json facts, the `vllm serve` flags and the
simulated GPU. This is the stand-in's own coarse model of vLLM (not meshdeck's planner, which the
agent never imports): per-GPU shards of the DeepSeek MLA/MoE weights (FP8 blocks, BF16 embeddings,
router and indexer projections), the MLA latent plus V3.2's indexer key per token per layer in whole
blocks, and a reserve for the profile run (residual stream and the fused-MoE workspace), the sampler
and the CUDA/NCCL buffers, with CUDA graphs captured outside the budget. tests/unit/agent checks it
against vLLM's published startup log for V3.2 on 8×H200, as the planner is. So a simulated run's
planned-vs-measured compares two independent estimates, as a real run compares plan and vLLM, and
the stand-in fails where vLLM would (weights that do not fit, no room for one max-length request).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Protocol, Tuple

MIB = 1 << 20
BF16 = 2
FP32 = 4
FP8_BLOCK_ELEMENTS = 128 * 128  # one fp32 scale per 128×128 block of an FP8 weight
VOCAB_PADDING = 64
FUSED_MOE_CHUNK_TOKENS = 32768
SAMPLER_BYTES_PER_LOGIT = 24  # fp32 logits + sort values + int64 indices + softmax + mask of one row
CUDA_LIBRARIES_BYTES = 768 * MIB
NCCL_INTRA_NODE_BYTES = 160 * MIB  # per communicator; vLLM opens two per process group
NCCL_INTER_NODE_BYTES = 256 * MIB
NCCL_NVLS_BYTES = 288 * MIB  # NVLink SHARP buffers per rank on NVSwitch groups of more than 2
CUSTOM_ALL_REDUCE_BYTES = 32 * MIB
CUDAGRAPH_BYTES_PER_PIECE = 256 * 1024

# config.json facts of the checkpoints the stand-in knows (as in resources/models/*.json; a test keeps
# them equal). DeepSeek V3, V3-0324, V3.1, R1 and R1-0528 share one architecture.
_DEEPSEEK_V3: Dict[str, Any] = {
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "first_k_dense_replace": 3,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "num_attention_heads": 128,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "num_nextn_predict_layers": 1,
}
_DEEPSEEK_V32: Dict[str, Any] = dict(
    _DEEPSEEK_V3, model_type="deepseek_v32", index_head_dim=128, index_n_heads=64, index_topk=2048
)
_V32_NAME = re.compile(r"v3[._-]?2", re.IGNORECASE)
_V3_NAME = re.compile(r"(v3|r1)", re.IGNORECASE)


@dataclass(frozen=True)
class ModelConfig:
    """The config.json fields vLLM's DeepSeek model sizes its weights and KV cache from."""

    model_type: str
    hidden_size: int
    num_hidden_layers: int
    first_k_dense_replace: int
    intermediate_size: int
    moe_intermediate_size: int
    n_routed_experts: int
    n_shared_experts: int
    num_experts_per_tok: int
    num_attention_heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    vocab_size: int
    max_position_embeddings: int
    num_nextn_predict_layers: int
    index_head_dim: int = 0  # V3.2's sparse-attention indexer (0: none)
    index_n_heads: int = 0
    index_topk: int = 0

    @property
    def has_indexer(self) -> bool:
        return self.index_head_dim > 0


KNOWN_CONFIGS: Dict[str, Dict[str, Any]] = {"deepseek_v3": _DEEPSEEK_V3, "deepseek_v32": _DEEPSEEK_V32}


def model_config_for(model: str) -> Optional[ModelConfig]:
    """The config of a DeepSeek V3-family model named by its Hugging Face id or folder, else None."""
    base = posixpath.basename(model.rstrip("/")) or model
    if "deepseek" not in model.lower():
        return None
    if _V32_NAME.search(base):
        return ModelConfig(**_DEEPSEEK_V32)
    if _V3_NAME.search(base):
        return ModelConfig(**_DEEPSEEK_V3)
    return None


@dataclass(frozen=True)
class GpuFacts:
    name: str
    arch: str  # hopper, blackwell, ampere, ada
    visible_bytes: int  # what torch.cuda.mem_get_info reports as total: the base of gpu_memory_utilization
    nvswitch: bool

    @property
    def large_for_vllm_defaults(self) -> bool:
        """vLLM's get_batch_defaults: >= 70 GiB and not an A100 gets the larger scheduler defaults."""
        return self.visible_bytes >= 70 * 1024 * MIB and "a100" not in self.name.lower()


class ServeFlags(Protocol):
    """The `vllm serve` settings memory depends on (engine.VllmServe has them), read only."""

    @property
    def tensor_parallel(self) -> int: ...

    @property
    def pipeline_parallel(self) -> int: ...

    @property
    def data_parallel(self) -> int: ...

    @property
    def expert_parallel(self) -> bool: ...

    @property
    def max_model_len(self) -> Optional[int]: ...

    @property
    def gpu_memory_utilization(self) -> float: ...

    @property
    def kv_cache_dtype(self) -> str: ...

    @property
    def max_num_seqs(self) -> Optional[int]: ...

    @property
    def max_num_batched_tokens(self) -> Optional[int]: ...

    @property
    def speculative_tokens(self) -> int: ...


@dataclass(frozen=True)
class StartupMemory:
    """Per GPU of the pipeline stage whose KV room bounds the engine (every stage gets its block count),
    per engine for tokens."""

    weights_bytes: int  # "Model loading took"
    kv_cache_bytes: int  # "Available KV cache memory" (0 when the weights and reserve leave none)
    kv_tokens: int  # "GPU KV cache size" of one engine (whole blocks, the tightest stage)
    kv_bytes_per_token: int  # per GPU of the tightest stage
    block_size: int
    max_model_len: int
    max_concurrency: float  # "Maximum concurrency for max_model_len tokens per request"
    gpu_memory_bytes: int  # held per GPU once serving: the budget plus the CUDA graphs captured after it


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _fp8(elements: int) -> int:
    """Bytes of an FP8 block-quantized weight: one byte per element plus its fp32 block scales."""
    return elements + _ceil_div(elements, FP8_BLOCK_ELEMENTS) * FP32


def stage_layer_counts(layers: int, pipeline_parallel: int) -> List[int]:
    """vLLM's get_pp_indices: floor(L/PP) layers per stage, the remainder one by one to the stages
    before the last."""
    counts = [layers // pipeline_parallel] * pipeline_parallel
    for index in range(layers % pipeline_parallel):
        counts[-2 - index] += 1
    return counts


def _attention_bytes(c: ModelConfig, tp: int) -> int:
    """MLA (fused q_a/kv_a replicated; q_b, kv_b, o over TP; kv_b's absorbed BF16 copy) and V3.2's indexer."""
    h, heads = c.hidden_size, c.num_attention_heads // tp
    kv_b = heads * (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank
    fp8 = h * (c.q_lora_rank + c.kv_lora_rank + c.qk_rope_head_dim)
    fp8 += heads * (c.qk_nope_head_dim + c.qk_rope_head_dim) * c.q_lora_rank + kv_b + h * heads * c.v_head_dim
    total = _fp8(fp8) + kv_b * BF16 + (c.q_lora_rank + c.kv_lora_rank + 2 * h) * BF16
    if c.has_indexer:
        total += _fp8(c.index_n_heads * c.index_head_dim * c.q_lora_rank)
        total += h * (c.index_head_dim + c.index_n_heads) * BF16
    return total


def _moe_bytes(c: ModelConfig, tp: int, moe_ranks: int, expert_parallel: bool) -> int:
    """Routed experts (whole experts over EP = TP×DP, else their intermediate dim over TP×DP), shared
    experts over TP, and the BF16 router."""
    h, inter = c.hidden_size, c.moe_intermediate_size
    if expert_parallel:
        routed = _ceil_div(c.n_routed_experts, moe_ranks) * _fp8(3 * h * inter)
    else:
        routed = c.n_routed_experts * _fp8(3 * h * (inter // moe_ranks))
    shared = _fp8(3 * h * inter * c.n_shared_experts // tp)
    return routed + shared + c.n_routed_experts * (h * BF16 + FP32)


def stage_weights(c: ModelConfig, s: ServeFlags, stage: int, layers: List[int], tokens: int) -> int:
    """Bytes one GPU of pipeline stage `stage` loads."""
    tp, moe_ranks = s.tensor_parallel, s.tensor_parallel * s.data_parallel
    first_layer = sum(layers[:stage])
    dense = max(0, min(c.first_k_dense_replace, first_layer + layers[stage]) - first_layer)
    moe = layers[stage] - dense
    attention = _attention_bytes(c, tp)
    moe_layer = attention + _moe_bytes(c, tp, moe_ranks, s.expert_parallel)
    total = dense * (attention + _fp8(3 * c.hidden_size * c.intermediate_size // tp)) + moe * moe_layer
    table = _ceil_div(_ceil_div(c.vocab_size, VOCAB_PADDING) * VOCAB_PADDING, tp) * c.hidden_size * BF16
    total += c.max_position_embeddings * c.qk_rope_head_dim * BF16 * (2 if c.has_indexer else 1)  # rope caches
    if c.has_indexer:
        total += tokens * c.index_topk * 4  # the indexer's top-k buffer, allocated with the model
    if stage == 0:
        total += table  # embed_tokens
    if stage == len(layers) - 1:
        total += table  # lm_head
        if s.speculative_tokens:  # the MTP layer, its eh_proj and its own head
            total += c.num_nextn_predict_layers * (moe_layer + 2 * c.hidden_size**2 * BF16 + table)
    return total


def kv_bytes_per_token_per_layer(c: ModelConfig, kv_cache_dtype: str) -> int:
    """MLA's latent (not split by TP) plus V3.2's indexer key: BF16 for auto, fp8_ds_mla on V3.2."""
    if kv_cache_dtype.lower() in ("auto", "bfloat16", "bf16"):
        latent = (c.kv_lora_rank + c.qk_rope_head_dim) * BF16
    elif c.has_indexer:  # fp8_ds_mla: fp8 latent, fp32 scale per 128, BF16 rope part
        latent = c.kv_lora_rank + c.kv_lora_rank // 128 * FP32 + c.qk_rope_head_dim * BF16
    else:
        latent = c.kv_lora_rank + c.qk_rope_head_dim
    indexer = c.index_head_dim + c.index_head_dim // 128 * FP32 if c.has_indexer else 0
    return latent + indexer


def block_size(c: ModelConfig, gpu: GpuFacts) -> int:
    """FlashMLA (and its sparse form) on Hopper, CUTLASS MLA on Blackwell, Triton MLA elsewhere."""
    if gpu.arch == "hopper" or (gpu.arch == "blackwell" and c.has_indexer):
        return 64
    return 128 if gpu.arch == "blackwell" else 16


def scheduler_limits(s: ServeFlags, gpu: GpuFacts, max_model_len: int) -> Tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as `vllm serve` resolves what the flags leave unset."""
    default_tokens, default_seqs = (8192, 1024) if gpu.large_for_vllm_defaults else (2048, 256)
    seqs = s.max_num_seqs or default_seqs
    tokens = s.max_num_batched_tokens or min(seqs * max_model_len, default_tokens)
    if s.max_num_seqs is None:
        seqs = min(seqs, tokens)
    return tokens, seqs


def _activation_peak(c: ModelConfig, s: ServeFlags, tokens: int) -> int:
    """The profile run's torch peak: the residual stream plus the largest per-layer transient (the fused
    MoE workspace over every DP rank's tokens, the dense MLP, or the attention projections)."""
    h, tp = c.hidden_size, s.tensor_parallel
    heads = c.num_attention_heads // tp
    attention = tokens * (c.q_lora_rank + c.kv_lora_rank + c.qk_rope_head_dim) * BF16
    attention += tokens * heads * (c.qk_nope_head_dim + c.qk_rope_head_dim + c.v_head_dim) * BF16
    attention += tokens * c.index_n_heads * c.index_head_dim * BF16
    dense = tokens * 3 * (c.intermediate_size // tp) * BF16
    moe_tokens = tokens * s.data_parallel
    moe_ranks = tp * s.data_parallel
    inter = c.moe_intermediate_size if s.expert_parallel else c.moe_intermediate_size // moe_ranks
    rows = min(moe_tokens, FUSED_MOE_CHUNK_TOKENS) * c.num_experts_per_tok
    moe = rows * (max(2 * inter, h) * BF16 + inter * BF16 + h)
    if s.data_parallel > 1:
        moe += moe_tokens * h * BF16  # the tokens gathered from every DP rank
    return 3 * tokens * h * BF16 + max(attention, dense, moe)


def _non_torch(s: ServeFlags, gpus_per_node: int, gpu: GpuFacts) -> int:
    """CUDA libraries, two NCCL communicators per process group (TP, PP, DP, EP; the world group one),
    and TP's custom all-reduce buffers."""
    tp, pp, dp = s.tensor_parallel, s.pipeline_parallel, s.data_parallel
    world = tp * pp * dp
    nvls_capable = gpu.nvswitch and gpu.arch in ("hopper", "blackwell")
    groups = [(world, world, 1), (tp, tp, 2), (pp, tp * pp, 2), (dp, world, 2)]
    if s.expert_parallel or dp > 1:
        groups.append((tp * dp, world, 2))
    total = CUDA_LIBRARIES_BYTES + (CUSTOM_ALL_REDUCE_BYTES if tp > 1 else 0)
    for size, span, communicators in groups:
        if size <= 1:
            continue
        crosses = span > gpus_per_node
        per = NCCL_INTER_NODE_BYTES if crosses else NCCL_INTRA_NODE_BYTES
        if nvls_capable and not crosses and size > 2:
            per += NCCL_NVLS_BYTES
        total += communicators * per
    return total


def startup_memory(c: ModelConfig, s: ServeFlags, gpu: GpuFacts, gpus_per_node: int) -> StartupMemory:
    """What vLLM would report at startup for this config, these flags, this GPU and GPUs per node."""
    max_model_len = s.max_model_len or c.max_position_embeddings
    tokens, seqs = scheduler_limits(s, gpu, max_model_len)
    layers = stage_layer_counts(c.num_hidden_layers, s.pipeline_parallel)
    budget = int(gpu.visible_bytes * s.gpu_memory_utilization)
    per_layer = kv_bytes_per_token_per_layer(c, s.kv_cache_dtype)
    block = block_size(c, gpu)
    activation, non_torch = _activation_peak(c, s, tokens), _non_torch(s, gpus_per_node, gpu)
    sampler = min(seqs * (1 + s.speculative_tokens), tokens) * c.vocab_size * SAMPLER_BYTES_PER_LOGIT
    drafter = 2 * tokens * c.hidden_size * BF16  # the MTP drafter's dummy run (its input is 2 × hidden)
    captures = 3 + min(512, 2 * seqs) // 8  # vLLM's default capture sizes: 1, 2, 4, then every 8
    blocks: Optional[int] = None
    tightest: Tuple[int, int] = (0, 0)  # (weights, available) of the stage with the fewest blocks
    tightest_per_token = 0
    for stage, count in enumerate(layers):
        last = stage == len(layers) - 1
        kv_layers = count + (c.num_nextn_predict_layers if last and s.speculative_tokens else 0)
        weights = stage_weights(c, s, stage, layers, tokens)
        reserve = activation + non_torch
        if last:
            reserve += sampler + (drafter if s.speculative_tokens else 0)
        available = budget - weights - reserve
        stage_blocks = max(0, available // (block * kv_layers * per_layer))
        if blocks is None or stage_blocks < blocks:
            blocks, tightest_per_token, tightest = stage_blocks, kv_layers * per_layer, (weights, available)
    graphs = captures * (max(layers) + 1) * CUDAGRAPH_BYTES_PER_PIECE + 3 * min(512, 2 * seqs) * c.hidden_size * BF16
    num_blocks = blocks or 0
    per_request = _ceil_div(max_model_len, block)
    return StartupMemory(
        weights_bytes=tightest[0],
        kv_cache_bytes=max(0, tightest[1]),
        kv_tokens=num_blocks * block,
        kv_bytes_per_token=tightest_per_token,
        block_size=block,
        max_model_len=max_model_len,
        max_concurrency=num_blocks / per_request,
        gpu_memory_bytes=max(budget, tightest[0] + max(0, tightest[1])) + graphs,
    )
