"""From a profile and the connected agents to a LaunchPlan: node addresses and NICs, and the planner's
prediction for the chosen layout (what the measured startup numbers are compared against).

    prepared = prepare_launch(profile, fleet, addresses={"gpu-a": "10.0.0.1", ...}, run_id=...)
    prepared.plan, prepared.inventories, prepared.simulated

Addresses: the address other nodes reach a host at — the host part of its SSH target, or 127.0.0.1
for agents on this machine. The plan is the same for simulated agents (`--simulate`, the demo): they
stand in for vLLM by themselves, from its real argv; `simulated` only labels the launch. A mix of
simulated and real agents is refused (a simulated node cannot join a real NCCL group). For a
multi-node launch every node's agent is asked which interface it reaches the head by (`checks.route`),
which becomes its NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from meshdeck_agent.wire_inventory import Inventory

from meshdeck.core.cluster import ClusterSpec
from meshdeck.core.errors import InputError
from meshdeck.core.host_address import check_host_address
from meshdeck.core.plan_request import PlanRequest, resolve
from meshdeck.core.planner import plan as plan_layouts
from meshdeck.core.vllm_releases import Release, cudagraph_estimate_from_env
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.network import (
    HeadRoute,
    NodeNetwork,
    head_route_from_answer,
    node_network_from_inventory,
)
from meshdeck.launch.plan import LaunchPlan, PlannedStartup
from meshdeck.launch.profile import Profile
from meshdeck.launch.vllm_launch import is_deepseek_v4, is_deepseek_v32
from meshdeck.remote.errors import RpcError, RpcTimeout
from meshdeck.services.catalog import load_model
from meshdeck.services.cluster import cluster_from_inventories
from meshdeck.services.cpu_plan import cpu_planned_startup
from meshdeck.services.inventory import fetch_inventory
from meshdeck.services.preflight import versions_python
from meshdeck.services.vllm_release import release_from_reports, vllm_release_for_hosts

log = logging.getLogger(__name__)
LOCAL_ADDRESS = "127.0.0.1"
ROUTE_TIMEOUT_S = 30.0  # resolving a head given by name may wait on the node's DNS
VERSIONS_TIMEOUT_S = 60.0  # the agent starts the profile's python to read its package metadata
SIMULATED_VLLM_NOTE = (
    "these hosts simulate their GPUs (agents started with --simulate): each runs its vLLM stand-in for this "
    "argv, and the startup numbers it prints are the agent's estimate of what vLLM would measure, not vLLM's"
)
_V3 = re.compile(r"deepseek-(v3(-0324)?|r1(-0528)?)$", re.IGNORECASE)


@dataclass(frozen=True)
class PreparedLaunch:
    plan: LaunchPlan
    inventories: Mapping[str, Inventory]
    simulated: bool
    planned_note: str = ""  # why there is no prediction, when there is none


def address_of_target(target: str) -> str:
    """`user@10.0.0.5` -> `10.0.0.5`; `[fe80::1]` -> `fe80::1`."""
    host = target.rsplit("@", 1)[-1]
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def bundled_model_for(model: str) -> str | None:
    """The bundled model card a profile's model id or path is (None when it names no known model)."""
    if is_deepseek_v32(model):
        return "deepseek-v3.2"
    if is_deepseek_v4(model):
        # DeepSeek's own checkpoints only (deepseek-ai/DeepSeek-V4-Pro, /models/DeepSeek-V4-Flash): a requant
        # (sgl-project/DeepSeek-V4-Flash-FP8 has FP8 experts) gets no prediction rather than the wrong model's
        base = model.rstrip("/").rsplit("/", 1)[-1].lower()
        return base if base in ("deepseek-v4-pro", "deepseek-v4-flash") else None
    if _V3.search(model.rstrip("/").rsplit("/", 1)[-1]):
        return "deepseek-v3"
    return None


def _plan_request(profile: Profile, cluster: ClusterSpec, vllm_version: Release) -> PlanRequest:
    """The planner request of a vLLM profile: its settings, layout and the env it launches with."""
    name = bundled_model_for(profile.model)
    assert name is not None  # planned_startup checked it
    layout = profile.layout
    return PlanRequest(
        model=load_model(name),
        cluster=cluster,
        kv_cache_dtype=profile.vllm.kv_cache_dtype,
        max_model_len=profile.vllm.max_model_len,
        gpu_memory_utilization=profile.vllm.gpu_memory_utilization,
        max_num_seqs=profile.vllm.max_num_seqs,
        mtp=profile.vllm.speculative_mtp,
        tensor_parallel=layout.tensor_parallel,
        pipeline_parallel=layout.pipeline_parallel,
        data_parallel=layout.data_parallel,
        expert_parallel=layout.expert_parallel,
        vllm_version=vllm_version,
        cudagraph_memory_estimate=cudagraph_estimate_from_env(profile.env),
    )


def planned_startup(
    profile: Profile, inventories: Mapping[str, Inventory], vllm_version: Release | None = None
) -> tuple[PlannedStartup | None, str]:
    """The planner's numbers for exactly this profile's layout on its hosts, or (None, why).

    Planned on `cluster_from_inventories` of the profile's hosts: the cluster the console's planner
    shows for the same hosts, so planned-vs-measured compares against the row the user chose; with the
    accounting of `vllm_version` (the release the hosts run) or, without one, the release the console
    planner would use for these hosts (services/vllm_release.py)."""
    if profile.engine != "vllm":
        return None, ""
    if not any(inventories[host].gpus for host in profile.hosts if host in inventories):
        return cpu_planned_startup(profile)  # vLLM's CPU build: the budget is set, not profiled
    name = bundled_model_for(profile.model)
    if name is None:
        return None, f"{profile.model!r} is not a model meshdeck has a card for; no prediction to compare"
    try:
        cluster = cluster_from_inventories(inventories, profile.hosts).cluster
    except InputError as exc:
        return None, f"no prediction for these hosts: {exc.problem}"
    layout = profile.layout
    try:
        request = _plan_request(profile, cluster, vllm_version or vllm_release_for_hosts(inventories, profile.hosts))
    except InputError as exc:
        return None, f"no prediction for this profile: {exc}"
    try:
        layouts = plan_layouts(request).layouts
    except InputError as exc:
        return None, f"the planner has no such layout on these hosts: {exc.problem}"
    chosen = [
        lp
        for lp in layouts
        if (lp.tensor_parallel, lp.pipeline_parallel, lp.data_parallel, lp.expert_parallel)
        == (layout.tensor_parallel, layout.pipeline_parallel, layout.data_parallel, layout.expert_parallel)
    ]
    if not chosen or not chosen[0].fits:
        reason = chosen[0].reason if chosen else "the planner has no such layout"
        return None, f"the planner says this layout does not fit: {reason}"
    best = chosen[0]
    return (
        PlannedStartup(
            gpu_memory_bytes=max(best.usable_bytes_per_gpu, best.weights_bytes_per_gpu + best.kv_cache_bytes_per_gpu),
            weights_bytes=best.weights_bytes_per_gpu,
            kv_cache_bytes=best.kv_cache_bytes_per_gpu,
            kv_tokens=best.kv_tokens_per_replica,
            max_concurrency=best.max_concurrency,
            max_model_len=resolve(request).max_model_len,
        ),
        "",
    )


def prepare_launch(
    profile: Profile,
    fleet: Any,
    *,
    addresses: Mapping[str, str],
    run_id: str,
    inventories: Mapping[str, Inventory] | None = None,
) -> PreparedLaunch:
    """Ask each host for its inventory (unless given), then build the plan with real network facts."""
    found: dict[str, Inventory] = dict(inventories or {})
    for host in profile.hosts:
        if host not in found:
            found[host] = fetch_inventory(fleet, host)
    simulated = {host: inv.simulated for host, inv in found.items() if host in profile.hosts}
    if len(set(simulated.values())) > 1:
        fake = ", ".join(h for h, s in simulated.items() if s)
        raise InputError("hosts", f"{fake} run simulated GPUs and the others real ones; a launch needs one kind")
    is_simulated = any(simulated.values())
    for host in profile.hosts:
        if host not in addresses:
            raise InputError("hosts", f"no address known for {host!r}; add it with `meshdeck hosts add`")
    head_address = check_host_address(addresses[profile.hosts[0]], f"host {profile.hosts[0]}: address")
    routes = head_routes(fleet, profile.hosts, head_address) if len(profile.hosts) > 1 else {}
    nodes = [
        node_network_from_inventory(host, addresses[host], found[host], head_route=routes.get(host))
        for host in profile.hosts
    ]
    release, release_note = (None, "") if is_simulated else hosts_vllm_release(fleet, profile)
    planned, note = planned_startup(profile, found, release)
    if planned is not None and release_note:
        note = release_note
    plan = build_launch_plan(profile, nodes, run_id=run_id, planned=planned)
    return PreparedLaunch(plan, found, is_simulated, note)


def hosts_vllm_release(fleet: Any, profile: Profile) -> tuple[Release | None, str]:
    """The vLLM release the profile's hosts report (`checks.versions`), or (None, "") for a torch job, or
    the newest modelled and why when they cannot say or disagree (services/vllm_release.py)."""
    if profile.engine != "vllm":
        return None, ""
    params = {"python": versions_python(profile)}
    reports: dict[str, Any] = {}
    for host in profile.hosts:
        try:
            reports[host] = fleet.call(host, "checks.versions", params, timeout=VERSIONS_TIMEOUT_S)
        except (RpcError, RpcTimeout) as exc:
            log.info("%s: no checks.versions answer (%s); planning with the newest modelled vLLM", host, exc)
            reports[host] = None
    return release_from_reports(reports)


def head_routes(fleet: Any, hosts: Sequence[str], head_address: str) -> dict[str, HeadRoute]:
    """Ask each node's agent which interface and source address it reaches the head by (`checks.route`).

    An agent that cannot answer (one from before checks.route, or one that timed out) is left out: the
    launch plan then matches the head's address against that node's inventory subnets instead."""
    routes: dict[str, HeadRoute] = {}
    for host in hosts:
        try:
            answer = fleet.call(host, "checks.route", {"host": head_address}, timeout=ROUTE_TIMEOUT_S)
        except (RpcError, RpcTimeout) as exc:
            log.info("%s: no route answer toward the head %s (%s); matching inventory subnets", host, head_address, exc)
            continue
        routes[host] = head_route_from_answer(host, head_address, answer)
    return routes


def node_for_dry_run(host: str, address: str | None) -> NodeNetwork:
    """A node known only by name (no agent asked): its address, no NICs."""
    return NodeNetwork(host, address or host, nics_known=False)
