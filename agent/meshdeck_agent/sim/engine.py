"""Which engine stand-in a `--simulate` agent runs for a worker, chosen from the worker's own argv.

The launcher sends a simulated agent exactly what it sends a real one: the real `vllm serve` argv and
env. A simulated agent has no GPUs to give vLLM, so it stands in for the engine itself; nothing on the
wire asks for it, and a real agent never does it (real vLLM is never replaced silently).

- `vllm serve MODEL ...` (argv[0] named `vllm`, first positional `serve`) runs the vLLM stand-in
  (vllm.py). Its plan comes from that argv and this server's simulated GPUs: the layout flags
  (-tp/-pp/-dp, --data-parallel-size-local/-start-rank, --headless, --nnodes/--node-rank,
  --enable-expert-parallel), the memory flags (--gpu-memory-utilization, --max-model-len,
  --kv-cache-dtype, --max-num-seqs/--max-num-batched-tokens, --speculative-config) and the model's
  config facts (memory.py) give the startup numbers vLLM would measure.
- Ray (`ray start ...`, or vLLM with `--distributed-executor-backend ray` / `--data-parallel-backend
  ray`) is refused with a reason: Ray would find no GPUs on a simulated server.
- Anything else (torchrun, a shell command, a probe) runs as it is: a simulated server is a real
  machine with fake GPUs, and CPU workloads (gloo) really run.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..gpu.catalog import GpuType, SimulateSpec
from ..protocol import BAD_PARAMS, ProtocolError, excerpt
from .memory import GpuFacts, model_config_for, startup_memory

DEFAULT_STARTUP_S = 8.0  # how long the stand-in takes from start to serving (weights, then KV cache)
DEFAULT_REQUEST_RATE = 4.0  # mean requests/s per engine of the stand-in's synthetic load
NO_RAY = "Ray would find no GPUs on this simulated server; launch vLLM with the mp backend"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit the process
        raise ValueError(message)


def _vllm_parser() -> argparse.ArgumentParser:
    """The `vllm serve` options the stand-in reads (names and short forms as vLLM's arg_utils spells them)."""
    parser = _Parser(add_help=False, allow_abbrev=False)
    parser.add_argument("--model")
    parser.add_argument("--port", type=int)
    parser.add_argument("--host")
    parser.add_argument("--served-model-name", nargs="+")
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--max-num-batched-tokens", type=int)
    parser.add_argument("--speculative-config")
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    parser.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    parser.add_argument("--data-parallel-size-local", "-dpl", type=int)
    parser.add_argument("--data-parallel-start-rank", "-dpr", type=int, default=0)
    parser.add_argument("--data-parallel-address", "-dpa")
    parser.add_argument("--data-parallel-rpc-port", "-dpp", type=int, default=29550)
    parser.add_argument("--data-parallel-backend", "-dpb", default="mp")
    parser.add_argument("--distributed-executor-backend")
    parser.add_argument("--enable-expert-parallel", "-ep", action="store_true")
    parser.add_argument("--nnodes", "-n", type=int, default=1)
    parser.add_argument("--node-rank", "-r", type=int, default=0)
    parser.add_argument("--master-addr")
    parser.add_argument("--master-port", type=int, default=29501)
    parser.add_argument("--headless", action="store_true")
    return parser


@dataclass(frozen=True)
class VllmServe:
    """What one `vllm serve` command line asks for, as far as the stand-in acts on it."""

    model: str
    served_model_name: str
    host: Optional[str]
    port: Optional[int]  # None when headless: that node serves no API
    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    data_parallel_local: int
    data_parallel_start_rank: int
    expert_parallel: bool
    nnodes: int
    node_rank: int
    max_model_len: Optional[int]
    gpu_memory_utilization: float
    kv_cache_dtype: str
    max_num_seqs: Optional[int]
    max_num_batched_tokens: Optional[int]
    speculative_tokens: int  # MTP drafts per step (0 without --speculative-config method mtp)
    ray: bool  # the Ray executor or Ray data-parallel backend
    early_ports: Tuple[Tuple[str, int], ...]  # (address, port) this node opens before loading weights

    @property
    def gpus_needed(self) -> int:
        """GPUs of this node: a share of the replica under --nnodes (mp), else its local engines' GPUs."""
        world = self.tensor_parallel * self.pipeline_parallel * self.data_parallel_local
        return -(-world // self.nnodes) if self.multi_node_replica else world

    @property
    def multi_node_replica(self) -> bool:
        return self.nnodes > 1 and self.data_parallel_local == self.data_parallel


def _normalized(argv: Sequence[str]) -> List[str]:
    """vLLM's parser takes `--max_model_len` for `--max-model-len`; so does the stand-in."""
    out = []
    for arg in argv:
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            arg = name.replace("_", "-") + eq + value
        out.append(arg)
    return out


def is_vllm_serve(argv: Sequence[str]) -> bool:
    """`vllm serve ...` (argv[0] named vllm, by path or not) with `serve` as its first positional."""
    if not argv or os.path.basename(argv[0]) != "vllm":
        return False
    positional = [a for a in argv[1:] if not a.startswith("-")]
    return bool(positional) and positional[0] == "serve"


def _speculative_tokens(raw: Optional[str]) -> int:
    if raw is None:
        return 0
    try:
        config = json.loads(raw)
    except ValueError:
        raise ValueError("--speculative-config: not JSON: %s" % excerpt(raw)) from None
    if not isinstance(config, dict):
        raise ValueError("--speculative-config: must be a JSON object")
    if str(config.get("method", "")).lower() not in ("mtp", "deepseek_mtp"):
        return 0  # a draft model or n-gram: no MTP layer loaded here
    tokens = config.get("num_speculative_tokens", 1)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= 64:
        raise ValueError("--speculative-config: num_speculative_tokens must be 1-64, got %s" % excerpt(tokens))
    return tokens


def parse_vllm_serve(argv: Sequence[str]) -> VllmServe:
    """Read a `vllm serve` argv; ValueError names the flag vLLM itself would refuse."""
    args = _normalized(argv)
    parsed, rest = _vllm_parser().parse_known_args(args[1:])
    positional = [a for a in rest if not a.startswith("-")]
    model = parsed.model
    if model is None:
        after = positional[1:] if positional[:1] == ["serve"] else positional
        model = after[0] if after else None
    if not model:
        raise ValueError("no model: `vllm serve MODEL` or --model")
    for flag, value, low in (
        ("--tensor-parallel-size", parsed.tensor_parallel_size, 1),
        ("--pipeline-parallel-size", parsed.pipeline_parallel_size, 1),
        ("--data-parallel-size", parsed.data_parallel_size, 1),
        ("--data-parallel-start-rank", parsed.data_parallel_start_rank, 0),
        ("--nnodes", parsed.nnodes, 1),
        ("--node-rank", parsed.node_rank, 0),
    ):
        if value < low:
            raise ValueError("%s must be >= %d, got %d" % (flag, low, value))
    for flag, value in (
        ("--max-model-len", parsed.max_model_len),
        ("--max-num-seqs", parsed.max_num_seqs),
        ("--max-num-batched-tokens", parsed.max_num_batched_tokens),
        ("--data-parallel-size-local", parsed.data_parallel_size_local),
    ):
        if value is not None and value < 1:
            raise ValueError("%s must be >= 1, got %d" % (flag, value))
    if not 0.0 < parsed.gpu_memory_utilization <= 1.0:
        raise ValueError("--gpu-memory-utilization must be in (0, 1], got %g" % parsed.gpu_memory_utilization)
    dp_size = parsed.data_parallel_size
    dp_local = parsed.data_parallel_size_local or dp_size
    if dp_local > dp_size:
        raise ValueError("--data-parallel-size-local %d exceeds --data-parallel-size %d" % (dp_local, dp_size))
    nnodes = parsed.nnodes if parsed.nnodes > 1 else -(-dp_size // dp_local)
    early: List[Tuple[str, int]] = []
    if parsed.nnodes > 1 and parsed.node_rank == 0:
        early.append((parsed.master_addr or "127.0.0.1", parsed.master_port))  # torch.distributed's TCPStore
    if dp_local < dp_size and not parsed.headless:
        early.append((parsed.data_parallel_address or "127.0.0.1", parsed.data_parallel_rpc_port))
    names = parsed.served_model_name
    return VllmServe(
        model=model,
        served_model_name=names[0] if names else model,
        host=parsed.host,
        port=None if parsed.headless else (parsed.port or 8000),
        tensor_parallel=parsed.tensor_parallel_size,
        pipeline_parallel=parsed.pipeline_parallel_size,
        data_parallel=dp_size,
        data_parallel_local=dp_local,
        data_parallel_start_rank=parsed.data_parallel_start_rank,
        expert_parallel=parsed.enable_expert_parallel,
        nnodes=nnodes,
        node_rank=parsed.node_rank if parsed.nnodes > 1 else parsed.data_parallel_start_rank // dp_local,
        max_model_len=parsed.max_model_len,
        gpu_memory_utilization=parsed.gpu_memory_utilization,
        kv_cache_dtype=parsed.kv_cache_dtype,
        max_num_seqs=parsed.max_num_seqs,
        max_num_batched_tokens=parsed.max_num_batched_tokens,
        speculative_tokens=_speculative_tokens(parsed.speculative_config),
        ray="ray" in (parsed.distributed_executor_backend, parsed.data_parallel_backend),
        early_ports=tuple(early),
    )


def _visible_gpus(env: Dict[str, str], gpus: Sequence[int], count: int) -> List[int]:
    """The simulated GPUs the process may use: CUDA_VISIBLE_DEVICES, else the spec's gpus, else all."""
    raw = env.get("CUDA_VISIBLE_DEVICES")
    field = "spec.env.CUDA_VISIBLE_DEVICES" if raw is not None else "spec.gpus"
    if raw is not None:
        try:
            visible = [int(part) for part in raw.split(",") if part.strip()]
        except ValueError:
            raise _refused("must list GPU indices, got %s" % excerpt(raw), field) from None
    else:
        visible = list(gpus) or list(range(count))
    for gpu in visible:
        if not 0 <= gpu < count:
            raise _refused("GPU %d does not exist on this simulated server (it has %d)" % (gpu, count), field)
    return visible


def gpu_facts(gpu: GpuType) -> GpuFacts:
    return GpuFacts(
        name=gpu.name,
        arch=gpu.arch,
        visible_bytes=(gpu.memory_mib - gpu.reserved_mib) * (1 << 20),
        nvswitch=gpu.nvswitch_count > 0,
    )


@dataclass(frozen=True)
class StandInChooser:
    """The engine stand-ins of one simulated server (`--simulate SPEC`)."""

    machine: SimulateSpec
    startup_s: float = DEFAULT_STARTUP_S
    request_rate: float = DEFAULT_REQUEST_RATE

    def plan_for(self, argv: Sequence[str], env: Dict[str, str], gpus: Sequence[int]) -> Optional[Dict[str, Any]]:
        """The stand-in plan (spec.py's shape) for a vLLM argv; None for argv that runs as it is.
        Raises ProtocolError(bad_params) for what this server cannot stand in for, naming why."""
        program = os.path.basename(argv[0]) if argv else ""
        if program == "ray":
            raise _refused(NO_RAY)
        if not is_vllm_serve(argv):
            return None
        try:
            serve = parse_vllm_serve(argv)
        except ValueError as exc:
            raise _refused(str(exc)) from None
        visible = _visible_gpus(env, gpus, self.machine.count)
        if serve.ray:
            raise _refused(NO_RAY)
        config = model_config_for(serve.model)
        if config is None:
            raise _refused(
                "no config.json facts for model %s on this simulated server (it knows DeepSeek V3 / R1 and "
                "V3.2 by their Hugging Face names or folder names)" % excerpt(serve.model)
            )
        if serve.gpus_needed > len(visible):
            raise _refused(
                "TP %d x PP %d x local DP %d%s needs %d GPUs here; %d are visible to it"
                % (
                    serve.tensor_parallel,
                    serve.pipeline_parallel,
                    serve.data_parallel_local,
                    " over %d nodes" % serve.nnodes if serve.multi_node_replica else "",
                    serve.gpus_needed,
                    len(visible),
                )
            )
        memory = startup_memory(config, serve, gpu_facts(self.machine.gpu), self.machine.count)
        return {
            "kind": "vllm",
            "gpus": visible[: serve.gpus_needed],
            "gpu_memory_bytes": memory.gpu_memory_bytes,
            "weights_bytes": memory.weights_bytes,
            "kv_cache_bytes": memory.kv_cache_bytes,
            "kv_tokens": memory.kv_tokens,
            "kv_bytes_per_token": memory.kv_bytes_per_token,
            "max_model_len": memory.max_model_len,
            "max_concurrency": memory.max_concurrency,
            "block_size": memory.block_size,
            "tensor_parallel": serve.tensor_parallel,
            "pipeline_parallel": serve.pipeline_parallel,
            "data_parallel_local": serve.data_parallel_local,
            "data_parallel_size": serve.data_parallel,
            "data_parallel_start_rank": serve.data_parallel_start_rank,
            "expert_parallel": serve.expert_parallel,
            "nnodes": serve.nnodes,
            "port": serve.port,
            "model": serve.model,
            "seed": serve.node_rank,
            "startup_s": self.startup_s,
            "request_rate": self.request_rate,
        }


def _refused(reason: str, field: str = "spec.argv") -> ProtocolError:
    return ProtocolError(BAD_PARAMS, "%s: simulated server (--simulate): %s" % (field, reason))
