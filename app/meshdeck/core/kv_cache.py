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
from meshdeck.core.rocm import NEWEST_READ, kv_dtype_problem, sparse_block_size
from meshdeck.core.vllm_releases import TOKENS_FROM_BLOCKS, TOKENS_FROM_CONCURRENCY, TokensLogged

# What `vllm serve --kv-cache-dtype` accepts for DeepSeek V3 / V3.2 on NVIDIA GPUs (vLLM 0.33.0): the CacheDType
# values (vllm/config/cache.py) that some CUDA MLA backend lists in supported_kv_cache_dtypes. float16 is refused
# for a BF16 model (vllm/config/vllm.py _reject_mismatched_float_kv_cache); fp8_e5m2, fp8_inc and the 4-bit
# per-head formats are listed by no MLA backend, so vLLM finds no attention backend for them.
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_ds_mla", "nvfp4_ds_mla")
_SPARSE_ONLY = ("fp8_ds_mla", "nvfp4_ds_mla")  # packed rows only the sparse (V3.2) backends read
FP8_DS_MLA_BYTES = 656  # 512 fp8 NoPE + 4 fp32 scales + 64 bf16 RoPE (mla_attention.py state_content_bytes)
NVFP4_DS_MLA_BYTES = 352  # 256 packed e2m1 NoPE + 64 fp8 RoPE + 32 fp8 scales (SM100 only)


def normalize_kv_cache_dtype(value: str) -> str:
    """The value as vLLM spells it, or an error naming the flag and every accepted value."""
    key = value.strip().lower()
    if key not in KV_CACHE_DTYPES:
        raise InputError(
            "--kv-cache-dtype",
            f"{value!r}; vLLM serves DeepSeek V3 / V3.2 with: {', '.join(KV_CACHE_DTYPES)} "
            "(fp8_ds_mla: V3.2 only; nvfp4_ds_mla: V3.2 on Blackwell only)",
        )
    return key


@dataclass(frozen=True)
class KvFormat:
    """What one token costs in one layer, and the block vLLM allocates in."""

    kv_cache_dtype: str  # resolved storage: "bf16", "fp8" or "nvfp4"
    vllm_kv_cache_dtype: str  # the value to pass to --kv-cache-dtype
    latent_bytes_per_token_per_layer: int
    indexer_bytes_per_token_per_layer: int
    block_size: int
    attention_backend: str

    @property
    def bytes_per_token_per_layer(self) -> int:
        return self.latent_bytes_per_token_per_layer + self.indexer_bytes_per_token_per_layer


def _sparse_latent(card: ModelCard, gpu: GpuSpec, dtype: str) -> tuple[str, str, int, str]:
    """(storage, vLLM value, latent bytes, backend) of V3.2's sparse MLA, as vLLM's CUDA backend order picks it.

    SM90: FLASHMLA_SPARSE takes auto/bfloat16/fp8/fp8_ds_mla and stores every quantized dtype as fp8_ds_mla;
    fp8_e4m3 is not in its list, so FLASHINFER_MLA_SPARSE_SM90 (plain fp8 latent) serves it. SM100: a quantized
    cache prefers FLASHINFER_MLA_SPARSE (plain fp8; refuses fp8_ds_mla), fp8_ds_mla and nvfp4_ds_mla go to
    FLASHMLA_SPARSE. GPUs without sparse kernels cannot serve V3.2 (a rule says so); they get the SM90 answer.
    """
    if dtype in ("auto", "bfloat16"):
        return "bf16", dtype, card.mla_latent_dim * 2, "FLASHMLA_SPARSE"
    if dtype == "nvfp4_ds_mla":
        if gpu.arch != "blackwell":
            raise InputError("--kv-cache-dtype", f"nvfp4_ds_mla needs a Blackwell (SM100) GPU, not {gpu.name}")
        return "nvfp4", dtype, NVFP4_DS_MLA_BYTES, "FLASHMLA_SPARSE"
    if gpu.arch == "blackwell" and dtype != "fp8_ds_mla":
        return "fp8", dtype, card.mla_latent_dim, "FLASHINFER_MLA_SPARSE"
    if gpu.arch != "blackwell" and dtype == "fp8_e4m3":
        return "fp8", dtype, card.mla_latent_dim, "FLASHINFER_MLA_SPARSE_SM90"
    # fp8_ds_mla: kv_lora_rank fp8 values + one fp32 scale per 128 + the rope part in BF16 (656 B for V3.2).
    packed = card.kv_lora_rank + (card.kv_lora_rank // 128) * 4 + card.qk_rope_head_dim * 2
    return "fp8", "fp8_ds_mla", packed, "FLASHMLA_SPARSE"


FLASH_ATTN_MLA_FROM = (0, 12)  # 0.12.0 platforms/cuda.py _get_backend_priorities 61-66: FLASH_ATTN_MLA first on SM90
FLASHINFER_MLA_FROM = (0, 15)  # 0.15.0 platforms/cuda.py 52-53: FLASHINFER_MLA ahead of CUTLASS_MLA on SM100


def _dense_backend(gpu: GpuSpec, dtype: str, vllm_version: tuple[int, int]) -> tuple[str, int]:
    """The dense MLA backend vLLM's CUDA priority list gives this GPU, and the block size it forces.

    0.11.0 (cuda.py 140-175) forces FlashMLA (64-token blocks) on Hopper and CUTLASS_MLA (128) on Blackwell.
    From 0.12 Hopper tries FLASH_ATTN_MLA first, which takes only a BF16 cache (flashattn_mla.py
    supported_kv_cache_dtypes) in blocks of a multiple of 16 — an fp8 cache falls through to FlashMLA; from 0.15
    Blackwell tries FLASHINFER_MLA first, whose smallest block is 32 (the B200 logs: "Setting kv cache block size
    to 32 for FLASHINFER_MLA backend")."""
    if gpu.arch == "hopper":
        if vllm_version >= FLASH_ATTN_MLA_FROM and dtype in ("auto", "bfloat16"):
            return "FLASH_ATTN_MLA", 16
        return "FLASHMLA", 64
    if gpu.arch == "blackwell":
        return ("FLASHINFER_MLA", 32) if vllm_version >= FLASHINFER_MLA_FROM else ("CUTLASS_MLA", 128)
    return "TRITON_MLA", 16


def _rocm_kv_format(card: ModelCard, dtype: str, vllm_version: tuple[int, int]) -> KvFormat:
    """vLLM on AMD Instinct (core.rocm): TRITON_MLA (V3) or ROCM_AITER_MLA_SPARSE (V3.2), a plain latent of
    kv_lora_rank + rope values in BF16 or fp8 (e4m3fnuz on gfx942), the indexer's 132 B, blocks of 16 (V3.2
    before core.rocm.SPARSE_BLOCK_16_FROM: 1)."""
    problem = kv_dtype_problem(card, dtype, vllm_version)
    if problem:
        raise InputError("--kv-cache-dtype", problem)
    storage = "bf16" if dtype in ("auto", "bfloat16") else "fp8"
    latent_bytes = card.mla_latent_dim * (2 if storage == "bf16" else 1)
    if not card.has_sparse_indexer:
        return KvFormat(storage, dtype, latent_bytes, 0, 16, "TRITON_MLA")
    indexer_bytes = card.index_head_dim + (card.index_head_dim // 128) * 4
    block = sparse_block_size(vllm_version)
    return KvFormat(storage, dtype, latent_bytes, indexer_bytes, block, "ROCM_AITER_MLA_SPARSE")


def kv_format(
    card: ModelCard, gpu: GpuSpec, kv_cache_dtype: str, vllm_version: tuple[int, int] | None = None
) -> KvFormat:
    """Resolve `auto` (the model's BF16) and pick the backend vLLM picks, its bytes and block size, for this model
    on this GPU. Every layer's latent is kv_lora_rank + qk_rope_head_dim values; V3.2 adds the indexer's key cache
    (index_head_dim fp8 + one fp32 scale per 128: 132 B) whatever the KV dtype. `vllm_version` picks
    the dense backend and its block size on NVIDIA (_dense_backend) and, on AMD GPUs, which backend, block size
    and KV dtypes a ROCm release has (None: the newest read)."""
    dtype = normalize_kv_cache_dtype(kv_cache_dtype)
    if gpu.vendor == "amd":
        return _rocm_kv_format(card, dtype, vllm_version or NEWEST_READ)
    if not card.has_sparse_indexer:
        if dtype in _SPARSE_ONLY:
            raise InputError(
                "--kv-cache-dtype",
                f"{dtype} is V3.2's sparse-MLA cache format; {card.name} takes auto, bfloat16, fp8 or fp8_e4m3",
            )
        backend, block = _dense_backend(gpu, dtype, vllm_version or NEWEST_READ)
        storage = "bf16" if dtype in ("auto", "bfloat16") else "fp8"
        latent_bytes = card.mla_latent_dim * (2 if storage == "bf16" else 1)
        return KvFormat(storage, dtype, latent_bytes, 0, block, backend)
    storage, vllm_value, latent_bytes, backend = _sparse_latent(card, gpu, dtype)
    indexer_bytes = card.index_head_dim + (card.index_head_dim // 128) * 4
    if not gpu.runs_sparse_mla_kernels:
        backend, block = _dense_backend(gpu, dtype, vllm_version or NEWEST_READ)
    else:
        block = 64  # the indexer's backend takes only 64-token blocks on CUDA
    return KvFormat(storage, vllm_value, latent_bytes, indexer_bytes, block, backend)


@dataclass(frozen=True)
class KvCapacity:
    """KV tokens one model replica (one DP rank's pipeline) can hold."""

    num_blocks: int
    block_size: int
    tokens: int
    max_concurrency: float  # requests of max_model_len that fit at once
    logged_tokens: int  # the "GPU KV cache size" vLLM logs for them (vllm_releases.VllmAccounting.tokens_logged)


def kv_capacity_from_blocks(
    num_blocks: int, block_size: int, max_model_len: int, tokens_logged: TokensLogged = TOKENS_FROM_BLOCKS
) -> KvCapacity:
    """The capacity of `num_blocks` blocks, and what vLLM logs as "GPU KV cache size" for them: blocks ×
    block size up to 0.20, concurrency × max_model_len from 0.21 (fewer when max_model_len is not a whole
    number of blocks: see core/vllm_releases.py)."""
    blocks_per_request = -(-max_model_len // block_size)
    concurrency = num_blocks / blocks_per_request if blocks_per_request else 0.0
    tokens = num_blocks * block_size
    logged = int(concurrency * max_model_len) if tokens_logged == TOKENS_FROM_CONCURRENCY else tokens
    return KvCapacity(num_blocks, block_size, tokens, concurrency, logged)


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
