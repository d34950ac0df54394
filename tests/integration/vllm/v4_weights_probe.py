"""Build vLLM's own DeepSeek-V4 model for a model directory and print every parameter and buffer it holds, as JSON.

Run with the vLLM venv's python (not meshdeck's): `.venv-vllm/bin/python v4_weights_probe.py MODEL_DIR`. It does what
vLLM's CPU model runner does up to the weights (v1/worker/cpu_model_runner.py load_model -> model_loader get_model ->
base_loader.create_model -> initialize_model under set_current_vllm_config, with the CPU worker's torch.cuda stand-ins
from vllm/v1/worker/cpu/shm.py), at TP=1 with `load_format="dummy"`,
and stops before any weight is loaded or repacked, so what it prints is what the model's __init__ allocated.

A second mode, `--quantized-linear OUT IN` / `--mxfp4-experts E H I`, calls the DeepSeek-V4 quantization method's
create_weights on a bare module (the FP8 block-scaled linear, the MXFP4 experts) and prints the tensors it registers:
vLLM's CPU build cannot build the FP8 model itself ("Failed to find a kernel that can implement the ScaledMM linear
layer"), but create_weights allocates without choosing a kernel.

Output: {"tensors": [{"name", "shape", "dtype", "bytes", "numel", "kind"}], "total_bytes", "total_numel"}.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from typing import Any


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rows(module: Any) -> list[dict[str, Any]]:
    rows = []
    for kind, items in (("parameter", module.named_parameters()), ("buffer", module.named_buffers())):
        for name, tensor in items:
            rows.append(
                {
                    "name": name,
                    "kind": kind,
                    "shape": list(tensor.shape),
                    "dtype": str(tensor.dtype).removeprefix("torch."),
                    "numel": int(tensor.numel()),
                    "bytes": int(tensor.numel() * tensor.element_size()),
                }
            )
    return rows


def _report(rows: list[dict[str, Any]]) -> None:
    json.dump(
        {
            "tensors": rows,
            "total_bytes": sum(r["bytes"] for r in rows),
            "total_numel": sum(r["numel"] for r in rows),
        },
        sys.stdout,
    )
    sys.stdout.write("\n")


def _vllm_config(model_dir: str, quantization: str | None = None) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(
        model=model_dir,
        load_format="dummy",
        enforce_eager=True,
        dtype="bfloat16",  # the checkpoint's torch_dtype; vLLM's CPU platform would otherwise pick float32 on AVX2
        max_model_len=1024,
        max_num_batched_tokens=1024,
        skip_tokenizer_init=True,
        quantization=quantization,
    )
    return args.create_engine_config()


def _init_distributed() -> None:
    # The CPU worker process imports this first: it stands torch.cuda.Event / Stream in for the CPU (v1/worker/cpu/shm.py)
    import vllm.v1.worker.cpu_worker  # noqa: F401
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment

    init_distributed_environment(
        world_size=1,
        rank=0,
        local_rank=0,
        distributed_init_method=f"tcp://127.0.0.1:{_free_port()}",
        backend="gloo",
    )
    ensure_model_parallel_initialized(1, 1)


def probe_model(model_dir: str) -> None:
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    vllm_config = _vllm_config(model_dir)
    with set_current_vllm_config(vllm_config):
        _init_distributed()
        # base_loader.BaseModelLoader.load_model: the model dtype as default, the target device, then create_model
        with set_default_torch_dtype(vllm_config.model_config.dtype), torch.device("cpu"):
            model = initialize_model(vllm_config=vllm_config)
    _report(_rows(model))


def probe_quantized(linear: tuple[int, int] | None, experts: tuple[int, int, int] | None, model_dir: str) -> None:
    """The DeepSeek-V4 FP8 config's create_weights on bare modules (see the module docstring)."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.utils.torch_utils import set_default_torch_dtype

    vllm_config = _vllm_config(model_dir)
    quant_config = vllm_config.quant_config
    if quant_config is None:
        raise SystemExit(f"{model_dir}/config.json has no quantization_config")
    rows: list[dict[str, Any]] = []
    with set_current_vllm_config(vllm_config), set_default_torch_dtype(vllm_config.model_config.dtype):
        _init_distributed()
        if linear is not None:
            from vllm.model_executor.layers.quantization.fp8 import Fp8LinearMethod

            out_features, in_features = linear
            module = torch.nn.Module()
            try:
                Fp8LinearMethod(quant_config).create_weights(
                    module, in_features, [out_features], in_features, out_features, torch.bfloat16
                )
            except ValueError as exc:
                # fp8.py create_weights registers weight and weight_scale_inv, then picks a kernel; the CPU build
                # has none without AMX. The tensors are allocated by then: keep them, refuse any other error.
                if "Failed to find a kernel" not in str(exc) or not hasattr(module, "weight_scale_inv"):
                    raise
            sys.stderr.write(f"quant_config: {type(quant_config).__name__}\n")
            rows += [{**r, "name": f"linear.{r['name']}"} for r in _rows(module)]
        if experts is not None:
            from types import SimpleNamespace

            from vllm.model_executor.layers.quantization.mxfp4 import Mxfp4MoEMethod

            num_experts, hidden, inter = experts
            method = Mxfp4MoEMethod.__new__(Mxfp4MoEMethod)  # skip the backend oracle: create_weights needs moe only
            method.moe = SimpleNamespace(w13_num_shards=2, has_bias=False)
            module = torch.nn.Module()
            method.create_weights(module, num_experts, hidden, inter, torch.bfloat16, weight_loader=lambda *a: None)
            rows += [{**r, "name": f"experts.{r['name']}"} for r in _rows(module)]
    _report(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("--quantized-linear", nargs=2, type=int, metavar=("OUT", "IN"))
    parser.add_argument("--mxfp4-experts", nargs=3, type=int, metavar=("E", "H", "I"))
    args = parser.parse_args()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    if args.quantized_linear or args.mxfp4_experts:
        linear = tuple(args.quantized_linear) if args.quantized_linear else None
        experts = tuple(args.mxfp4_experts) if args.mxfp4_experts else None
        probe_quantized(linear, experts, args.model_dir)  # type: ignore[arg-type]
    else:
        probe_model(args.model_dir)


if __name__ == "__main__":
    main()
