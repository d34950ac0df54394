"""A planned layout as deployment profiles: what the console's planner saves and `meshdeck plan --profile-out` writes.

One function turns a ranked layout into launch.profile mappings and validates them (the same checks a
profile file gets), so a profile made from the planner always launches the layout that was planned,
whichever front end made it. A layout of several independent instances ("N×") becomes one profile per
instance (`<name>-1`, `<name>-2`, …, files `<stem>-1.yaml`, …): N deployments with N endpoints, since
meshdeck launches no router in front of them — `instances_notice` says so in both front ends and names
the plan's best single-instance layout on the same GPUs, with its rank. Files are written atomically.

Where the plan warns about a setting and says what avoids the failure, the saved profile takes that
setting (`plan_mitigations`): vLLM's default max_num_seqs of 1024 with V3.2 on a CUDA GPU becomes
`max_num_seqs: 256` (core.rules' FlashMLA mla_combine warning). A value the operator set himself is kept
unless he asks for the mitigation (the console's dialog offers it; the CLI keeps what --max-num-seqs said).

A prefill/decode-disaggregated plan (core.disaggregated) becomes one profile with `disaggregated:` pools
(`disaggregated_profile`): each pool's worker shape, workers and whole hosts (prefill's first), the wide-EP
settings its planned flags have, NixlConnector and the router's defaults; one deployment behind one router.

A torch layout must name the script its ranks run: without one the profile would fall back to the
built-in tiny test model while its `model:` says DeepSeek, and the operator would launch a toy believing
it was the real thing. The training settings of a `--mode train` plan (ZeRO stage, micro-batches,
activation checkpointing) have no field in the profile format, so no training plan is saved here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from meshdeck.core.disaggregated import ALL2ALL_ENV, ALL2ALL_FLAG_FROM, DisaggregatedPlan, pool_wide_ep
from meshdeck.core.disaggregated import Pool as PlannedPool
from meshdeck.core.errors import InputError
from meshdeck.core.layout_plan import LayoutPlan
from meshdeck.core.planner import PlanResult
from meshdeck.core.rules import MLA_COMBINE_SAFE_MAX_SEQS
from meshdeck.core.vllm_releases import release_text
from meshdeck.launch.profile import Profile, dump_profile, profile_from_mapping
from meshdeck.launch.torch_launch import BUILTIN_WORKLOADS
from meshdeck.services.files import open_output, output_target, several_files_problem

BUNDLED_MODEL_IDS = {
    "deepseek-v3.2": "deepseek-ai/DeepSeek-V3.2",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "deepseek-r1": "deepseek-ai/DeepSeek-R1",
    "deepseek-v4-pro": "deepseek-ai/DeepSeek-V4-Pro",
    "deepseek-v4-flash": "deepseek-ai/DeepSeek-V4-Flash",
}
PROFILE_NAME_LIMIT = 60  # leaves room for an instance suffix inside the profile's 64 characters
SCRIPT_NEEDED = (
    "a torch layout needs the script each rank runs: a path on the servers, or "
    f"{' / '.join(BUILTIN_WORKLOADS)} (built-in test workloads)"
)


@dataclass(frozen=True)
class Mitigation:
    """A vLLM setting the plan's own warning (`code`) names as the way to avoid a failure."""

    code: str  # the warning's code (core.rules)
    setting: str  # the profile's `vllm:` key
    value: int
    text: str  # what it does and why, for the dialog, the profile's note and the CLI's output
    default: bool  # applied unless declined: False when the operator set the value himself


def plan_mitigations(layout: LayoutPlan, result: PlanResult) -> tuple[Mitigation, ...]:
    """The settings the saved profile takes because the plan warns without them (see the module's doc)."""
    request, resolved = result.request, result.settings
    if request.engine != "vllm" or "mla_combine_large_batch" not in layout.warning_codes:
        return ()
    origin = "--max-num-seqs" if resolved.max_num_seqs_from_user else "vLLM's default"
    return (
        Mitigation(
            "mla_combine_large_batch",
            "max_num_seqs",
            MLA_COMBINE_SAFE_MAX_SEQS,
            f"max_num_seqs {MLA_COMBINE_SAFE_MAX_SEQS} instead of {origin} {resolved.max_num_seqs}: V3.2 batches "
            f"above {MLA_COMBINE_SAFE_MAX_SEQS} can fail in FlashMLA's mla_combine (the plan's warning; its "
            f"estimates assumed {resolved.max_num_seqs})",
            default=not resolved.max_num_seqs_from_user,
        ),
    )


def default_mitigations(layout: LayoutPlan, result: PlanResult) -> tuple[Mitigation, ...]:
    """The mitigations a profile saved without asking takes (the CLI's --profile-out, the demo, the console's
    save when the dialog was not asked): those applied unless declined."""
    return tuple(m for m in plan_mitigations(layout, result) if m.default)


def single_instance_alternative(result: PlanResult, layout: LayoutPlan) -> tuple[int, LayoutPlan] | None:
    """For a layout of several instances: the plan's best-ranked layout that runs as ONE instance on the same
    number of GPUs (one deployment, one endpoint) and that vLLM can run, with its rank (1-based, the # column).
    None for a single-instance layout, or when no such layout fits."""
    if layout.instances == 1:
        return None
    for rank, candidate in enumerate(result.layouts, start=1):
        if (
            candidate.instances == 1
            and candidate.gpus == layout.gpus
            and candidate.fits
            and candidate.valid
            and candidate.supported
        ):
            return rank, candidate
    return None


def instances_notice(result: PlanResult, layout: LayoutPlan) -> str:
    """What saving a layout of several instances makes, and the practical way to one endpoint; "" for one
    instance. The same words in the console's dialog and `plan --profile-out`'s output."""
    n = layout.instances
    if n == 1:
        return ""
    engine = "`vllm serve`" if result.request.engine == "vllm" else "torchrun"
    suffixes = ", ".join(f"-{i}" for i in range(1, n + 1)) if n <= 3 else f"-1 … -{n}"
    text = (
        f"{layout.label()} is {n} independent instances of {layout.shape_label()}, one {engine} each on "
        f"{layout.gpus_per_instance} GPUs: saving it makes {n} profiles ({suffixes}), launched as {n} deployments "
        f"with {n} endpoints. meshdeck starts no router or load balancer to put them behind one address: put your "
        "own in front of them, or "
    )
    alternative = single_instance_alternative(result, layout)
    if alternative is None:
        return text + f"plan fewer GPUs: this plan ranks no single-instance layout on {layout.gpus} GPUs that fits."
    rank, other = alternative
    return text + f"save rank {rank}, {other.label()}, which spans the same {other.gpus} GPUs as one deployment."


def model_id_for(model: str) -> str:
    """What a profile should name: the Hugging Face id for a bundled card, else the path as given."""
    return BUNDLED_MODEL_IDS.get(model.strip().lower(), model)


def default_profile_name(result: PlanResult, layout: LayoutPlan) -> str:
    """`<model>-<layout label>` in lower case: `deepseek-v3.2-2x-tp1-dp8-ep` for "2× TP1·DP8·EP"; every run of
    characters a profile name cannot hold becomes one '-'."""
    return _as_name(f"{result.request.model.name}-{layout.label()}")


def _as_name(text: str) -> str:
    text = text.lower().replace("×", "x")
    return re.sub(r"[^a-z0-9._-]+", "-", text).strip("-._")[:PROFILE_NAME_LIMIT]


def profile_mappings(
    layout: LayoutPlan,
    result: PlanResult,
    node_names: Sequence[str],
    name: str,
    model: str,
    script: str | None = None,
    script_args: Sequence[str] = (),
    mitigations: Sequence[Mitigation] = (),
) -> list[dict[str, Any]]:
    """One profile mapping (launch.profile format) per instance of `layout`, on its nodes' hosts, with the
    vLLM settings of `mitigations` (plan_mitigations: those to apply).

    `script` (with `script_args`) is what every rank of a torch layout runs: a path on the servers or a
    built-in workload name (launch.torch_launch.BUILTIN_WORKLOADS). Raises InputError naming `script`
    when a torch layout has none or a vLLM layout has one, and naming `layout` when the layout packs
    several instances into one node: a profile has no field that pins GPUs, so those instances could
    not be launched side by side from profiles."""
    request = result.request
    torch_settings = _torch_settings(request.engine, script, script_args)
    placement = layout.placement
    if placement.instances > 1 and placement.gpus_per_instance < placement.gpus_per_node:
        alternative = single_instance_alternative(result, layout)
        instead = "" if alternative is None else f" (rank {alternative[0]}, {alternative[1].label()}, is one)"
        raise InputError(
            "layout",
            f"{layout.label()} runs {placement.instances_per_node} instances per node; a profile cannot pin GPUs, "
            f"so save a layout whose instances use whole nodes{instead}",
        )
    gpus_per_node = min(placement.gpus_per_instance, placement.gpus_per_node)
    mappings = []
    for instance in range(placement.instances):
        nodes = sorted({r.node for r in layout.rank_map if r.instance == instance})
        hosts = [host_name(node_names, n) for n in nodes]
        suffix = f"-{instance + 1}" if placement.instances > 1 else ""
        mapping: dict[str, Any] = {
            "name": f"{name}{suffix}",
            "model": model,
            "engine": request.engine,
            "hosts": hosts,
            "gpus_per_node": gpus_per_node,
            "layout": {
                "tensor_parallel": layout.tensor_parallel,
                "pipeline_parallel": layout.pipeline_parallel,
                "data_parallel": layout.data_parallel,
                "expert_parallel": layout.expert_parallel,
            },
        }
        if request.engine == "vllm":
            mapping["vllm"] = vllm_section(result, mitigations)
        if torch_settings is not None:
            mapping["torch"] = dict(torch_settings)
        mappings.append(mapping)
    return mappings


def host_name(node_names: Sequence[str], node: int) -> str:
    """The profile's host for the plan's `node` (0-based): the name given for it, else `node<N>`."""
    return node_names[node] if node < len(node_names) else f"node{node}"


def vllm_section(result: PlanResult, mitigations: Sequence[Mitigation] = ()) -> dict[str, Any]:
    """The profile's `vllm:` settings from the plan's request (and the `mitigations` to apply)."""
    request, settings = result.request, result.settings
    section: dict[str, Any] = {
        "max_model_len": settings.max_model_len,
        "gpu_memory_utilization": request.gpu_memory_utilization,
        "kv_cache_dtype": request.kv_cache_dtype,
        "max_num_seqs": settings.max_num_seqs_emitted,
        "speculative_mtp": request.mtp,
    }
    if request.mm_encoder_tp_mode != "weights":  # a profile has no field for it: the flag as vLLM takes it
        section["extra_args"] = ["--mm-encoder-tp-mode", request.mm_encoder_tp_mode]
    for mitigation in mitigations:
        section[mitigation.setting] = mitigation.value
    return section


def _torch_settings(engine: str, script: str | None, script_args: Sequence[str]) -> dict[str, Any] | None:
    """The profile's `torch:` section for a torch layout; None for vLLM, which runs no script."""
    if engine != "torch":
        if script is not None or script_args:
            raise InputError("script", f"only a torch layout runs a script; this layout is planned for {engine}")
        return None
    if script is None or not script.strip():
        raise InputError("script", SCRIPT_NEEDED)
    return {"script": script, "args": list(script_args)}


def profiles_from_layout(
    layout: LayoutPlan,
    result: PlanResult,
    node_names: Sequence[str],
    name: str,
    model: str,
    script: str | None = None,
    script_args: Sequence[str] = (),
    mitigations: Sequence[Mitigation] = (),
) -> list[Profile]:
    """Validated profiles (one per instance). Raises InputError naming the field."""
    mappings = profile_mappings(layout, result, node_names, name, model, script, script_args, mitigations)
    return [profile_from_mapping(m, source="profile") for m in mappings]


def profile_endpoint(profile: Profile) -> str:
    """Where a profile's deployment answers: its head host and vLLM's port, or a disaggregated profile's router
    ("" for torch, which serves nothing)."""
    pools = profile.disaggregated
    if pools is not None:
        return f"{pools.router.host or pools.prefill.hosts[0]} port {pools.router.port}"
    return f"{profile.hosts[0]} port {profile.vllm.port}" if profile.engine == "vllm" else ""


def saved_text(names: Sequence[str], profiles: Sequence[Profile] = ()) -> str:
    """ "Saved profile ds32" / "Saved 2 profiles: ds32-1 (demo-a port 8000), ds32-2 (demo-b port 8000)"."""
    endpoints = {profile.name: profile_endpoint(profile) for profile in profiles}
    listed = ", ".join(f"{name} ({endpoints[name]})" if endpoints.get(name) else name for name in names)
    if len(names) == 1:
        return f"Saved profile {listed}"
    return f"Saved {len(names)} profiles: {listed}"


def instance_paths(target: Path, count: int) -> list[Path]:
    """Where `count` profiles exported to `target` go: the file itself for one, `<stem>-N<suffix>` for several."""
    target = Path(target)
    if count == 1:
        return [target]
    return [target.with_name(f"{target.stem}-{index + 1}{target.suffix}") for index in range(count)]


def write_profiles(profiles: Sequence[Profile], target: Path, header: str = "", option: str = "path") -> list[Path]:
    """Each profile as YAML (after `header`, comment lines) at instance_paths(target), each as `-o` writes
    (services/files.py: a regular file atomically, a pipe or device directly); the paths. Raises
    InputError naming `option` when the target cannot take them (a device for several files)."""
    paths = instance_paths(target, len(profiles))
    first = output_target(str(target), option=option)
    problem = several_files_problem(first, len(profiles), paths)
    if problem is not None:
        raise InputError(option, problem)
    for profile, path in zip(profiles, paths, strict=True):
        with open_output(first if path == target else output_target(str(path), option=option)) as stream:
            stream.write(header + dump_profile(profile))
    return paths


# ------------------------------------------------------------------ prefill/decode-disaggregated plans


def pools_mitigations(plan: DisaggregatedPlan, result: PlanResult) -> tuple[Mitigation, ...]:
    """plan_mitigations of both pools' worker layouts, each once: the profile's `vllm:` is both pools'."""
    found: dict[str, Mitigation] = {}
    for pool in (plan.prefill, plan.decode):
        for mitigation in plan_mitigations(pool.layout, result):
            found.setdefault(mitigation.code, mitigation)
    return tuple(found.values())


def default_pools_mitigations(plan: DisaggregatedPlan, result: PlanResult) -> tuple[Mitigation, ...]:
    """The pools' mitigations a profile saved without asking takes (as default_mitigations)."""
    return tuple(m for m in pools_mitigations(plan, result) if m.default)


def default_disaggregated_name(result: PlanResult, plan: DisaggregatedPlan) -> str:
    """`deepseek-v3.2-pd-1x-tp1-dp8-3x-tp1-dp8-ep8` for "1× TP1·DP8 prefill + 3× TP1·DP8·EP8 decode"."""
    prefill, decode = plan.prefill, plan.decode
    pools = f"{prefill.workers}x-{prefill.shape.label()}-{decode.workers}x-{decode.shape.label()}"
    return _as_name(f"{result.request.model.name}-pd-{pools}")


def pool_nodes(pool: PlannedPool, gpus_per_node: int) -> int:
    """The nodes a pool's workers fill. A profile gives each pool whole hosts of its own, so a pool whose
    sub-node workers leave part of a node (the planner packs the other pool's workers there) is refused,
    naming the pool."""
    nodes, left = divmod(pool.gpus, gpus_per_node)
    if left:
        raise InputError(
            f"disaggregated.{pool.role}",
            f"{pool.workers}× {pool.shape.label()} takes {pool.gpus} GPUs, not whole nodes of {gpus_per_node}: the "
            "plan packs the other pool's workers into the rest of a node, but a profile gives each pool whole hosts "
            "of its own; choose a plan whose pools fill whole nodes",
        )
    return nodes


def disaggregated_profile_mapping(
    plan: DisaggregatedPlan,
    result: PlanResult,
    *,
    name: str,
    hosts: Sequence[str] | None,
    model: str,
    mitigations: Sequence[Mitigation] | None = None,
) -> dict[str, Any]:
    """A profile mapping (launch.profile format) with `disaggregated:` pools that are `plan`'s.

    Each pool's layout is its worker's shape (pipeline 1), its workers the plan's, its hosts the next whole
    nodes (prefill first, then decode) named from `hosts` in order, `node<N>` when None. A pool whose expert
    parallel crosses nodes carries the wide-EP settings its planned `vllm serve` flags have (core.disaggregated
    pool_wide_ep: DeepEP's kernels for its role, EPLB with the fewest redundant experts, DBO); the launcher
    turns them into the flags. The `vllm:` settings are the aggregated path's, with `mitigations` (None: the
    pools' defaults). KV moves over NixlConnector from GPU buffers, over TCP when a host the profile uses
    reported no RDMA port (the plan's own warning); the router keeps its defaults.
    Raises InputError naming the pool (`disaggregated.prefill`, …) or `hosts`."""
    request = result.request
    gpus_per_node = request.cluster.gpus_per_node
    names = tuple(hosts) if hosts is not None else ()
    listed: list[str] = []
    pools: dict[str, Any] = {}
    for pool in (plan.prefill, plan.decode):
        first = len(listed)
        pool_hosts = [host_name(names, node) for node in range(first, first + pool_nodes(pool, gpus_per_node))]
        listed += pool_hosts
        shape = pool.shape
        section: dict[str, Any] = {
            "hosts": pool_hosts,
            "layout": {
                "tensor_parallel": shape.tensor_parallel,
                "pipeline_parallel": shape.pipeline_parallel,
                "data_parallel": shape.data_parallel,
                "expert_parallel": shape.expert_parallel,
            },
            "workers": pool.workers,
        }
        wide = pool_wide_ep(shape, pool.role, request.model.n_routed_experts)
        if wide is not None:
            if request.vllm_version < ALL2ALL_FLAG_FROM:
                raise InputError(
                    f"disaggregated.{pool.role}.wide_ep",
                    f"the plan follows vLLM {release_text(request.vllm_version)}, which reads the all-to-all "
                    f"backend from {ALL2ALL_ENV} (one per process), but a profile's pools pass --all2all-backend "
                    f"(vLLM {release_text(ALL2ALL_FLAG_FROM)} and later): plan for a later release, or choose a "
                    "plan whose expert parallel stays inside a node",
                )
            section["wide_ep"] = {
                "all2all_backend": wide.all2all_backend,
                "eplb": wide.eplb,
                "redundant_experts": wide.redundant_experts,
                "dbo": wide.dbo,
            }
        pools[pool.role] = section
    if hosts is not None and len(listed) > len(names):
        raise InputError(
            "hosts",
            f"the pools take {len(listed)} nodes ({len(pools['prefill']['hosts'])} prefill, "
            f"{len(pools['decode']['hosts'])} decode) but {len(names)} host(s) are named; name one per node",
        )
    without_rdma = set(request.hosts_without_rdma) & set(listed)
    if mitigations is None:
        mitigations = default_pools_mitigations(plan, result)
    return {
        "name": name,
        "model": model,
        "engine": "vllm",
        "hosts": listed,
        "gpus_per_node": gpus_per_node,
        "vllm": vllm_section(result, mitigations),
        "disaggregated": {
            **pools,
            "kv_connector": {
                "name": "NixlConnector",
                "buffer_device": "cuda",  # the planner plans GPUs: GPUDirect RDMA from their memory
                "transport": "tcp" if without_rdma else "rdma",
            },
            "router": {},
        },
    }


def disaggregated_profile(
    plan: DisaggregatedPlan,
    result: PlanResult,
    *,
    name: str,
    hosts: Sequence[str] | None,
    model: str,
    mitigations: Sequence[Mitigation] | None = None,
) -> Profile:
    """The validated profile of disaggregated_profile_mapping. Raises InputError naming the field."""
    mapping = disaggregated_profile_mapping(plan, result, name=name, hosts=hosts, model=model, mitigations=mitigations)
    return profile_from_mapping(mapping, source="profile")
