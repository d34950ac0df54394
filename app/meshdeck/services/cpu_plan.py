"""The planner's prediction for vLLM on CPU-only hosts (vLLM's CPU build): what a launch there is checked against.

A CPU host has no GPU memory to profile; vLLM gives each worker the KV budget the profile sets
(`VLLM_CPU_KVCACHE_SPACE` GiB, or `--kv-cache-memory-bytes`). The model's shape comes from its own
`config.json`: the profile's model must be a directory this machine can read (the local agents of
`meshdeck bench vllm --local` and the real-vLLM tests share it); a model id or a path only the servers hold
gets no prediction, and says why.
"""

from __future__ import annotations

import json
from pathlib import Path

from meshdeck.core.cpu_kv import CpuKvPlan, cpu_kv_plan, kv_cache_space_bytes, kv_element_bytes, model_dtype_bytes
from meshdeck.core.errors import InputError
from meshdeck.core.model_card import ModelCard, model_card_from_config
from meshdeck.core.parameters import parameter_counts
from meshdeck.launch.plan import PlannedStartup
from meshdeck.launch.profile import Profile

MAX_CONFIG_BYTES = 1 << 20


def read_model_config(model: str) -> tuple[ModelCard, int]:
    """The card and model dtype bytes of a model directory on this machine (its config.json)."""
    path = Path(model) / "config.json"
    if not path.is_file():
        raise InputError("model", f"{model!r} is not a model directory on this machine (no config.json)")
    with path.open("rb") as handle:
        data = handle.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise InputError(str(path), f"larger than {MAX_CONFIG_BYTES} bytes; not a config.json")
    try:
        config = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(str(path), f"not JSON: {exc}") from None
    card = model_card_from_config(config, str(path))
    return card, model_dtype_bytes(config, str(path))


def cpu_kv_for_profile(profile: Profile) -> CpuKvPlan:
    """The KV pool one engine of `profile` gets on vLLM's CPU build."""
    return _cpu_kv(profile, *read_model_config(profile.model))


def _cpu_kv(profile: Profile, card: ModelCard, dtype_bytes: int) -> CpuKvPlan:
    max_model_len = profile.vllm.max_model_len or card.max_position_embeddings
    budget = kv_cache_space_bytes(profile.env, profile.vllm.extra_args)
    if budget is None:
        raise InputError(
            "env.VLLM_CPU_KVCACHE_SPACE",
            "not set (nor --kv-cache-memory-bytes): vLLM's CPU build then sizes the KV cache from the memory "
            "left over, which is known only once it runs",
        )
    return cpu_kv_plan(
        card,
        kv_cache_bytes=budget,
        pipeline_parallel=profile.layout.pipeline_parallel,
        element_bytes=kv_element_bytes(profile.vllm.kv_cache_dtype, dtype_bytes),
        max_model_len=max_model_len,
    )


def cpu_planned_startup(profile: Profile) -> tuple[PlannedStartup | None, str]:
    """The prediction a CPU launch of `profile` is compared against, or (None, why there is none)."""
    try:
        card, dtype_bytes = read_model_config(profile.model)
        kv = _cpu_kv(profile, card, dtype_bytes)
    except InputError as exc:
        return None, f"no prediction on CPU hosts: {exc}"
    layout = profile.layout
    shards = layout.tensor_parallel * layout.pipeline_parallel
    weights = parameter_counts(card).main_model * dtype_bytes // shards  # bf16 weights, split evenly
    return (
        PlannedStartup(
            gpu_memory_bytes=weights + kv.kv_cache_bytes,
            weights_bytes=weights,
            kv_cache_bytes=kv.kv_cache_bytes,
            kv_tokens=kv.tokens,
            max_concurrency=kv.max_concurrency,
            max_model_len=profile.vllm.max_model_len or card.max_position_embeddings,
        ),
        "",
    )
