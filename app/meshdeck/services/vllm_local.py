"""Real vLLM (its CPU build) on agents of this machine: `meshdeck bench vllm --local`, the real-engine tests,
the launch benchmark and the demo's real deployment.

    executable = find_vllm_executable()                     # VllmNotInstalled says how to make it
    profile = local_vllm_profile(["local-0", "local-1"], executable=executable, model=str(tiny_model_dir()))

The profile is an ordinary vLLM profile: two hosts, one "GPU" each (vLLM's CPU workers), TP=2 with vLLM's
own multi-node flags (`--nnodes 2 --node-rank R --master-addr 127.0.0.1 --headless`), the model directory
resources/vllm-models/tiny-deepseek-v3 (DeepSeek-V3's architecture — MLA with DeepSeek's real head sizes,
MoE with a shared expert and noaux_tc routing — at hidden 256 and 4 layers) served with `--load-format
dummy` (random weights: nothing is downloaded) and `--enforce-eager` (no torch.compile: a 2-core machine
starts in about a minute instead of three). VLLM_CPU_KVCACHE_SPACE sets each worker's KV budget.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import meshdeck
from meshdeck.core.errors import InputError
from meshdeck.launch.profile import Profile, profile_from_mapping

VLLM_ENV = "MESHDECK_VLLM"
TINY_MODELS = Path(meshdeck.__file__).resolve().parent / "resources" / "vllm-models"
SERVE_ARGS = ("--load-format", "dummy", "--enforce-eager")
KV_CACHE_SPACE_GIB = "1"
MAX_MODEL_LEN = 2048
HOW_TO_INSTALL = (
    "vLLM's CPU build is not installed: run `make vllm-venv` in meshdeck's checkout (it makes .venv-vllm, "
    f"a few minutes and ~3.5 GB), or point {VLLM_ENV} (or --vllm) at a `vllm` executable"
)


class VllmNotInstalled(InputError):
    def __init__(self, detail: str = "") -> None:
        super().__init__("vllm", HOW_TO_INSTALL + (f" ({detail})" if detail else ""))


def checkout_vllm() -> Path:
    """The launcher `make vllm-venv` installs, beside a source checkout of meshdeck."""
    return Path(meshdeck.__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "vllm"


def find_vllm_executable(explicit: str | None = None) -> str:
    """`explicit`, else $MESHDECK_VLLM, else the checkout's .venv-vllm/bin/vllm — an executable file, or
    VllmNotInstalled naming what was looked at."""
    chosen = explicit or os.environ.get(VLLM_ENV) or str(checkout_vllm())
    path = Path(chosen).expanduser()
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise VllmNotInstalled(f"no executable at {path}")
    return str(path.resolve())


def tiny_model_dir(name: str = "tiny-deepseek-v3") -> Path:
    path = TINY_MODELS / name
    if not (path / "config.json").is_file():
        raise InputError("model", f"meshdeck's tiny model {name!r} is missing from {TINY_MODELS}")
    return path


def local_vllm_profile(
    hosts: Sequence[str],
    *,
    executable: str,
    model: str,
    port: int,
    master_port: int,
    tensor_parallel: int = 2,
    pipeline_parallel: int = 1,
    extra_args: Sequence[str] = (),
    name: str = "vllm-cpu",
    kv_cache_memory: str | None = None,
) -> Profile:
    """A vLLM profile for the tiny model on `hosts` (agents of this machine), one CPU worker per host.

    The KV budget is VLLM_CPU_KVCACHE_SPACE (whole GiB), or `kv_cache_memory` (`--kv-cache-memory-bytes`,
    e.g. "32M") for a pool small enough that a handful of requests fill a visible part of it."""
    world = tensor_parallel * pipeline_parallel
    budget_args = ["--kv-cache-memory-bytes", kv_cache_memory] if kv_cache_memory else []
    budget_env = {} if kv_cache_memory else {"VLLM_CPU_KVCACHE_SPACE": KV_CACHE_SPACE_GIB}
    if world % len(hosts):
        raise InputError("layout", f"{world} workers do not split evenly over {len(hosts)} host(s)")
    return profile_from_mapping(
        {
            "name": name,
            "model": model,
            "engine": "vllm",
            "hosts": list(hosts),
            "gpus_per_node": world // len(hosts),
            "layout": {"tensor_parallel": tensor_parallel, "pipeline_parallel": pipeline_parallel},
            "vllm": {
                "executable": executable,
                "max_model_len": MAX_MODEL_LEN,
                "port": port,
                "master_port": master_port,
                "extra_args": [*SERVE_ARGS, *budget_args, *extra_args],
            },
            "env": {
                **budget_env,
                # two "nodes" share this machine's cores: let the OS place the threads instead of vLLM pinning
                # every node's worker to core 0 (its `auto` binding counts only the node's own workers)
                "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                "OMP_NUM_THREADS": "1",
            },
        },
        source="local vLLM profile",
    )


def router_executable(vllm_executable: str) -> str:
    """`vllm-router` beside the vLLM executable (`make vllm-venv` installs both in .venv-vllm/bin)."""
    return str(Path(vllm_executable).with_name("vllm-router"))


def local_disaggregated_profile(
    hosts: Sequence[str],
    *,
    executable: str,
    model: str,
    ports: Sequence[int],
    name: str = "vllm-cpu-pd",
) -> Profile:
    """One prefill engine on hosts[0] and one decode engine on hosts[1] (TP=1, one CPU "GPU" each), NIXL moving
    KV between their host-memory buffers over TCP (UCX; no RDMA here), vLLM's router in front on hosts[0].

    `ports`: prefill API, decode API, prefill side channel, decode side channel, router, router metrics."""
    if len(hosts) != 2 or len(ports) != 6:
        raise InputError("hosts", "a local disaggregated deployment is one prefill host and one decode host")
    prefill_api, decode_api, prefill_side, decode_side, router, router_metrics = ports
    return profile_from_mapping(
        {
            "name": name,
            "model": model,
            "engine": "vllm",
            "hosts": list(hosts),
            "gpus_per_node": 1,
            "vllm": {"executable": executable, "max_model_len": MAX_MODEL_LEN, "extra_args": list(SERVE_ARGS)},
            "env": {
                "VLLM_CPU_KVCACHE_SPACE": KV_CACHE_SPACE_GIB,
                "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                "OMP_NUM_THREADS": "1",
            },
            "disaggregated": {
                "prefill": {"hosts": [hosts[0]], "port": prefill_api, "side_channel_port": prefill_side},
                "decode": {"hosts": [hosts[1]], "port": decode_api, "side_channel_port": decode_side},
                "kv_connector": {"buffer_device": "cpu", "transport": "tcp"},
                "router": {
                    "executable": router_executable(executable),
                    "port": router,
                    "prometheus_port": router_metrics,
                },
            },
        },
        source="local disaggregated vLLM profile",
    )
