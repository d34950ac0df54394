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

import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import Any

from meshdeck.core.errors import InputError
from meshdeck.core.vllm_args import (
    MTP_DEFAULT_SPECULATIVE_TOKENS,
    MTP_V4_SPECULATIVE_TOKENS,
    ServeSettings,
    vllm_serve_args,
)
from meshdeck.launch.network import NodeNetwork, nccl_env, network_warnings
from meshdeck.launch.plan import (
    LaunchPlan,
    NodeCommand,
    PlannedStartup,
    PortUse,
    ReadyCheck,
    layout_summary,
    merge_env,
)
from meshdeck.launch.profile import Profile
from meshdeck.launch.vllm_flags import bad_choices, flag_as_vllm_reads, flag_values, unknown_flags
from meshdeck.launch.vllm_known_flags import VLLM_VERSION

API_READY_LINE = r"Application startup complete"
RAY_READY_LINE = r"Ray runtime started"
_V32_NAME = re.compile(r"v3[._-]?2", re.IGNORECASE)
_V4_NAME = re.compile(r"v4(?![._-]?\d)", re.IGNORECASE)  # V4, not V4.1 (DeepseekV41ForCausalLM, its own parsers)


def is_deepseek_v32(model: str) -> bool:
    """Whether the model id or path names DeepSeek V3.2 (e.g. deepseek-ai/DeepSeek-V3.2, /models/DeepSeek-V3_2)."""
    base = posixpath.basename(model.rstrip("/")) or model
    return "deepseek" in model.lower() and bool(_V32_NAME.search(base))


def is_deepseek_v4(model: str) -> bool:
    """Whether the model id or path names DeepSeek-V4 (deepseek-ai/DeepSeek-V4-Pro, /models/DeepSeek-V4-Flash), not
    V4.1."""
    base = posixpath.basename(model.rstrip("/")) or model
    return "deepseek" in model.lower() and bool(_V4_NAME.search(base))


def ray_executable(vllm_executable: str) -> str:
    """`ray` from the same folder as the configured vLLM (its venv), else from PATH."""
    if "/" in vllm_executable:
        return posixpath.join(posixpath.dirname(vllm_executable), "ray")
    return "ray"


def engine_args(profile: Profile) -> tuple[list[str], list[str]]:
    """Flags every node's `vllm serve` shares (the planner's layout/engine flags) and warnings.

    They come from `meshdeck.core.vllm_args`: one source for what the planner shows and what is launched.
    """
    settings = profile.vllm
    warnings: list[str] = []
    v4 = is_deepseek_v4(profile.model)
    v32 = is_deepseek_v32(profile.model) and not v4
    if not v32 and not v4:
        warnings.append(
            f"model {profile.model!r} does not name DeepSeek V3.2 or V4, so its tokenizer/tool/reasoning parser "
            "flags were not added; put them in vllm.extra_args if it is V3.2 or V4"
        )
    mtp_tokens = MTP_V4_SPECULATIVE_TOKENS if v4 else MTP_DEFAULT_SPECULATIVE_TOKENS
    serve_settings = ServeSettings(
        max_model_len=settings.max_model_len or 1,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        kv_cache_dtype=settings.kv_cache_dtype,
        max_num_seqs=settings.max_num_seqs,
        deepseek_v32_frontend=v32,
        deepseek_v4_frontend=v4,
        mtp_speculative_tokens=mtp_tokens if settings.speculative_mtp else 0,
    )
    args = vllm_serve_args(profile.layout, serve_settings)
    if settings.max_model_len is None:
        # no flag: vLLM takes the model's own maximum context from its config
        cut = args.index("--max-model-len")
        del args[cut : cut + 2]
    warnings += _override_warnings(settings.extra_args, args)
    if unknown := unknown_flags(settings.extra_args):
        warnings.append(f"vllm.extra_args: {', '.join(unknown)} not flags of vLLM {VLLM_VERSION}")
    if problems := bad_choices(settings.extra_args):
        warnings.append(f"vllm.extra_args: unexpected values: {'; '.join(problems)}")
    return args, warnings


def _override_warnings(extra_args: Sequence[str], common: Sequence[str]) -> list[str]:
    """One warning per vllm.extra_args flag that replaces one meshdeck passes for this model (a V3.2 parser,
    MTP's --speculative-config): legitimate, but the dry run says so. The flags the launcher decides are
    refused with the profile (launch.profile.LAUNCHER_FLAGS)."""
    ours = flag_values(list(common))
    warnings = []
    for index, token in enumerate(extra_args):
        flag = flag_as_vllm_reads(token)
        if flag is not None and flag in ours:
            given = f"meshdeck's {ours[flag]}" if ours[flag] is not None else "the one meshdeck passes"
            warnings.append(f"vllm.extra_args[{index}]: {flag} replaces {given} (vLLM takes the last one given)")
    return warnings


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


def build_vllm_plan(
    profile: Profile,
    nodes: Sequence[NodeNetwork],
    *,
    planned: PlannedStartup | None = None,
) -> LaunchPlan:
    """The commands that start `profile` on `nodes` (same order as profile.hosts; nodes[0] is the head).

    The same whatever the agents run on: an agent started with `--simulate` stands in for `vllm serve`
    by itself, from this argv. `planned` is kept in the plan for planned-vs-measured.
    """
    if [n.host for n in nodes] != list(profile.hosts):
        raise InputError("hosts", f"network facts for {[n.host for n in nodes]} do not match {profile.hosts}")
    cls = layout_class(profile)
    layout = profile.layout
    settings = profile.vllm
    head = nodes[0]
    gpus = tuple(range(profile.gpus_per_node))
    common, warnings = engine_args(profile)
    if len(nodes) > 1 and "NCCL_SOCKET_IFNAME" not in profile.env:
        warnings += network_warnings(nodes, head.address)
    serve = [settings.executable, "serve", profile.model]
    api = ["--port", str(settings.port)]  # headless nodes serve no API (as vLLM's docs launch them)
    api_ready = (
        ReadyCheck("tcp", port=settings.port, timeout_s=3600.0),
        ReadyCheck("log", pattern=API_READY_LINE, timeout_s=3600.0),
    )
    running = (ReadyCheck("running", settle_s=5.0),)
    ports = [PortUse(head.host, settings.port, "vLLM API")]
    metrics_url = f"http://127.0.0.1:{settings.port}/metrics"
    commands: list[NodeCommand] = []

    def env_for(node: NodeNetwork, fixed: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        presets = nccl_env(node, head.address) if len(nodes) > 1 else {}
        return merge_env({"NCCL_DEBUG": "INFO"}, presets, profile=profile.env, fixed=fixed)

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

    def own_address(node: NodeNetwork) -> dict[str, str]:
        # vLLM's get_ip() otherwise guesses the default route's address (it announced eth0's while the
        # nodes met on 127.0.0.1); a node's peers reach it at the address the plan knows it by.
        return {"VLLM_HOST_IP": node.address}

    if cls == "single-node":
        add(head, 0, "vllm-node0", 0, [*serve, *common, *api, *settings.extra_args], ready=api_ready,
            metrics_url=metrics_url)  # fmt: skip
    elif cls == "multi-node-mp":
        ports.append(PortUse(head.host, settings.master_port, "torch.distributed master (vLLM mp)"))
        master_ready = (ReadyCheck("tcp", port=settings.master_port, timeout_s=900.0),)
        for rank, node in enumerate(nodes):
            argv = [*serve, *common, "--nnodes", str(len(nodes)), "--node-rank", str(rank)]
            argv += ["--master-addr", head.address, "--master-port", str(settings.master_port)]
            argv += ["--headless"] if rank else api
            add(node, rank, f"vllm-node{rank}", min(rank, 1), argv + settings.extra_args,
                ready=running if rank else master_ready, metrics_url=None if rank else metrics_url,
                env=own_address(node))  # fmt: skip
    elif cls == "dp-multi-node":
        ports.append(PortUse(head.host, settings.data_parallel_rpc_port, "vLLM data-parallel RPC"))
        rpc_ready = (ReadyCheck("tcp", port=settings.data_parallel_rpc_port, timeout_s=900.0),)
        dp_local = layout.data_parallel // len(nodes)
        for rank, node in enumerate(nodes):
            argv = [*serve, *common, "--data-parallel-size-local", str(dp_local)]
            argv += ["--data-parallel-address", head.address]
            argv += ["--data-parallel-rpc-port", str(settings.data_parallel_rpc_port)]
            argv += ["--data-parallel-start-rank", str(rank * dp_local), "--headless"] if rank else api
            add(node, rank, f"vllm-node{rank}", min(rank, 1), argv + settings.extra_args,
                ready=running if rank else rpc_ready, metrics_url=None if rank else metrics_url,
                env=own_address(node))  # fmt: skip
    else:  # ray
        ray = ray_executable(settings.executable)
        ports.append(PortUse(head.host, settings.ray_port, "Ray GCS"))
        argv = [ray, "start", "--head", f"--port={settings.ray_port}", f"--node-ip-address={head.address}", "--block"]
        add(head, 0, "ray-head", 0, argv, env={"VLLM_HOST_IP": head.address},
            ready=(ReadyCheck("tcp", port=settings.ray_port, timeout_s=300.0),))  # fmt: skip
        for rank, node in enumerate(nodes[1:], start=1):
            argv = [ray, "start", "--block", f"--address={head.address}:{settings.ray_port}"]
            argv.append(f"--node-ip-address={node.address}")
            add(node, rank, f"ray-node{rank}", 1, argv, env={"VLLM_HOST_IP": node.address},
                ready=(ReadyCheck("log", pattern=RAY_READY_LINE, timeout_s=300.0),))  # fmt: skip
        argv = [*serve, *common, *api, "--distributed-executor-backend", "ray"]
        serve_env = {"VLLM_HOST_IP": head.address}
        if layout.data_parallel > 1:
            argv += ["--data-parallel-backend", "ray"]
            if layout.tensor_parallel * layout.pipeline_parallel > profile.gpus_per_node:
                serve_env["VLLM_RAY_DP_PACK_STRATEGY"] = "span"  # one DP replica spans nodes
        # Ray places the GPU workers; this process owns no GPU of its own.
        add(head, 0, "vllm-serve", 2, argv + settings.extra_args, env=serve_env, gpus=(), ready=api_ready,
            metrics_url=metrics_url)  # fmt: skip
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
        restart_as_whole=len(nodes) > 1,
        warnings=tuple(warnings),
        layout=layout_summary(profile),
        planned=planned,
    )


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
