"""vLLM's own KV cache answer for a DeepSeek-V4 model directory, as JSON on stdout.

Run with vLLM's python (the `.venv-vllm` one), never meshdeck's: it imports vLLM and builds vLLM's real objects.

`model` mode builds the V4 model the way vLLM's CPU worker does (EngineArgs → VllmConfig, which runs the CPU
platform's check_and_update_config; one-rank gloo process groups; `initialize_model` under
`set_current_vllm_config`) but stops before weight loading, which on a CPU without AVX-512 dies in
`torch.ops._C.convert_weight_packed` before vLLM ever sizes the KV cache. It then collects every layer's
`get_kv_cache_spec` as `GPUModelRunner.get_kv_cache_spec` does and hands them, with each budget, to
`vllm.v1.core.kv_cache_utils.get_kv_cache_configs` and `get_kv_cache_capacity` — the two calls whose result vLLM
logs as "CPU KV cache size: N tokens, Maximum concurrency for L tokens per request: X".

`specs` mode skips the model: it builds the MLAAttentionSpec / SlidingWindowMLASpec objects the CUDA backends'
layers would return (per a JSON layer list given on stdin, written by meshdeck's test from its own reading of
the 0.32 sources) and runs the same grouping/sizing code on them. That checks meshdeck's reimplementation of
the grouping and page arithmetic for full-size models that cannot be built on this machine.

Usage:
  python v4_kv_probe.py model DIR --max-model-len L --budget BYTES [--budget BYTES ...]
  python v4_kv_probe.py specs --max-model-len L --budget BYTES ... < layers.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

MARKER = "V4KV_PROBE "


def _spec_json(spec: Any) -> dict[str, Any]:
    from vllm.v1.kv_cache_interface import UniformTypeKVCacheSpecs

    out: dict[str, Any] = {
        "type": type(spec).__name__,
        "block_size": spec.block_size,
        "page_size_bytes": spec.page_size_bytes,
    }
    if isinstance(spec, UniformTypeKVCacheSpecs):
        out["layers"] = {name: _spec_json(s) for name, s in spec.kv_cache_specs.items()}
        return out
    for field in (
        "head_size",
        "tokens_per_state",
        "sliding_window",
        "alignment",
        "cache_dtype_str",
        "state_content_bytes",
        "page_size_padded",
        "block_stride_alignment",
    ):
        if hasattr(spec, field):
            value = getattr(spec, field)
            out[field] = value if value is None or isinstance(value, (int, str)) else str(value)
    out["dtype"] = str(spec.dtype).removeprefix("torch.")
    out["real_page_size_bytes"] = spec.real_page_size_bytes
    return out


def _answer(vllm_config: Any, specs: dict[str, Any], budgets: list[int]) -> dict[str, Any]:
    from vllm.v1.core.kv_cache_utils import (
        get_kv_cache_capacity,
        get_kv_cache_configs,
        get_max_concurrency_for_kv_cache_config,
    )

    runs = []
    for budget in budgets:
        try:
            (config,) = get_kv_cache_configs(vllm_config, [dict(specs)], [budget])
        except ValueError as exc:
            runs.append({"budget": budget, "error": str(exc).splitlines()[0]})
            continue
        tokens, concurrency = get_kv_cache_capacity(vllm_config, config)
        assert concurrency == get_max_concurrency_for_kv_cache_config(vllm_config, config)
        runs.append(
            {
                "budget": budget,
                "num_blocks": config.num_blocks,
                "tokens": tokens,
                "max_concurrency": concurrency,
                "groups": [
                    {
                        "layers": list(group.layer_names),
                        "spec": _spec_json(group.kv_cache_spec),
                        "max_memory_usage_bytes": group.kv_cache_spec.max_memory_usage_bytes(vllm_config),
                    }
                    for group in config.kv_cache_groups
                ],
            }
        )
    return {
        "max_model_len": vllm_config.model_config.max_model_len,
        "max_num_batched_tokens": vllm_config.scheduler_config.max_num_batched_tokens,
        "max_num_seqs": vllm_config.scheduler_config.max_num_seqs,
        "max_in_flight_tokens": vllm_config.max_in_flight_tokens,
        "block_size": vllm_config.cache_config.block_size,
        "cache_dtype": vllm_config.cache_config.cache_dtype,
        "kv_cache_layout": str(vllm_config.cache_config.get_resolved_kv_cache_layout()),
        "layer_specs": {name: _spec_json(spec) for name, spec in specs.items()},
        "runs": runs,
    }


def _engine_config(model_dir: str, max_model_len: int, extra: dict[str, Any]) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(
        model=model_dir,
        load_format="dummy",
        enforce_eager=True,
        max_model_len=max_model_len,
        **extra,
    )
    return args.create_engine_config()


def _model_specs(vllm_config: Any) -> dict[str, Any]:
    # As vLLM's CPU worker: cpu_worker.py imports vllm.v1.worker.cpu.shm first (it swaps torch.cuda.Event for a
    # placeholder), and CPUModelRunner builds under _torch_cuda_wrapper (torch.Event, torch.cuda.Stream).
    import vllm.v1.worker.cpu.shm  # noqa: F401
    from vllm.config import set_current_vllm_config
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.v1.kv_cache_interface import AttentionSpec
    from vllm.v1.worker.cpu_model_runner import _torch_cuda_wrapper
    from vllm.v1.worker.utils import customize_attention_spec

    init_file = os.path.join(tempfile.mkdtemp(prefix="v4kvprobe"), "dist")
    with set_current_vllm_config(vllm_config), _torch_cuda_wrapper():
        init_distributed_environment(
            world_size=1, rank=0, local_rank=0, distributed_init_method=f"file://{init_file}", backend="gloo"
        )
        ensure_model_parallel_initialized(1, 1)
        initialize_model(vllm_config=vllm_config)
        # GPUModelRunner.get_kv_cache_spec: every AttentionLayerBase in the static forward context, layers whose
        # get_kv_cache_spec is None (V4's attention layers: the SWA part is its own DeepseekV4SWACache) skipped.
        context = vllm_config.compilation_config.static_forward_context
        specs = {}
        for name, layer in context.items():
            if isinstance(layer, AttentionLayerBase) and (spec := layer.get_kv_cache_spec(vllm_config)):
                if isinstance(spec, AttentionSpec):
                    spec = customize_attention_spec(layer.get_attn_backend(), spec)
                specs[name] = spec
        # EngineCore._initialize_kv_caches: resolve_kv_cache_layout from the layouts every backend supports
        # (WorkerBase.get_supported_kv_cache_layouts), before any KV sizing.
        from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends
        from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout

        supported = [layout.name for layout in get_supported_kv_cache_layouts(get_current_attn_backends(vllm_config))]
        layout = resolve_kv_cache_layout(vllm_config, [supported], list(specs.values()))
        vllm_config.cache_config.kv_cache_layout = layout.name
    return specs


def _specs_from_json(rows: list[dict[str, Any]]) -> dict[str, Any]:
    import torch
    from vllm.v1.attention.backend import MultipleOf
    from vllm.v1.kv_cache_interface import MLAAttentionSpec, SlidingWindowMLASpec, get_kv_quant_mode

    specs: dict[str, Any] = {}
    for row in rows:
        kind = row.pop("class")
        name = row.pop("name")
        row["dtype"] = getattr(torch, row["dtype"])
        if "kv_quant_mode" in row:
            row["kv_quant_mode"] = get_kv_quant_mode(row["kv_quant_mode"])
        if "block_stride_alignment_multiple_of" in row:
            # customize_attention_spec (vllm/v1/worker/utils.py): a backend with fixed kernel block sizes only
            row["block_stride_alignment"] = MultipleOf(row.pop("block_stride_alignment_multiple_of"))
        cls = {"MLAAttentionSpec": MLAAttentionSpec, "SlidingWindowMLASpec": SlidingWindowMLASpec}[kind]
        specs[name] = cls(**row)
    return specs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("model", "specs"))
    parser.add_argument("model_dir", nargs="?")
    parser.add_argument("--max-model-len", type=int, required=True)
    parser.add_argument("--budget", type=int, action="append", required=True)
    parser.add_argument("--max-num-batched-tokens", type=int)
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--kv-cache-dtype")
    args = parser.parse_args()
    extra: dict[str, Any] = {}
    if args.max_num_batched_tokens is not None and args.mode == "model":
        extra["max_num_batched_tokens"] = args.max_num_batched_tokens
    if args.max_num_seqs is not None:
        extra["max_num_seqs"] = args.max_num_seqs
    if args.kv_cache_dtype is not None:
        extra["kv_cache_dtype"] = args.kv_cache_dtype
    if args.mode == "model":
        if not args.model_dir:
            parser.error("model mode needs DIR")
        vllm_config = _engine_config(args.model_dir, args.max_model_len, extra)
        specs = _model_specs(vllm_config)
    else:
        # Any V4 model dir gives a VllmConfig; the grouping code reads only max_model_len, the scheduler's
        # max_num_batched_tokens (through max_in_flight_tokens) and the layout, which are set here as the CUDA
        # engine core resolves them (V4's indexer backend supports only block-outermost layouts: BLHNC first).
        request = json.load(sys.stdin)
        vllm_config = _engine_config(request["model_dir"], min(args.max_model_len, 4096), extra)
        vllm_config.model_config.max_model_len = args.max_model_len
        if args.max_num_batched_tokens is not None:
            vllm_config.scheduler_config.max_num_batched_tokens = args.max_num_batched_tokens
        vllm_config.cache_config.kv_cache_layout = "BLHNC"
        specs = _specs_from_json(request["layers"])
    # vLLM logs to stdout too: the answer is the one line that starts with the marker.
    print(MARKER + json.dumps(_answer(vllm_config, specs, args.budget)))


if __name__ == "__main__":
    main()
