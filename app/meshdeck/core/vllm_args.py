"""The `vllm serve` flags for a layout, independent of where its ranks run.

Multi-node flags (--nnodes/--node-rank/--master-addr, --data-parallel-address, --headless, …) are
per node and belong to the launcher (meshdeck.launch), which adds them on top of these. Every flag
here exists in vLLM's `vllm/engine/arg_utils.py` (and the V3.2 parser/tokenizer names in its
registries); the launch area keeps a test that checks them against vLLM's source.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

MTP_DEFAULT_SPECULATIVE_TOKENS = 3  # vLLM recipe for DeepSeek-V3.2


class ParallelLayout(Protocol):
    @property
    def tensor_parallel(self) -> int: ...
    @property
    def pipeline_parallel(self) -> int: ...
    @property
    def data_parallel(self) -> int: ...
    @property
    def expert_parallel(self) -> bool: ...


@dataclass(frozen=True)
class ServeSettings:
    """Engine settings that become flags. `kv_cache_dtype` is vLLM's own value (see core.kv_cache.KV_CACHE_DTYPES)."""

    max_model_len: int
    gpu_memory_utilization: float
    kv_cache_dtype: str = "auto"
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    deepseek_v32_frontend: bool = False  # tokenizer, tool-call and reasoning parsers for V3.2
    mtp_speculative_tokens: int = 0  # 0 = no MTP speculative decoding
    mm_encoder_tp_mode: str = "weights"  # vLLM's default; "data" is emitted


def _number(value: float) -> str:
    return f"{value:.4f}".rstrip("0").rstrip(".")


def vllm_serve_args(layout: ParallelLayout, settings: ServeSettings) -> list[str]:
    """argv after `vllm serve <model>` for this layout (flags only; no model, host or port)."""
    args = ["--tensor-parallel-size", str(layout.tensor_parallel)]
    if layout.pipeline_parallel > 1:
        args += ["--pipeline-parallel-size", str(layout.pipeline_parallel)]
    if layout.data_parallel > 1:
        args += ["--data-parallel-size", str(layout.data_parallel)]
    if layout.expert_parallel:
        args.append("--enable-expert-parallel")
    args += ["--max-model-len", str(settings.max_model_len)]
    args += ["--gpu-memory-utilization", _number(settings.gpu_memory_utilization)]
    if settings.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", settings.kv_cache_dtype]
    if settings.max_num_seqs is not None:
        args += ["--max-num-seqs", str(settings.max_num_seqs)]
    if settings.max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(settings.max_num_batched_tokens)]
    if settings.mm_encoder_tp_mode != "weights":
        args += ["--mm-encoder-tp-mode", settings.mm_encoder_tp_mode]
    if settings.deepseek_v32_frontend:
        args += [
            "--tokenizer-mode",
            "deepseek_v32",
            "--tool-call-parser",
            "deepseek_v32",
            "--enable-auto-tool-choice",
            "--reasoning-parser",
            "deepseek_v3",
        ]
    if settings.mtp_speculative_tokens > 0:
        spec = {"method": "mtp", "num_speculative_tokens": settings.mtp_speculative_tokens}
        args += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    return args
