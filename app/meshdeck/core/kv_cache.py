"""KV-cache bytes per token and how many tokens a KV budget buys, the way vLLM counts them.

MLA caches one latent (kv_lora_rank + qk_rope_head_dim values) per token per layer and every TP
rank holds the full latent of its layers: TP does not split it, PP does (fewer layers per GPU),
DP multiplies pools. V3.2 adds the indexer's key cache (index_head_dim fp8 + one fp32 scale per
128 values) per token per layer, whatever the KV dtype. vLLM allocates whole blocks; the block
size is fixed by the attention backend (FlashMLA and FlashMLA-sparse: 64).
"""

from __future__ import annotations

from dataclasses import dataclass

from meshdeck.core.errors import InputError
from meshdeck.core.gpu_spec import GpuSpec
from meshdeck.core.model_card import ModelCard

KV_CACHE_DTYPES = ("auto", "bf16", "fp8")
_KV_ALIASES = {"bfloat16": "bf16", "fp8_e4m3": "fp8", "fp8_ds_mla": "fp8", "auto": "auto", "bf16": "bf16", "fp8": "fp8"}


def normalize_kv_cache_dtype(value: str) -> str:
    key = value.strip().lower()
    if key not in _KV_ALIASES:
        raise InputError(
            "--kv-cache-dtype", f"{value!r}; allowed: auto, bf16 (bfloat16), fp8 (fp8_e4m3 / fp8_ds_mla on V3.2)"
        )
    return _KV_ALIASES[key]


@dataclass(frozen=True)
class KvFormat:
    """What one token costs in one layer, and the block vLLM allocates in."""

    kv_cache_dtype: str  # resolved: "bf16" or "fp8"
    vllm_kv_cache_dtype: str  # the value to pass to --kv-cache-dtype
    latent_bytes_per_token_per_layer: int
    indexer_bytes_per_token_per_layer: int
    block_size: int
    attention_backend: str

    @property
    def bytes_per_token_per_layer(self) -> int:
        return self.latent_bytes_per_token_per_layer + self.indexer_bytes_per_token_per_layer


def kv_format(card: ModelCard, gpu: GpuSpec, kv_cache_dtype: str) -> KvFormat:
    """Resolve `auto` and pick the backend's block size for this model on this GPU."""
    dtype = normalize_kv_cache_dtype(kv_cache_dtype)
    resolved = "bf16" if dtype == "auto" else dtype  # auto = model dtype (BF16) on the FlashMLA path
    latent = card.mla_latent_dim
    if resolved == "bf16":
        latent_bytes = latent * 2
        vllm_value = "auto" if dtype == "auto" else "bfloat16"
    elif card.has_sparse_indexer:
        # fp8_ds_mla: kv_lora_rank fp8 values + one fp32 scale per 128 + the rope part in BF16 (656 B for V3.2).
        latent_bytes = card.kv_lora_rank + (card.kv_lora_rank // 128) * 4 + card.qk_rope_head_dim * 2
        vllm_value = "fp8_ds_mla"
    else:
        latent_bytes = latent  # fp8 e4m3: one byte per value (576 B for V3)
        vllm_value = "fp8"
    indexer_bytes = 0
    if card.has_sparse_indexer:
        indexer_bytes = card.index_head_dim + (card.index_head_dim // 128) * 4  # 132 B for V3.2
    if card.has_sparse_indexer and gpu.runs_sparse_mla_kernels:
        backend, block = "FLASHMLA_SPARSE", 64
    elif gpu.arch == "hopper":
        backend, block = "FLASHMLA", 64
    elif gpu.arch == "blackwell":
        backend, block = "CUTLASS_MLA", 128
    else:
        backend, block = "TRITON_MLA", 16
    return KvFormat(resolved, vllm_value, latent_bytes, indexer_bytes, block, backend)


@dataclass(frozen=True)
class KvCapacity:
    """KV tokens one model replica (one DP rank's pipeline) can hold."""

    num_blocks: int
    block_size: int
    tokens: int
    max_concurrency: float  # requests of max_model_len that fit at once


def kv_capacity_from_blocks(num_blocks: int, block_size: int, max_model_len: int) -> KvCapacity:
    blocks_per_request = -(-max_model_len // block_size)
    concurrency = num_blocks / blocks_per_request if blocks_per_request else 0.0
    return KvCapacity(num_blocks, block_size, num_blocks * block_size, concurrency)


def kv_capacity(
    available_bytes_per_stage: tuple[int, ...],
    layers_per_stage: tuple[int, ...],
    fmt: KvFormat,
    max_model_len: int,
) -> KvCapacity:
    """Blocks per stage = floor(available / (block × layers × bytes)); a replica gets the smallest stage's."""
    blocks = None
    for available, layers in zip(available_bytes_per_stage, layers_per_stage, strict=True):
        per_block = fmt.block_size * layers * fmt.bytes_per_token_per_layer
        stage_blocks = max(0, int(available // per_block)) if per_block else 0
        blocks = stage_blocks if blocks is None else min(blocks, stage_blocks)
    return kv_capacity_from_blocks(blocks or 0, fmt.block_size, max_model_len)
