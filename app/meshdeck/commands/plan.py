"""`meshdeck plan`: which DP/TP/PP/EP layouts of a DeepSeek model fit a cluster, ranked by a goal.

Arguments are read as text and validated here so that any bad value — a non-positive count, an
unknown GPU, a config.json that is not DeepSeek — ends as one `meshdeck: error: <field>: <problem>`
line with exit status 2 (InputError), never an argparse usage dump.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any

from meshdeck.commands import Subparsers
from meshdeck.commands._plan_profile import (
    add_profile_arguments,
    command_line,
    profile_request,
    write_plan_profiles,
    written_text,
)
from meshdeck.core.cluster import (
    INTRA_NODE_LINKS,
    ClusterSpec,
    default_inter_node_bytes_per_s,
    default_intra_node_link,
)
from meshdeck.core.errors import InputError
from meshdeck.core.gpu_spec import resolve_gpu
from meshdeck.core.kv_cache import KV_CACHE_DTYPES
from meshdeck.core.plan_request import GOALS, PlanRequest, TrainingSettings, parse_vllm_version
from meshdeck.core.plan_text import render_plan, render_training
from meshdeck.core.planner import PlanResult
from meshdeck.core.serving import DEFAULT_INPUT_TOKENS, DEFAULT_OUTPUT_TOKENS, Workload
from meshdeck.core.units import GBIT
from meshdeck.core.vllm_releases import NEWEST_MODELLED, modelled_ranges, release_text
from meshdeck.core.weights import WEIGHTS_DTYPES
from meshdeck.services.catalog import bundled_model_names, load_gpu_catalog, load_model, load_topology
from meshdeck.services.cluster import cluster_from_inventories
from meshdeck.services.cpu_plan import CpuPlanRequest, plan_on_cpu, render_cpu_plan
from meshdeck.services.planning import plan_with_speed

BOOLEAN_WORDS = {
    "on": True,
    "true": True,
    "yes": True,
    "1": True,
    "off": False,
    "false": False,
    "no": False,
    "0": False,
}


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="rank DP/TP/PP/EP layouts of DeepSeek on a cluster (memory, KV cache, traffic, est. speed)",
        description="Plan DeepSeek V3/V3.2 on your GPUs: per-GPU weights, vLLM's reserve, KV tokens, traffic per "
        "token, an estimated decode speed, warnings and the vllm serve flags for every layout.",
    )
    add = parser.add_argument
    add(
        "--model",
        default="deepseek-v3.2",
        help=f"{' | '.join(bundled_model_names())} | PATH to config.json or checkpoint dir",
    )
    add(
        "--gpu",
        help=f"{' | '.join(gpu.name for gpu in load_gpu_catalog())} (resources/gpus.json) or a memory size like 80GB",
    )
    add("--nodes", default="1", help="number of nodes (default 1)")
    add("--gpus-per-node", help="GPUs per node (default: the --topology's count, else 8)")
    add("--gpu-memory-utilization", default="0.9", help="vLLM's fraction of GPU memory (default 0.9)")
    add("--max-model-len", help="context length per request (default: the model's, 163840)")
    add(
        "--kv-cache-dtype",
        default="auto",
        help=f"{' | '.join(KV_CACHE_DTYPES)} (default auto = bf16 latent; fp8_ds_mla: V3.2 only; "
        "nvfp4_ds_mla: V3.2 on Blackwell only)",
    )
    add("--weights-dtype", help=f"{' | '.join(WEIGHTS_DTYPES)} (default: as the checkpoint ships)")
    add("--engine", default="vllm", help="vllm | torch")
    add("--mode", default="serve", help="serve | train (train needs --engine torch)")
    add("--goal", default="throughput", help=f"{' | '.join(GOALS)} (default throughput)")
    add(
        "--max-num-seqs",
        help="vLLM --max-num-seqs (default: vLLM's own, 1024 on GPUs of 70 GiB or more except A100, else 256; "
        "only emitted when set)",
    )
    add(
        "--max-num-batched-tokens",
        help="vLLM --max-num-batched-tokens (default: vLLM's own, 8192 or 2048 by the same rule)",
    )
    add(
        "--mm-encoder-tp-mode",
        default="weights",
        help="weights | data: a multimodal model's vision tower split over TP (vLLM's default) or whole on every GPU",
    )
    add("--mtp", action="store_true", help="MTP speculative decoding (loads the MTP layer, adds its KV)")
    add("--mtp-tokens", default="3", help="speculative tokens with --mtp (default 3)")
    add(
        "--intra-node-link",
        default=None,
        help=f"{' | '.join(INTRA_NODE_LINKS)} (default: nvlink if the GPU has it, xgmi on AMD Instinct "
        "(Infinity Fabric), else pcie)",
    )
    add(
        "--inter-node-gbps",
        help="network bandwidth per node, Gbit/s one direction (default 400 per GPU on NVLink and Infinity Fabric "
        "boards)",
    )
    add("--topology", help="`nvidia-smi topo -m` output or an agent inventory JSON of one node")
    add("--context-tokens", help="context length the decode estimate assumes (default min(max-model-len, 4096))")
    add("--isl", help=f"serving workload: input tokens per request (default {DEFAULT_INPUT_TOKENS})")
    add("--osl", help=f"serving workload: output tokens per request (default {DEFAULT_OUTPUT_TOKENS})")
    add(
        "--concurrency",
        help="requests in flight across the whole deployment (a DP8 layout holds C/8 per rank; default: as many "
        "as each layout holds)",
    )
    add("--ttft-ms", help="SLA: time-to-first-token target; ranks the layouts that meet it first")
    add("--tpot-ms", help="SLA: time-per-output-token target (1000 / tokens per second per user)")
    add(
        "--speed",
        default="kernels",
        help="kernels | roofline: TTFT / TPOT from measured kernel tables (aiconfigurator-core, where they reach "
        "this GPU; else the roofline, said so) or the roofline estimate only (default kernels)",
    )
    add(
        "--disaggregated",
        action="store_true",
        help="also plan prefill/decode-disaggregated pools, rate-matched, against the best aggregated layout; "
        "--profile-out then writes the chosen one (--disaggregated-rank) as one profile with both pools",
    )
    add(
        "--vllm-version",
        help=f"vLLM release whose memory accounting to follow, one of the modelled ranges {modelled_ranges()} "
        f"(CUDA graphs outside the KV budget before 0.20); others are refused "
        f"(default {release_text(NEWEST_MODELLED)}, the newest modelled)",
    )
    add("--tensor-parallel", help="only layouts with this TP")
    add("--pipeline-parallel", help="only layouts with this PP")
    add("--data-parallel", help="only layouts with this DP (per vLLM instance)")
    add("--expert-parallel", help="on | off: only layouts with / without expert parallel")
    add("--zero", default="1", help="train: ZeRO stage 0-3 (default 1)")
    add("--seq-len", default="4096", help="train: sequence length (default 4096)")
    add("--micro-batch-size", default="1", help="train: sequences per micro-batch (default 1)")
    add("--micro-batches", default="8", help="train: micro-batches per optimizer step per pipeline (default 8)")
    add("--activation-checkpointing", default="on", help="train: on | off (default on)")
    add(
        "--cpu",
        action="store_true",
        help="plan one engine on vLLM's CPU build (0.32) instead of GPUs: the KV cache it sizes from "
        "--kv-cache-space-gib (V3, V3.2 and V4 models; a model directory or a bundled name)",
    )
    add("--kv-cache-space-gib", help="with --cpu: each worker's KV budget, as VLLM_CPU_KVCACHE_SPACE=G gives it")
    add("--top", help="show the first K layouts (default 10; --json: all)")
    add("--all", action="store_true", help="also list layouts that do not fit or that vLLM would refuse")
    add("--json", action="store_true", help="print one JSON object; layouts in rank order")
    add_profile_arguments(parser)
    parser.set_defaults(func=lambda args: run(args, parser))


def _int(value: str | None, flag: str, *, minimum: int = 1) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise InputError(flag, f"must be an integer, got {value!r}") from None
    if number < minimum:
        raise InputError(flag, f"must be at least {minimum}, got {number}")
    return number


def _float(value: str, flag: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise InputError(flag, f"must be a number, got {value!r}") from None


def _choice(value: str, flag: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise InputError(flag, f"{value!r}; allowed: {', '.join(allowed)}")
    return value


def _bool(value: str | None, flag: str) -> bool | None:
    if value is None:
        return None
    key = value.strip().lower()
    if key not in BOOLEAN_WORDS:
        raise InputError(flag, f"{value!r}; allowed: on, off")
    return BOOLEAN_WORDS[key]


def _cluster(args: argparse.Namespace) -> ClusterSpec:
    """From an agent inventory (`--topology INVENTORY.json`: services.cluster, as the console plans it,
    with flags overriding what the node reported), else from flags and an optional `nvidia-smi topo -m`."""
    catalog = load_gpu_catalog()
    topology = inventory = None
    if args.topology:
        topology, inventory = load_topology(args.topology)
    given_gpu = resolve_gpu(args.gpu, catalog) if args.gpu else None
    nodes = _int(args.nodes, "--nodes") or 1
    if args.intra_node_link is not None:
        _choice(args.intra_node_link, "--intra-node-link", INTRA_NODE_LINKS)
    inter_node = None
    if args.inter_node_gbps is not None:
        gbps = _float(args.inter_node_gbps, "--inter-node-gbps")
        if not gbps > 0:
            raise InputError("--inter-node-gbps", f"must be positive, got {args.inter_node_gbps}")
        inter_node = gbps * GBIT
    if inventory is not None:
        # the one node the file describes, as the console plans a detected host; --nodes such nodes
        cluster = cluster_from_inventories(
            {args.topology: inventory}, [args.topology], catalog, gpu=given_gpu, field="--topology"
        ).cluster
        overrides: dict[str, Any] = {"nodes": nodes}
        if args.gpus_per_node is not None:
            overrides["gpus_per_node"] = _int(args.gpus_per_node, "--gpus-per-node")
        if args.intra_node_link is not None:
            overrides["intra_node_link"] = args.intra_node_link
        if inter_node is not None:
            overrides.update(inter_node_bytes_per_s=inter_node, inter_node_assumed=False)
        return replace(cluster, **overrides)
    if given_gpu is None:
        raise InputError(
            "--gpu", f"required; allowed: {', '.join(g.name for g in catalog)}, or a memory size like 80GB"
        )
    gpus_per_node = _int(args.gpus_per_node, "--gpus-per-node") or (topology.gpu_count if topology else 8)
    link = args.intra_node_link or default_intra_node_link(given_gpu)
    return ClusterSpec(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        gpu=given_gpu,
        intra_node_link=link,
        inter_node_bytes_per_s=inter_node or default_inter_node_bytes_per_s(gpus_per_node, link),
        inter_node_assumed=inter_node is None,
        topology=topology,
    )


SPEED_CHOICES = ("kernels", "roofline")


def _workload(args: argparse.Namespace) -> Workload:
    given = [args.isl, args.osl, args.concurrency, args.ttft_ms, args.tpot_ms]
    return Workload(
        input_tokens=_int(args.isl, "--isl") or DEFAULT_INPUT_TOKENS,
        output_tokens=_int(args.osl, "--osl") or DEFAULT_OUTPUT_TOKENS,
        concurrency=_int(args.concurrency, "--concurrency"),
        ttft_ms=None if args.ttft_ms is None else _float(args.ttft_ms, "--ttft-ms"),
        tpot_ms=None if args.tpot_ms is None else _float(args.tpot_ms, "--tpot-ms"),
        stated=any(value is not None for value in given),
    )


def build_request(args: argparse.Namespace) -> PlanRequest:
    model = load_model(args.model)
    cluster = _cluster(args)
    training = None
    if args.mode == "train":
        training = TrainingSettings(
            zero_stage=_int(args.zero, "--zero", minimum=0) or 0,
            seq_len=_int(args.seq_len, "--seq-len") or 4096,
            micro_batch_size=_int(args.micro_batch_size, "--micro-batch-size") or 1,
            micro_batches=_int(args.micro_batches, "--micro-batches") or 1,
            activation_checkpointing=bool(_bool(args.activation_checkpointing, "--activation-checkpointing")),
        )
    return PlanRequest(
        model=model,
        mode=args.mode,
        training=training,
        cluster=cluster,
        engine=args.engine,
        weights_dtype=args.weights_dtype,
        kv_cache_dtype=args.kv_cache_dtype,
        max_model_len=_int(args.max_model_len, "--max-model-len"),
        gpu_memory_utilization=_float(args.gpu_memory_utilization, "--gpu-memory-utilization"),
        max_num_seqs=_int(args.max_num_seqs, "--max-num-seqs"),
        max_num_batched_tokens=_int(args.max_num_batched_tokens, "--max-num-batched-tokens"),
        mtp=bool(args.mtp),
        mm_encoder_tp_mode=args.mm_encoder_tp_mode,
        mtp_speculative_tokens=_int(args.mtp_tokens, "--mtp-tokens") or 3,
        goal=args.goal,
        context_tokens=_int(args.context_tokens, "--context-tokens"),
        vllm_version=NEWEST_MODELLED if args.vllm_version is None else parse_vllm_version(args.vllm_version),
        vllm_version_why="the newest modelled" if args.vllm_version is None else "as --vllm-version asks",
        tensor_parallel=_int(args.tensor_parallel, "--tensor-parallel"),
        pipeline_parallel=_int(args.pipeline_parallel, "--pipeline-parallel"),
        data_parallel=_int(args.data_parallel, "--data-parallel"),
        expert_parallel=_bool(args.expert_parallel, "--expert-parallel"),
        workload=_workload(args),
        disaggregated=bool(args.disaggregated),
    )


_GPU_ONLY_FLAGS = (
    ("gpu", "--gpu"),
    ("gpus_per_node", "--gpus-per-node"),
    ("topology", "--topology"),
    ("data_parallel", "--data-parallel"),
    ("expert_parallel", "--expert-parallel"),
    ("intra_node_link", "--intra-node-link"),
    ("inter_node_gbps", "--inter-node-gbps"),
    ("weights_dtype", "--weights-dtype"),
    ("vllm_version", "--vllm-version"),
)


def _run_cpu(args: argparse.Namespace) -> int:
    """`plan --cpu`: one engine on vLLM's CPU build, its KV cache from an explicit budget (services.cpu_plan)."""
    for attribute, flag in _GPU_ONLY_FLAGS:
        if getattr(args, attribute, None) is not None:
            raise InputError(flag, "plans GPUs; --cpu plans vLLM's CPU build (leave it out)")
    for attribute, flag in (("disaggregated", "--disaggregated"), ("mtp", "--mtp"), ("all", "--all")):
        if getattr(args, attribute, False):
            raise InputError(flag, "is not planned with --cpu")
    if args.nodes != "1" or args.mode != "serve" or args.engine != "vllm" or args.profile_out:
        raise InputError("--cpu", "plans one vLLM engine on this CPU build: one node, --mode serve, no --profile-out")
    if args.kv_cache_space_gib is None:
        raise InputError("--kv-cache-space-gib", "is needed with --cpu: the KV budget each worker gets (GiB)")
    request = CpuPlanRequest(
        model=args.model,
        kv_cache_space_gib=_int(args.kv_cache_space_gib, "--kv-cache-space-gib") or 1,
        max_model_len=_int(args.max_model_len, "--max-model-len"),
        tensor_parallel=_int(args.tensor_parallel, "--tensor-parallel") or 1,
        pipeline_parallel=_int(args.pipeline_parallel, "--pipeline-parallel") or 1,
        kv_cache_dtype=args.kv_cache_dtype,
    )
    payload = plan_on_cpu(request)
    if args.json:
        json.dump(payload, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    sys.stdout.write(render_cpu_plan(payload))
    return 0


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.cpu:
        return _run_cpu(args)
    elif args.kv_cache_space_gib is not None:
        raise InputError("--kv-cache-space-gib", "is the CPU build's KV budget: use it with --cpu")
    top = _int(args.top, "--top")
    wanted = profile_request(args)
    request = build_request(args)
    result: PlanResult = plan_with_speed(request, _choice(args.speed, "--speed", SPEED_CHOICES))
    written = [] if wanted is None else write_plan_profiles(wanted, result, args.model, command_line(parser, args))
    if args.json:
        if result.training is not None:
            payload = result.training.as_dict(include_all=args.all, top=top)
        else:
            payload = result.as_dict(include_all=args.all, top=top)
        if wanted is not None:
            payload["profiles_written"] = written
        json.dump(payload, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if result.training is not None:
        sys.stdout.write(render_training(result, top=top or 10, include_all=args.all))
    else:
        sys.stdout.write(render_plan(result, top=top or 10, include_all=args.all))
    if written:
        sys.stdout.write(written_text(written))
    return 0
