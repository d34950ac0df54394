"""A simulated vLLM worker's stand-in plan, and how the running stand-in loads the simulated GPUs.

The plan is the agent's own (engine.py derives it from the worker's `vllm serve` argv and this
server's simulated GPUs; nothing on the wire carries it). It is kept in the worker's agent.json, so a
restarted agent re-adopts the stand-in with the numbers it runs with, and handed to the stand-in
process in simulate.json:

    {
      "kind": "vllm",                      # the only kind
      "gpus": [0, 1, 2, 3, 4, 5, 6, 7],    # simulated GPU indices this worker holds (this node)
      "gpu_memory_bytes": 120e9,           # per GPU, held once the server is up (budget + CUDA graphs)
      "weights_bytes": 86.7e9,             # per GPU, held from "Model loading took" on
      "kv_cache_bytes": 30.5e9,            # per GPU, "Available KV cache memory"
      "kv_tokens": 418304,                 # KV cache capacity per engine (per DP rank), tokens
      "kv_bytes_per_token": 78324,         # optional: per GPU, for vLLM's "max seq len" error
      "max_model_len": 16384,
      "max_concurrency": 25.53,            # per engine, at max_model_len (default kv_tokens / max_model_len)
      "tensor_parallel": 8, "pipeline_parallel": 1,
      "data_parallel_local": 1,            # engines (DP ranks) on this node
      "data_parallel_size": 1,             # DP ranks in the whole deployment (default data_parallel_local)
      "data_parallel_start_rank": 0,       # first DP rank on this node (engine labels start here)
      "expert_parallel": false,
      "nnodes": 1,                         # nodes the deployment spans (network traffic when > 1)
      "port": 8000,                        # where the stand-in serves /metrics, /health, /v1/models
      "model": "deepseek-ai/DeepSeek-V3.2",
      "seed": 0,
      "startup_s": 8.0,                    # how long the fake start takes (weights, then KV)
      "request_rate": 4.0,                 # mean requests/s per engine of the synthetic load
      "block_size": 64                     # KV block size reported in cache_config_info
    }

Agents before this one received the same object from the launcher as `WorkerSpec.simulate`; their
agent.json files still load. `validate_simulate` checks a plan read back from a file and names the
bad field.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional, Sequence, Tuple

from ..protocol import excerpt
from ..wire_sample import WorkerSample
from .traffic import SimWorkerActivity

CONTEXT_BYTES = 600 * 1024 * 1024  # a CUDA context plus NCCL buffers before the weights arrive

_INT_FIELDS = {
    "gpu_memory_bytes": (1, True),
    "weights_bytes": (0, True),
    "kv_cache_bytes": (0, True),
    "kv_tokens": (0, True),
    "kv_bytes_per_token": (0, False),
    "max_model_len": (1, True),
    "tensor_parallel": (1, False),
    "pipeline_parallel": (1, False),
    "data_parallel_local": (1, False),
    "data_parallel_size": (1, False),
    "data_parallel_start_rank": (0, False),
    "nnodes": (1, False),
    "seed": (0, False),
    "block_size": (1, False),
}
_KNOWN = set(_INT_FIELDS) | {
    "kind",
    "gpus",
    "max_concurrency",
    "expert_parallel",
    "port",
    "model",
    "startup_s",
    "request_rate",
}


class BadStandInPlan(ValueError):
    """A stand-in plan read back from a worker's files is not one this agent can run; names the field."""


def _bad(field: str, problem: str) -> BadStandInPlan:
    return BadStandInPlan("stand-in plan: %s: %s" % (field, problem))


def validate_simulate(simulate: Dict[str, Any], gpu_count: int) -> Dict[str, Any]:
    """A normalized copy (defaults filled, byte counts as ints) or BadStandInPlan naming the field."""
    if not isinstance(simulate, dict):
        raise BadStandInPlan("stand-in plan: must be an object, got %s" % excerpt(simulate))
    for key in simulate:
        if key not in _KNOWN:
            raise _bad(str(key), "unknown field (allowed: %s)" % ", ".join(sorted(_KNOWN)))
    if simulate.get("kind") != "vllm":
        raise _bad("kind", 'must be "vllm", got %s' % excerpt(simulate.get("kind")))
    out: Dict[str, Any] = {"kind": "vllm"}
    gpus = simulate.get("gpus")
    if not isinstance(gpus, list) or not gpus or not all(isinstance(g, int) and not isinstance(g, bool) for g in gpus):
        raise _bad("gpus", "must be a non-empty list of GPU indices")
    if len(set(gpus)) != len(gpus):
        raise _bad("gpus", "lists a GPU twice")
    for gpu in gpus:
        if not 0 <= gpu < gpu_count:
            raise _bad("gpus", "GPU %d does not exist on this simulated server (it has %d)" % (gpu, gpu_count))
    out["gpus"] = list(gpus)
    for field, (minimum, required) in _INT_FIELDS.items():
        if field not in simulate:
            if required:
                raise _bad(field, "is required")
            continue
        value = simulate[field]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise _bad(field, "must be a number")
        if value < minimum:
            raise _bad(field, "must be >= %d, got %s" % (minimum, excerpt(value)))
        out[field] = int(value)
    if out["weights_bytes"] + out["kv_cache_bytes"] > out["gpu_memory_bytes"]:
        raise _bad("gpu_memory_bytes", "is smaller than weights_bytes + kv_cache_bytes")
    out.setdefault("tensor_parallel", 1)
    out.setdefault("pipeline_parallel", 1)
    out.setdefault("data_parallel_local", 1)
    out.setdefault("data_parallel_size", out["data_parallel_local"])
    out.setdefault("data_parallel_start_rank", 0)
    out.setdefault("nnodes", 1)
    out.setdefault("seed", 0)
    out.setdefault("block_size", 64)
    concurrency = simulate.get("max_concurrency", out["kv_tokens"] / out["max_model_len"])
    if isinstance(concurrency, bool) or not isinstance(concurrency, (int, float)) or concurrency < 0:
        raise _bad("max_concurrency", "must be a non-negative number")
    out["max_concurrency"] = float(concurrency)
    expert = simulate.get("expert_parallel", False)
    if not isinstance(expert, bool):
        raise _bad("expert_parallel", "must be true or false")
    out["expert_parallel"] = expert
    port = simulate.get("port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535):
        raise _bad("port", "must be a TCP port 1-65535")
    out["port"] = port
    model = simulate.get("model", "deepseek-ai/DeepSeek-V3.2")
    if not isinstance(model, str) or not model:
        raise _bad("model", "must be a model name")
    out["model"] = model
    for field, default, low, high in (("startup_s", 8.0, 0.0, 3600.0), ("request_rate", 4.0, 0.0, 10000.0)):
        value = simulate.get(field, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise _bad(field, "must be a number between %g and %g" % (low, high))
        out[field] = float(value)
    return out


class SimVllmTracker:
    """Follows one simulated vLLM worker: its phase from its own log lines, its load from its metrics."""

    def __init__(self, worker_id: str, simulate: Dict[str, Any]) -> None:
        self.worker_id = worker_id
        self.simulate = simulate
        self.running = False
        self.pid: Optional[int] = None
        self.started_at = 0.0
        self.weights_loaded = False
        self.kv_allocated = False

    def process_started(self, pid: Optional[int]) -> None:
        self.running = True
        self.pid = pid
        self.started_at = time.monotonic()
        self.weights_loaded = False
        self.kv_allocated = False

    def process_ended(self) -> None:
        self.running = False

    def log_event(self, kind: str, fields: Dict[str, Any]) -> None:
        if kind != "vllm_startup":
            return
        if "weights_gib" in fields:
            self.weights_loaded = True
        if "available_kv_gib" in fields or "kv_cache_tokens" in fields:
            self.weights_loaded = True
            self.kv_allocated = True

    def held_bytes(self) -> int:
        if not self.running:
            return 0
        if self.kv_allocated:
            return int(self.simulate["gpu_memory_bytes"])
        if self.weights_loaded:
            return CONTEXT_BYTES + int(self.simulate["weights_bytes"])
        # weights stream in while the stand-in "loads": memory grows with them
        startup = max(0.1, self.simulate["startup_s"] * 0.6)
        fraction = min(1.0, (time.monotonic() - self.started_at) / startup)
        return CONTEXT_BYTES + int(self.simulate["weights_bytes"] * fraction)

    def activity(self, metrics: Sequence[WorkerSample]) -> SimWorkerActivity:
        totals: Dict[str, Any] = {}
        for entry in metrics:
            if entry.engine == "":
                totals = dict(entry.metrics)
        loading = self.running and not self.weights_loaded
        simulate = self.simulate
        return SimWorkerActivity(
            worker_id=self.worker_id,
            gpus=tuple(simulate["gpus"]),
            held_bytes_per_gpu=self.held_bytes(),
            pids=(self.pid,) if self.pid else (),
            loading=loading,
            loading_bytes_per_s=simulate["weights_bytes"] / max(0.1, simulate["startup_s"] * 0.6) if loading else 0.0,
            prompt_tokens_per_s=float(totals.get("prompt_tokens_per_s") or 0.0) if self.running else 0.0,
            generation_tokens_per_s=float(totals.get("generation_tokens_per_s") or 0.0) if self.running else 0.0,
            tensor_parallel=simulate["tensor_parallel"],
            pipeline_parallel=simulate["pipeline_parallel"],
            data_parallel_local=simulate["data_parallel_local"],
            data_parallel_size=simulate["data_parallel_size"],
            expert_parallel=simulate["expert_parallel"],
            nodes=simulate["nnodes"],
        )


def metrics_url(simulate: Dict[str, Any]) -> Optional[str]:
    port = simulate.get("port")
    return "http://127.0.0.1:%d/metrics" % port if port else None


def startup_phases(simulate: Dict[str, Any]) -> Tuple[float, float]:
    """(seconds until weights are loaded, seconds until the KV cache is allocated) for the stand-in."""
    total = simulate["startup_s"]
    return total * 0.6, total * 0.85
