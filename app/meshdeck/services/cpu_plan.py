"""The planner's prediction for vLLM on CPU-only hosts (vLLM's CPU build): what a launch there is checked against.

A CPU host has no GPU memory to profile; vLLM gives each worker the KV budget the profile sets
(`VLLM_CPU_KVCACHE_SPACE` GiB, or `--kv-cache-memory-bytes`). The model's shape comes from its own
`config.json`: the profile's model must be a directory this machine can read (the local agents of
`meshdeck bench vllm --local` and the real-vLLM tests share it); a model id or a path only the servers hold
gets no prediction, and says why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from meshdeck.core.cpu_kv import CpuKvPlan, cpu_kv_plan, kv_cache_space_bytes, kv_element_bytes, model_dtype_bytes
from meshdeck.core.errors import InputError
from meshdeck.core.model_card import ModelCard, model_card_from_config
from meshdeck.core.parameters import parameter_counts
from meshdeck.launch.plan import PlannedStartup
from meshdeck.launch.profile import Profile
from meshdeck.services.catalog import load_model_config

MAX_CONFIG_BYTES = 1 << 20
CPU_VLLM_RELEASE = "0.32"  # the CPU build whose KV accounting cpu_kv (and v4_kv) reproduce


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
        element_bytes=dtype_bytes if card.is_v4 else kv_element_bytes(profile.vllm.kv_cache_dtype, dtype_bytes),
        max_model_len=max_model_len,
        kv_cache_dtype=profile.vllm.kv_cache_dtype,
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


@dataclass(frozen=True)
class CpuPlanRequest:
    """`meshdeck plan --cpu`: one engine of `model` on vLLM's CPU build with an explicit KV budget per worker."""

    model: str  # bundled name, config.json or checkpoint directory
    kv_cache_space_gib: int  # what VLLM_CPU_KVCACHE_SPACE=G gives each worker
    max_model_len: int | None
    tensor_parallel: int
    pipeline_parallel: int
    kv_cache_dtype: str


def plan_on_cpu(request: CpuPlanRequest) -> dict[str, Any]:
    """The KV cache one engine gets on vLLM 0.32's CPU build, as `meshdeck plan --cpu --json` prints it.

    `kv_tokens_per_replica` is the count vLLM logs (`CPU KV cache size: N tokens`: int(concurrency ×
    max_model_len)); `kv_bytes_per_token_per_gpu` the KV bytes one worker holds per token of a request."""
    config, source, name = load_model_config(request.model)
    card = model_card_from_config(config, source, name)
    dtype_bytes = model_dtype_bytes(config, source)
    env = {"VLLM_CPU_KVCACHE_SPACE": str(request.kv_cache_space_gib)}
    budget = kv_cache_space_bytes(env)
    assert budget is not None  # set above
    tp, pp = request.tensor_parallel, request.pipeline_parallel
    if card.num_attention_heads % tp:
        raise InputError("--tensor-parallel", f"{tp} does not divide the {card.num_attention_heads} attention heads")
    max_model_len = request.max_model_len or card.max_position_embeddings
    if max_model_len > card.max_position_embeddings:
        raise InputError(
            "--max-model-len", f"{max_model_len:,} exceeds the model's {card.max_position_embeddings:,} positions"
        )
    try:
        element_bytes = dtype_bytes if card.is_v4 else kv_element_bytes(request.kv_cache_dtype, dtype_bytes)
        kv = cpu_kv_plan(
            card,
            kv_cache_bytes=budget,
            pipeline_parallel=pp,
            element_bytes=element_bytes,
            max_model_len=max_model_len,
            kv_cache_dtype=request.kv_cache_dtype,
        )
    except InputError as exc:
        if exc.field != "vllm.kv_cache_dtype":
            raise
        raise InputError("--kv-cache-dtype", exc.problem) from None
    layout: dict[str, Any] = {
        "tensor_parallel": tp,
        "pipeline_parallel": pp,
        "data_parallel": 1,
        "kv_cache_bytes_per_gpu": kv.kv_cache_bytes,
        "kv_bytes_per_token_per_gpu": kv.bytes_per_token,
        "kv_block_size": kv.block_size,
        "kv_num_blocks": kv.num_blocks,
        "kv_tokens_per_replica": kv.logged_tokens,
        "kv_tokens_allocated_per_replica": kv.tokens,
        "max_concurrency": kv.max_concurrency,
    }
    if kv.v4 is not None:
        layout["kv_cache_dtype"] = kv.v4.kv_cache_dtype
        layout["kv_bytes_per_token_by_part"] = kv.v4.breakdown()
        layout["kv_groups"] = kv.v4.as_dict()["groups"]
    return {
        "model": {"name": card.name, "architecture": card.architecture, "source": source},
        "engine": "vllm-cpu",
        "vllm_version": CPU_VLLM_RELEASE,
        "settings": {
            "kv_cache_space_gib": request.kv_cache_space_gib,
            "max_model_len": max_model_len,
            "kv_cache_dtype": request.kv_cache_dtype,
        },
        "notes": [
            f"vLLM {CPU_VLLM_RELEASE}'s CPU build: each worker gets VLLM_CPU_KVCACHE_SPACE="
            f"{request.kv_cache_space_gib} GiB for its KV cache; GPUs are not planned with --cpu"
        ],
        "layouts": [layout],
    }


def render_cpu_plan(payload: dict[str, Any]) -> str:
    """`plan --cpu` as text: the engine's KV cache in the words vLLM's log uses."""
    settings = payload["settings"]
    lines = [
        f"{payload['model']['name']} on vLLM {payload['vllm_version']}'s CPU build — "
        f"VLLM_CPU_KVCACHE_SPACE={settings['kv_cache_space_gib']} GiB per worker, "
        f"max-model-len {settings['max_model_len']:,}, kv-cache-dtype {settings['kv_cache_dtype']}",
    ]
    for layout in payload["layouts"]:
        lines.append(
            f"TP={layout['tensor_parallel']} PP={layout['pipeline_parallel']}: CPU KV cache size: "
            f"{layout['kv_tokens_per_replica']:,} tokens, maximum concurrency for {settings['max_model_len']:,} "
            f"tokens per request: {layout['max_concurrency']:.2f}x "
            f"({layout['kv_bytes_per_token_per_gpu']:,} B per token per worker, "
            f"{layout['kv_num_blocks']:,} blocks of {layout['kv_block_size']})"
        )
    lines.extend(payload["notes"])
    return "\n".join(lines) + "\n"
