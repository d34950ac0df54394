"""The processes of a prefill/decode-disaggregated vLLM deployment: each pool's engines, then the router.

A disaggregated profile (`disaggregated:` in profile.py) has a prefill pool and a decode pool. Each worker of
a pool is one vLLM engine of the pool's layout, started exactly as an aggregated deployment of that layout on
the worker's hosts would be (vllm_launch.build_vllm_plan: single node, multi-node mp, DP across nodes, Ray),
plus what disaggregation needs, as vLLM's NixlConnector docs and llm-d's wide-EP guides launch it:

- `--kv-transfer-config {"kv_connector":"NixlConnector","kv_role":"kv_producer"|"kv_consumer",
  "kv_buffer_device":"cuda"|"cpu"}` (kv_both is deprecated for NixlConnector since vLLM 0.20);
- `VLLM_NIXL_SIDE_CHANNEL_HOST` = the node's address and `VLLM_NIXL_SIDE_CHANNEL_PORT` = the pool's base port
  (NIXL's handshake listens on base + the engine's data-parallel index: vllm nixl/base_scheduler.py), so the
  decode engines reach prefill's over the network (its default, localhost, works on one machine only);
- `UCX_NET_DEVICES` (and `NVSHMEM_HCA_LIST` with DeepEP kernels) = the HCA ports nearest the engine's GPUs,
  from the agents' GPU↔NIC topology: on a rail network each GPU's own rail, never the storage or
  management NIC UCX would otherwise also try;
- the pool's wide-EP settings: `--all2all-backend`, `--enable-eplb` with `--eplb-config
  {"num_redundant_experts":R}` (EPLB needs (routed experts + R) divisible by the EP size), `--enable-dbo`.

Engines of both pools start together (stages 0/1 as each engine's own launch orders its nodes); the router
(`vllm-router --vllm-pd-disaggregation --prefill URL … --decode URL …`) starts once every engine answers.
Command order is prefill, decode, router, so a stop (reverse order) stops the router, then decode, then
prefill. Pure: nothing is contacted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace

from meshdeck.core.errors import InputError
from meshdeck.launch.network import NodeNetwork, rdma_ports_for
from meshdeck.launch.plan import LaunchPlan, NodeCommand, PortUse, ReadyCheck, merge_env
from meshdeck.launch.profile import Disaggregated, Pool, Profile
from meshdeck.launch.vllm_launch import build_vllm_plan, is_deepseek_v32

DEFAULT_API_PORT = {"prefill": 8100, "decode": 8200}
DEFAULT_SIDE_CHANNEL_PORT = {"prefill": 5600, "decode": 5700}
KV_ROLE = {"prefill": "kv_producer", "decode": "kv_consumer"}
SIDE_CHANNEL_ENV = ("VLLM_NIXL_SIDE_CHANNEL_HOST", "VLLM_NIXL_SIDE_CHANNEL_PORT")
DEEPEP_BACKENDS = ("deepep_high_throughput", "deepep_low_latency", "deepep_v2")
ROUTER_COMMAND = "router"
ROUTER_WAITS_FOR_ENGINES_S = 1800
DEEPSEEK_V3_ROUTED_EXPERTS = 256  # DeepSeek V3 / V3.1 / V3.2 config.json n_routed_experts


def kv_transfer_config(pools: Disaggregated, role: str) -> str:
    """The `--kv-transfer-config` JSON of one pool's engines."""
    connector = pools.kv_connector
    config = {"kv_connector": connector.name, "kv_role": KV_ROLE[role], "kv_buffer_device": connector.buffer_device}
    return json.dumps(config, separators=(",", ":"))


def pool_flags(pools: Disaggregated, role: str, pool: Pool) -> list[str]:
    """What a pool's engines add to the layout's flags: the connector, then the pool's wide-EP settings."""
    flags = ["--kv-transfer-config", kv_transfer_config(pools, role)]
    wide = pool.wide_ep
    if wide is not None:
        if wide.all2all_backend is not None:
            flags += ["--all2all-backend", wide.all2all_backend]
        if wide.eplb:
            flags += [
                "--enable-eplb",
                "--eplb-config",
                json.dumps({"num_redundant_experts": wide.redundant_experts}, separators=(",", ":")),
            ]
        if wide.dbo:
            flags.append("--enable-dbo")
    return flags


def routed_experts_of(model: str) -> int | None:
    """The routed experts of a model the launcher can name without reading its config (DeepSeek V3.2)."""
    return DEEPSEEK_V3_ROUTED_EXPERTS if is_deepseek_v32(model) else None


def eplb_problems(pools: Disaggregated, routed_experts: int | None) -> list[tuple[str, str]]:
    """(field, problem) for each pool whose EPLB cannot spread its experts evenly: vLLM asserts
    (routed experts + redundant experts) % EP size == 0, EP size = TP × DP of one engine."""
    problems = []
    for role, pool in pools.pools():
        wide = pool.wide_ep
        if wide is None or not wide.eplb or routed_experts is None:
            continue
        ep_size = pool.layout.tensor_parallel * pool.layout.data_parallel
        total = routed_experts + wide.redundant_experts
        if not pool.layout.expert_parallel:
            problems.append((f"disaggregated.{role}.wide_ep.eplb", "EPLB balances expert parallelism: set "
                             f"disaggregated.{role}.layout.expert_parallel: true"))  # fmt: skip
        elif total % ep_size:
            fewest = -routed_experts % ep_size
            problems.append(
                (
                    f"disaggregated.{role}.wide_ep.redundant_experts",
                    f"{routed_experts} routed + {wide.redundant_experts} redundant experts = {total} do not divide "
                    f"evenly over EP {ep_size} (TP {pool.layout.tensor_parallel} × DP {pool.layout.data_parallel});"
                    f" use {fewest} (or {fewest} + a multiple of {ep_size})",
                )
            )
    return problems


def _workers(pool: Pool, gpus_per_node: int) -> list[tuple[list[str], tuple[int, ...], int]]:
    """Each worker's hosts, its GPUs on them, and its slot on its node (sub-node workers share a node)."""
    world = pool.layout.world_size
    if world >= gpus_per_node:
        span = world // gpus_per_node
        gpus = tuple(range(gpus_per_node))
        return [(pool.hosts[k * span : (k + 1) * span], gpus, 0) for k in range(pool.workers)]
    per_node = gpus_per_node // world
    return [
        ([pool.hosts[k // per_node]], tuple(range((k % per_node) * world, (k % per_node + 1) * world)), k % per_node)
        for k in range(pool.workers)
    ]


def _url(address: str, port: int) -> str:
    return f"http://[{address}]:{port}" if ":" in address else f"http://{address}:{port}"


def _connector_env(
    pools: Disaggregated, role: str, node: NodeNetwork, gpus: Sequence[int], side_port: int
) -> dict[str, str]:
    env = {"VLLM_NIXL_SIDE_CHANNEL_HOST": node.address, "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side_port)}
    if pools.kv_connector.transport == "rdma" and node.nics_known:
        ports = ",".join(p.nccl_name for p in rdma_ports_for(node, gpus))
        if ports:
            env["UCX_NET_DEVICES"] = ports
            wide = getattr(pools, role).wide_ep
            if wide is not None and wide.all2all_backend in DEEPEP_BACKENDS:
                env["NVSHMEM_HCA_LIST"] = ports
    return env


def build_disaggregated_plan(
    profile: Profile, nodes: Sequence[NodeNetwork], *, routed_experts: int | None = None
) -> LaunchPlan:
    """Every process of `profile`'s pools and its router (nodes in profile.hosts order). `routed_experts`
    (the model's, when the caller read its config) checks EPLB's divisibility; DeepSeek V3.2 is known here."""
    pools = profile.disaggregated
    if pools is None:
        raise InputError("disaggregated", "the profile has no prefill/decode pools")
    if [n.host for n in nodes] != list(profile.hosts):
        raise InputError("hosts", f"network facts for {[n.host for n in nodes]} do not match {profile.hosts}")
    experts = routed_experts if routed_experts is not None else routed_experts_of(profile.model)
    if problems := eplb_problems(pools, experts):
        raise InputError(*problems[0])
    by_host = {node.host: node for node in nodes}
    commands: list[NodeCommand] = []
    ports: list[PortUse] = []
    warnings: list[str] = []
    urls: dict[str, list[str]] = {"prefill": [], "decode": []}
    engines: list[str] = []  # each engine's name, the prefix of its commands'
    if experts is None and any(p.wide_ep is not None and p.wide_ep.eplb for _, p in pools.pools()):
        warnings.append("EPLB's divisibility was not checked: the model's routed-expert count is not known here")
    for role, pool in pools.pools():
        api_base = pool.port or DEFAULT_API_PORT[role]
        side_base = pool.side_channel_port or DEFAULT_SIDE_CHANNEL_PORT[role]
        flags = pool_flags(pools, role, pool)
        for index, (hosts, gpus, slot) in enumerate(_workers(pool, profile.gpus_per_node)):
            name = f"{role}{index}"
            api_port = api_base + slot
            side_port = side_base + slot * pool.layout.data_parallel
            vllm = profile.vllm.model_copy(
                update={"port": api_port, "extra_args": [*flags, *profile.vllm.extra_args, *pool.extra_args]}
            )
            engine = profile.model_copy(
                update={
                    "hosts": hosts,
                    "gpus_per_node": min(pool.layout.world_size, profile.gpus_per_node),
                    "layout": pool.layout,
                    "vllm": vllm,
                    "disaggregated": None,
                }
            )
            plan = build_vllm_plan(engine, [by_host[h] for h in hosts])
            # NIXL's side channel listens where an engine core runs: one per DP rank, DP ranks spread over nodes
            dp_local = pool.layout.data_parallel // len(hosts) if pool.layout.data_parallel >= len(hosts) else 0
            for command in plan.commands:
                node = by_host[command.host]
                node_side = side_port + command.node_rank * dp_local if dp_local else side_port
                env = {**_connector_env(pools, role, node, gpus, node_side), **dict(command.env)}
                commands.append(
                    replace(
                        command,
                        name=f"{name}-{command.name}",
                        role=f"{role}-{command.role}",
                        env=tuple(sorted(env.items())),
                        gpus=gpus if command.gpus else (),
                    )
                )
                listens = dp_local or (1 if command.node_rank == 0 and not command.name.startswith("ray-") else 0)
                side_ports = range(node_side, node_side + listens)
                ports += [PortUse(command.host, p, f"{name} NIXL side channel", node.address) for p in side_ports]
            ports += [replace(use, purpose=f"{name} {use.purpose}", address=by_host[use.host].address)
                      for use in plan.ports]  # fmt: skip
            warnings += [f"{name}: {w}" for w in plan.warnings if f"{name}: {w}" not in warnings]
            urls[role].append(_url(by_host[hosts[0]].address, api_port))
            engines.append(name)
    router = pools.router
    router_node = by_host[router.host or pools.prefill.hosts[0]]
    argv = [router.executable, "--vllm-pd-disaggregation"]
    for url in urls["prefill"]:
        argv += ["--prefill", url]
    for url in urls["decode"]:
        argv += ["--decode", url]
    # the router waits for every engine's /health itself before it serves (its own startup check)
    argv += ["--kv-connector", "nixl", "--worker-startup-timeout-secs", str(ROUTER_WAITS_FOR_ENGINES_S)]
    argv += ["--host", "0.0.0.0", "--port", str(router.port)]
    argv += ["--prometheus-port", str(router.prometheus_port)]
    if router.policy is not None:
        argv += ["--policy", router.policy]
    argv += router.extra_args
    router_ready = (ReadyCheck("tcp", port=router.port, timeout_s=300.0),)
    commands.append(
        NodeCommand(
            host=router_node.host,
            node_rank=0,
            name=ROUTER_COMMAND,
            role="router",
            stage=max(c.stage for c in commands) + 1,
            argv=tuple(argv),
            env=merge_env(profile=profile.env),
            ready=router_ready,
            metrics_url=f"http://127.0.0.1:{router.prometheus_port}/metrics",
        )
    )
    ports += [
        PortUse(router_node.host, router.port, "router API", router_node.address),
        PortUse(router_node.host, router.prometheus_port, "router metrics", router_node.address),
    ]
    return LaunchPlan(
        name=profile.name,
        engine="vllm",
        model=profile.model,
        head_host=router_node.host,
        head_address=router_node.address,
        commands=tuple(commands),
        ports=tuple(ports),
        layout_class="disaggregated",
        serving_url=f"{_url(router_node.address, router.port)}/v1",
        serving_command=ROUTER_COMMAND,
        serving_ready=router_ready,
        # an engine over several nodes cannot restart one node's part alone (its peers hang in a collective): such a
        # plan restarts as a whole, as a multi-node aggregated one does; single-node engines and the router restart
        # alone, by their agents
        restart_as_whole=any(len({c.host for c in commands if c.name.startswith(f"{w}-")}) > 1 for w in engines),
        warnings=tuple(warnings),
        layout=disaggregated_summary(profile, pools),
    )


def disaggregated_summary(profile: Profile, pools: Disaggregated) -> Mapping[str, int | bool]:
    """The plan's `layout`: each pool's sizes, flat (`prefill_tensor_parallel`, `decode_workers`, …)."""
    summary: dict[str, int | bool] = {"nodes": len(profile.hosts), "gpus_per_node": profile.gpus_per_node}
    for role, pool in pools.pools():
        layout = pool.layout
        summary |= {
            f"{role}_workers": pool.workers,
            f"{role}_tensor_parallel": layout.tensor_parallel,
            f"{role}_pipeline_parallel": layout.pipeline_parallel,
            f"{role}_data_parallel": layout.data_parallel,
            f"{role}_expert_parallel": layout.expert_parallel,
        }
    return summary
