"""Per-node `vllm serve` (and `ray start`) commands for a profile, one layout class at a time.

The classes, as vLLM's docs and the DeepSeek recipes launch them (vLLM 0.33):

- single node          `vllm serve M [-tp T] [-pp P] [-dp D] [--enable-expert-parallel]`
- multi-node, mp       a replica spans nodes (T×P > GPUs per node), one replica: every node runs the same
                       command plus `--nnodes N --node-rank R --master-addr HEAD --master-port P`; R > 0 adds
                       `--headless`. Head first: its master port opens early, the others then join.
- DP across nodes      replicas fit in a node, several per node: `-dp D --data-parallel-size-local L
                       --data-parallel-address HEAD --data-parallel-rpc-port P`; node R > 0 adds
                       `--data-parallel-start-rank R×L --headless`.
- Ray                  `ray start --head --port=6379 --block` on the head, `ray start --block
                       --address=HEAD:6379` on the others, then one `vllm serve … --distributed-executor-backend
                       ray` on the head (DP over Ray: `--data-parallel-backend ray`).

DeepSeek V3.2 adds `--tokenizer-mode deepseek_v32 --tool-call-parser deepseek_v32 --enable-auto-tool-choice
--reasoning-parser deepseek_v3`; MTP adds `--speculative-config {"method":"mtp","num_speculative_tokens":3}`.
Every flag is checked against the flag list of a real vLLM release in the tests.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from meshdeck.core.errors import InputError
from meshdeck.launch.network import NodeNetwork, nccl_env, network_warnings
from meshdeck.launch.plan import LaunchPlan, NodeCommand, PortUse, ReadyCheck, layout_summary, merge_env
from meshdeck.launch.profile import Profile
from meshdeck.launch.vllm_flags import bad_choices, unknown_flags
from meshdeck.launch.vllm_known_flags import VLLM_VERSION

V32_FLAGS = (
    "--tokenizer-mode",
    "deepseek_v32",
    "--tool-call-parser",
    "deepseek_v32",
    "--enable-auto-tool-choice",
    "--reasoning-parser",
    "deepseek_v3",
)
MTP_SPECULATIVE_TOKENS = 3
API_READY_LINE = r"Application startup complete"
RAY_READY_LINE = r"Ray runtime started"
_V32_NAME = re.compile(r"v3[._-]?2", re.IGNORECASE)


@dataclass(frozen=True)
class PlannedStartup:
    """The planner's prediction per GPU / per DP engine, handed to a simulated vLLM and kept for comparison."""

    gpu_memory_bytes: int
    weights_bytes: int
    kv_cache_bytes: int
    kv_tokens: int  # per DP engine (one replica's KV pool)
    max_concurrency: float  # at max_model_len, per DP engine


def is_deepseek_v32(model: str) -> bool:
    """Whether the model id or path names DeepSeek V3.2 (e.g. deepseek-ai/DeepSeek-V3.2, /models/DeepSeek-V3_2)."""
    base = posixpath.basename(model.rstrip("/")) or model
    return "deepseek" in model.lower() and bool(_V32_NAME.search(base))


def ray_executable(vllm_executable: str) -> str:
    """`ray` from the same folder as the configured vLLM (its venv), else from PATH."""
    if "/" in vllm_executable:
        return posixpath.join(posixpath.dirname(vllm_executable), "ray")
    return "ray"


def engine_args(profile: Profile) -> tuple[list[str], list[str]]:
    """Flags shared by every node's `vllm serve`: model/cache/scheduler/frontend settings, and warnings."""
    settings = profile.vllm
    args: list[str] = []
    warnings: list[str] = []
    if settings.max_model_len is not None:
        args += ["--max-model-len", str(settings.max_model_len)]
    args += ["--gpu-memory-utilization", f"{settings.gpu_memory_utilization:g}"]
    if settings.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", settings.kv_cache_dtype]
    if settings.max_num_seqs is not None:
        args += ["--max-num-seqs", str(settings.max_num_seqs)]
    if is_deepseek_v32(profile.model):
        args += list(V32_FLAGS)
    else:
        warnings.append(
            f"model {profile.model!r} does not name DeepSeek V3.2, so its tokenizer/tool/reasoning parser flags "
            "were not added; put them in vllm.extra_args if it is V3.2"
        )
    if settings.speculative_mtp:
        config = {"method": "mtp", "num_speculative_tokens": MTP_SPECULATIVE_TOKENS}
        args += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
    args += ["--port", str(settings.port)]
    if unknown := unknown_flags(settings.extra_args):
        warnings.append(f"vllm.extra_args: {', '.join(unknown)} not flags of vLLM {VLLM_VERSION}")
    if problems := bad_choices(settings.extra_args):
        warnings.append(f"vllm.extra_args: unexpected values: {'; '.join(problems)}")
    return args, warnings


def _sizes(tensor_parallel: int, pipeline_parallel: int, data_parallel: int, expert_parallel: bool) -> list[str]:
    args: list[str] = []
    if tensor_parallel > 1:
        args += ["--tensor-parallel-size", str(tensor_parallel)]
    if pipeline_parallel > 1:
        args += ["--pipeline-parallel-size", str(pipeline_parallel)]
    if data_parallel > 1:
        args += ["--data-parallel-size", str(data_parallel)]
    if expert_parallel:
        args += ["--enable-expert-parallel"]
    return args


def layout_class(profile: Profile) -> str:
    nodes = len(profile.hosts)
    layout = profile.layout
    replica = layout.tensor_parallel * layout.pipeline_parallel
    if nodes == 1:
        return "single-node"
    if profile.vllm.distributed_backend == "ray":
        return "ray"
    if replica <= profile.gpus_per_node:
        if profile.gpus_per_node % replica:
            raise InputError(
                "layout",
                f"a replica of tensor_parallel × pipeline_parallel = {replica} GPUs does not divide "
                f"gpus_per_node {profile.gpus_per_node}, so replicas would straddle nodes; choose sizes that "
                "divide the node, or use vllm.distributed_backend: ray",
            )
        return "dp-multi-node"
    if layout.data_parallel > 1:
        raise InputError(
            "layout",
            f"each replica spans {replica // profile.gpus_per_node} nodes and data_parallel is "
            f"{layout.data_parallel}: vLLM's multiprocessing launcher runs one replica across nodes; use "
            "vllm.distributed_backend: ray for several multi-node replicas",
        )
    return "multi-node-mp"


def _simulate(
    profile: Profile, planned: PlannedStartup | None, gpus: int, dp_local: int, dp_start: int, seed: int
) -> dict[str, Any]:
    if planned is None:
        raise InputError("plan", "a simulated launch needs the planner's memory prediction (none was given)")
    layout = profile.layout
    return {
        "kind": "vllm",
        "gpus": gpus,
        "gpu_memory_bytes": planned.gpu_memory_bytes,
        "weights_bytes": planned.weights_bytes,
        "kv_cache_bytes": planned.kv_cache_bytes,
        "kv_tokens": planned.kv_tokens,
        "max_model_len": profile.vllm.max_model_len or 0,
        "max_concurrency": planned.max_concurrency,
        "tensor_parallel": layout.tensor_parallel,
        "pipeline_parallel": layout.pipeline_parallel,
        "data_parallel_local": dp_local,
        "data_parallel_start_rank": dp_start,
        "expert_parallel": layout.expert_parallel,
        "port": profile.vllm.port,
        "model": profile.model,
        "seed": seed,
    }


def build_vllm_plan(
    profile: Profile,
    nodes: Sequence[NodeNetwork],
    *,
    planned: PlannedStartup | None = None,
    simulate: bool = False,
) -> LaunchPlan:
    """The commands that start `profile` on `nodes` (same order as profile.hosts; nodes[0] is the head)."""
    if [n.host for n in nodes] != list(profile.hosts):
        raise InputError("hosts", f"network facts for {[n.host for n in nodes]} do not match {profile.hosts}")
    cls = layout_class(profile)
    layout = profile.layout
    settings = profile.vllm
    head = nodes[0]
    gpus = tuple(range(profile.gpus_per_node))
    vllm = settings.executable
    common, warnings = engine_args(profile)
    if len(nodes) > 1 and "NCCL_SOCKET_IFNAME" not in profile.env:
        warnings += network_warnings(nodes, head.address)
    serve = [vllm, "serve", profile.model]
    api_ready = (
        ReadyCheck("tcp", port=settings.port, timeout_s=3600.0),
        ReadyCheck("log", pattern=API_READY_LINE, timeout_s=3600.0),
    )
    multi_node = len(nodes) > 1

    def env_for(node: NodeNetwork, extra: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        presets = nccl_env(node, head.address) if multi_node else {}
        return merge_env({"NCCL_DEBUG": "INFO"}, presets, extra, profile.env)

    commands: list[NodeCommand] = []
    ports = [PortUse(head.host, settings.port, "vLLM API")]
    sizes = _sizes(layout.tensor_parallel, layout.pipeline_parallel, layout.data_parallel, layout.expert_parallel)
    metrics_url = f"http://127.0.0.1:{settings.port}/metrics"

    def add(node: NodeNetwork, rank: int, name: str, stage: int, argv: list[str], **extra: Any) -> None:
        commands.append(
            NodeCommand(
                host=node.host,
                node_rank=rank,
                name=name,
                role="head" if node is head else "worker",
                stage=stage,
                argv=tuple(argv),
                env=env_for(node, extra.pop("env", {})),
                gpus=extra.pop("gpus", gpus),
                **extra,
            )
        )

    def simulated(dp_local: int, dp_start: int, seed: int) -> dict[str, Any] | None:
        return _simulate(profile, planned, len(gpus), dp_local, dp_start, seed) if simulate else None

    running = (ReadyCheck("running", settle_s=5.0),)
    if cls == "single-node":
        argv = [*serve, *sizes, *common, *settings.extra_args]
        add(
            head,
            0,
            "vllm-node0",
            0,
            argv,
            ready=api_ready,
            metrics_url=metrics_url,
            simulate=simulated(layout.data_parallel, 0, 0),
        )
    elif cls == "multi-node-mp":
        ports.append(PortUse(head.host, settings.master_port, "torch.distributed master (vLLM mp)"))
        master_ready = (ReadyCheck("tcp", port=settings.master_port, timeout_s=900.0),)
        for rank, node in enumerate(nodes):
            argv = [*serve, *sizes, *common, "--nnodes", str(len(nodes)), "--node-rank", str(rank)]
            argv += ["--master-addr", head.address, "--master-port", str(settings.master_port)]
            argv += ["--headless"] if rank else []
            add(
                node,
                rank,
                f"vllm-node{rank}",
                min(rank, 1),
                argv + settings.extra_args,
                ready=running if rank else master_ready,
                metrics_url=None if rank else metrics_url,
                simulate=simulated(1, 0, rank),
            )
    elif cls == "dp-multi-node":
        ports.append(PortUse(head.host, settings.data_parallel_rpc_port, "vLLM data-parallel RPC"))
        rpc_ready = (ReadyCheck("tcp", port=settings.data_parallel_rpc_port, timeout_s=900.0),)
        dp_local = layout.data_parallel // len(nodes)
        for rank, node in enumerate(nodes):
            argv = [*serve, *sizes, *common, "--data-parallel-size-local", str(dp_local)]
            argv += ["--data-parallel-address", head.address]
            argv += ["--data-parallel-rpc-port", str(settings.data_parallel_rpc_port)]
            argv += ["--data-parallel-start-rank", str(rank * dp_local), "--headless"] if rank else []
            add(
                node,
                rank,
                f"vllm-node{rank}",
                min(rank, 1),
                argv + settings.extra_args,
                ready=running if rank else rpc_ready,
                metrics_url=None if rank else metrics_url,
                simulate=simulated(dp_local, rank * dp_local, rank),
            )
    else:  # ray
        ray = ray_executable(vllm)
        ports.append(PortUse(head.host, settings.ray_port, "Ray GCS"))
        argv = [ray, "start", "--head", f"--port={settings.ray_port}", f"--node-ip-address={head.address}", "--block"]
        add(
            head,
            0,
            "ray-head",
            0,
            argv,
            env={"VLLM_HOST_IP": head.address},
            ready=(ReadyCheck("tcp", port=settings.ray_port, timeout_s=300.0),),
        )
        for rank, node in enumerate(nodes[1:], start=1):
            argv = [ray, "start", "--block", f"--address={head.address}:{settings.ray_port}"]
            argv.append(f"--node-ip-address={node.address}")
            add(
                node,
                rank,
                f"ray-node{rank}",
                1,
                argv,
                env={"VLLM_HOST_IP": node.address},
                ready=(ReadyCheck("log", pattern=RAY_READY_LINE, timeout_s=300.0),),
            )
        argv = [*serve, *sizes, *common, "--distributed-executor-backend", "ray"]
        serve_env = {"VLLM_HOST_IP": head.address}
        if layout.data_parallel > 1:
            argv += ["--data-parallel-backend", "ray"]
            if layout.tensor_parallel * layout.pipeline_parallel > profile.gpus_per_node:
                serve_env["VLLM_RAY_DP_PACK_STRATEGY"] = "span"  # one DP replica spans nodes
        # Ray places the GPU workers; this process owns no GPU of its own.
        add(
            head,
            0,
            "vllm-serve",
            2,
            argv + settings.extra_args,
            env=serve_env,
            gpus=(),
            ready=api_ready,
            metrics_url=metrics_url,
            simulate=simulated(layout.data_parallel, 0, 0),
        )
    return LaunchPlan(
        name=profile.name,
        engine="vllm",
        model=profile.model,
        head_host=head.host,
        head_address=head.address,
        commands=tuple(commands),
        ports=tuple(ports),
        layout_class=cls,
        serving_url=f"http://{_url_host(head.address)}:{settings.port}/v1",
        serving_command=commands[-1].name if cls == "ray" else "vllm-node0",
        serving_ready=api_ready,
        restart_as_whole=multi_node,
        warnings=tuple(warnings),
        layout=layout_summary(profile),
    )


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
