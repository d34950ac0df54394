"""The `vllm serve` flags for a layout, independent of where its ranks run.

Multi-node flags (--nnodes/--node-rank/--master-addr, --data-parallel-address, --headless, …) are
per node and belong to the launcher (meshdeck.launch), which adds them on top of these. Every flag
here exists in vLLM's `vllm/engine/arg_utils.py` (and the V3.2 and V4 parser/tokenizer names in its
registries); the launch area keeps a test that checks them against vLLM's source.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

MTP_DEFAULT_SPECULATIVE_TOKENS = 3  # vLLM recipe for DeepSeek-V3.2
# vLLM's DeepSeek-V4-Pro recipe: '{"method":"mtp","num_speculative_tokens":2}', Hopper included since
# vllm-project/recipes PR 435 (May 2026, "enable num_speculative_tokens=2 on Hopper")
MTP_V4_SPECULATIVE_TOKENS = 2


@dataclass(frozen=True)
class DeepseekFrontEnd:
    """The chat front end of a DeepSeek release: `--tokenizer-mode`, `--tool-call-parser` (with
    `--enable-auto-tool-choice`) and `--reasoning-parser`, each a name vLLM registers."""

    tokenizer_mode: str
    tool_call_parser: str
    reasoning_parser: str

    def args(self) -> list[str]:
        return [
            "--tokenizer-mode",
            self.tokenizer_mode,
            "--tool-call-parser",
            self.tool_call_parser,
            "--enable-auto-tool-choice",
            "--reasoning-parser",
            self.reasoning_parser,
        ]


# DeepSeek-V3.2: vLLM 0.32.0 config/model.py 743-744 (tokenizer_mode "deepseek_v32" for DeepseekV32ForCausalLM),
# tool_parsers/__init__.py 37-40 "deepseek_v32", reasoning/__init__.py 27-30 "deepseek_v3".
V32_FRONT_END = DeepseekFrontEnd("deepseek_v32", "deepseek_v32", "deepseek_v3")
# DeepSeek-V4 (Flash, Pro): vLLM 0.32.0 config/model.py 745-749 defaults tokenizer_mode to "deepseek_v4" for
# DeepseekV4ForCausalLM (logged "Defaulting to tokenizer_mode='deepseek_v4'", 755-760; 0.20.0 569-570): meshdeck
# passes it anyway, as for V3.2, so the launch does not depend on the default. tool_parsers/__init__.py 41-44
# "deepseek_v4" (DeepSeekV4EngineToolParser; 0.20.0 37-40 DeepSeekV4ToolParser), reasoning/__init__.py 31-34
# "deepseek_v4" (DeepSeekV4ParserReasoningAdapter; 0.20.0 31-34 DeepSeekV3ReasoningParser). MTP needs nothing of
# its own: config/speculative.py 695-706 turns a deepseek_v4 target into a DeepSeekV4MTPModel draft for method
# "mtp" (0.20.0 301-305), so the V3.2 speculative config serves it.
V4_FRONT_END = DeepseekFrontEnd("deepseek_v4", "deepseek_v4", "deepseek_v4")


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
    deepseek_v4_frontend: bool = False  # tokenizer, tool-call and reasoning parsers for V4 (V4_FRONT_END)

    @property
    def front_end(self) -> DeepseekFrontEnd | None:
        """The DeepSeek chat front end these settings ask for, if any (V3.2 and V4 exclude each other)."""
        if self.deepseek_v32_frontend and self.deepseek_v4_frontend:
            raise ValueError("a model has one front end: deepseek_v32_frontend and deepseek_v4_frontend are both set")
        if self.deepseek_v4_frontend:
            return V4_FRONT_END
        return V32_FRONT_END if self.deepseek_v32_frontend else None


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
    if (front_end := settings.front_end) is not None:
        args += front_end.args()
    if settings.mtp_speculative_tokens > 0:
        spec = {"method": "mtp", "num_speculative_tokens": settings.mtp_speculative_tokens}
        args += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    return args
