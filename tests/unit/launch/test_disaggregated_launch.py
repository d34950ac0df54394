"""Disaggregated profiles (prefill pool, decode pool, KV connector, router) and the processes they launch."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest
from launch_builders import make_node
from meshdeck.core.errors import InputError
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.disaggregated_launch import build_disaggregated_plan, eplb_problems
from meshdeck.launch.network import NodeNetwork
from meshdeck.launch.plan import LaunchPlan
from meshdeck.launch.profile import dump_profile, load_profile, profile_from_mapping
from meshdeck.launch.vllm_flags import bad_choices, unknown_flags


def pd_profile(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "ds32-pd",
        "model": "deepseek-ai/DeepSeek-V3.2",
        "hosts": ["p1", "p2", "d1", "d2"],
        "gpus_per_node": 8,
        "vllm": {"max_model_len": 32768},
        "disaggregated": {
            "prefill": {
                "hosts": ["p1", "p2"],
                "layout": {"tensor_parallel": 8, "expert_parallel": True},
                "workers": 2,
                "wide_ep": {"all2all_backend": "deepep_high_throughput", "eplb": True, "dbo": True},
            },
            "decode": {
                "hosts": ["d1", "d2"],
                "layout": {"data_parallel": 16, "expert_parallel": True},
                "wide_ep": {"all2all_backend": "deepep_low_latency", "eplb": True, "redundant_experts": 16},
            },
        },
    }
    data.update(overrides)
    return data


def nodes_for(hosts: list[str], **kwargs: Any) -> list[NodeNetwork]:
    return [make_node(host, f"10.0.0.{index}", **kwargs) for index, host in enumerate(hosts, start=1)]


def plan_of(data: dict[str, Any], **node_kwargs: Any) -> LaunchPlan:
    profile = profile_from_mapping(data)
    return build_launch_plan(profile, nodes_for(profile.hosts, **node_kwargs), run_id="r1")


def test_the_profile_round_trips_and_an_aggregated_profile_exports_as_before() -> None:
    profile = profile_from_mapping(pd_profile())
    text = dump_profile(profile)
    assert load_profile(text) == profile
    assert "layout:" not in text.split("disaggregated:")[0]  # each pool has its layout; none at the top
    aggregated = profile_from_mapping({"name": "a", "model": "m", "hosts": ["x"], "gpus_per_node": 8,
                                       "layout": {"tensor_parallel": 8}})  # fmt: skip
    assert "disaggregated" not in dump_profile(aggregated)


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"hosts": ["d1", "d2", "p1", "p2"]}, "profile", "prefill pool's hosts then the decode pool's"),
        ({"layout": {"tensor_parallel": 8}}, "profile", "sets each pool's layout"),
        ({"engine": "torch"}, "profile", "set engine: vllm"),
    ],
)
def test_a_profile_whose_pools_do_not_fit_its_hosts_is_refused(change: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(InputError, match=words):
        profile_from_mapping(pd_profile(**change))


def test_workers_must_fill_the_pools_gpus_and_not_straddle_nodes() -> None:
    data = pd_profile()
    data["disaggregated"]["prefill"]["workers"] = 3
    with pytest.raises(InputError, match=r"disaggregated.prefill: 3 worker\(s\) × TP8·EP \(8 GPUs\) = 24 GPUs"):
        profile_from_mapping(data)
    data = pd_profile()
    data["disaggregated"]["prefill"] |= {"layout": {"tensor_parallel": 3}, "workers": 1}
    with pytest.raises(InputError, match=r"disaggregated\.prefill"):
        profile_from_mapping(data)


def test_the_pools_own_flags_are_refused_in_extra_args_naming_the_setting() -> None:
    data = pd_profile()
    data["disaggregated"]["decode"]["extra_args"] = ["--kv-transfer-config={}"]
    with pytest.raises(InputError, match=r"disaggregated.decode.extra_args.*disaggregated.kv_connector"):
        profile_from_mapping(data)
    data = pd_profile()
    data["env"] = {"VLLM_NIXL_SIDE_CHANNEL_PORT": "1"}
    with pytest.raises(InputError, match=r"env\.VLLM_NIXL_SIDE_CHANNEL_PORT.*side_channel_port"):
        profile_from_mapping(data)


def test_prefill_and_decode_engines_then_the_router_each_with_its_role_and_side_channel() -> None:
    plan = plan_of(pd_profile(), ib=2)
    names = [c.name for c in plan.commands]
    assert names == ["prefill0-vllm-node0", "prefill1-vllm-node0", "decode0-vllm-node0", "decode0-vllm-node1",
                     "router"]  # fmt: skip
    assert plan.layout_class == "disaggregated" and plan.serving_command == "router"
    assert plan.serving_url == "http://10.0.0.1:8000/v1" and plan.head_host == "p1"
    by_name = {c.name: c for c in plan.commands}
    roles = {
        name: json.loads(c.argv[c.argv.index("--kv-transfer-config") + 1])["kv_role"]
        for name, c in by_name.items()
        if "--kv-transfer-config" in c.argv
    }
    assert roles == {"prefill0-vllm-node0": "kv_producer", "prefill1-vllm-node0": "kv_producer",
                     "decode0-vllm-node0": "kv_consumer", "decode0-vllm-node1": "kv_consumer"}  # fmt: skip
    # NIXL's handshake: the node's own address, the pool's base port + the engine's first DP rank on the node
    side = {n: (c.env_dict["VLLM_NIXL_SIDE_CHANNEL_HOST"], c.env_dict["VLLM_NIXL_SIDE_CHANNEL_PORT"])
            for n, c in by_name.items() if n != "router"}  # fmt: skip
    assert side == {"prefill0-vllm-node0": ("10.0.0.1", "5600"), "prefill1-vllm-node0": ("10.0.0.2", "5600"),
                    "decode0-vllm-node0": ("10.0.0.3", "5700"), "decode0-vllm-node1": ("10.0.0.4", "5708")}  # fmt: skip
    router = by_name["router"]
    assert router.stage > max(c.stage for c in plan.commands if c.name != "router") and router.gpus == ()
    assert router.argv[:2] == ("vllm-router", "--vllm-pd-disaggregation")
    joined = shlex.join(router.argv)
    assert "--prefill http://10.0.0.1:8100 --prefill http://10.0.0.2:8100 --decode http://10.0.0.3:8200" in joined
    assert router.metrics_url == "http://127.0.0.1:29000/metrics"
    # every engine flag is one vLLM accepts, choices included (wide EP: DeepEP kernels, EPLB, DBO)
    for command in plan.commands[:-1]:
        args = list(command.argv[3:])
        assert unknown_flags(args) == [] and bad_choices(args) == [], command.argv
    decode = by_name["decode0-vllm-node0"].argv
    assert decode[decode.index("--all2all-backend") + 1] == "deepep_low_latency"
    assert decode[decode.index("--eplb-config") + 1] == '{"num_redundant_experts":16}'


def test_stop_order_is_router_then_decode_then_prefill() -> None:
    plan = plan_of(pd_profile())
    assert plan.restart_as_whole  # decode0 spans d1 and d2: one node's part cannot restart alone
    single = pd_profile(hosts=["p1", "p2", "d1"])
    single["disaggregated"]["decode"] = {"hosts": ["d1"], "layout": {"tensor_parallel": 8}}
    assert not plan_of(single).restart_as_whole  # every engine on one node: each part restarts alone
    assert [c.name for c in reversed(plan.commands)][:2] == ["router", "decode0-vllm-node1"]
    assert reversed(plan.commands).__next__().role == "router" and plan.commands[0].role == "prefill-head"


def test_ucx_and_nvshmem_use_the_hca_nearest_each_engines_gpus_and_the_profile_may_override() -> None:
    profile = profile_from_mapping(pd_profile())
    nodes = nodes_for(profile.hosts, ib=4)
    rail = [(gpu, f"mlx5_{gpu // 2}/1") for gpu in range(8)]  # GPU pairs on rails 0..3
    nodes = [NodeNetwork(n.host, n.address, n.interfaces, n.ib_ports, nearest_nics=tuple(rail)) for n in nodes]
    plan = build_disaggregated_plan(profile, nodes)
    prefill = plan.commands[0].env_dict
    assert prefill["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1"
    assert prefill["NVSHMEM_HCA_LIST"] == prefill["UCX_NET_DEVICES"]  # DeepEP's NVSHMEM, same rails
    # a sub-node worker (TP4: two per node) gets only its own GPUs' rails
    data = pd_profile(hosts=["p1", "d1", "d2"])
    data["disaggregated"]["prefill"] = {"hosts": ["p1"], "layout": {"tensor_parallel": 4}, "workers": 2}
    sub = build_disaggregated_plan(profile_from_mapping(data), [n for n in nodes if n.host != "p2"])
    first, second = sub.commands[0], sub.commands[1]
    assert (first.gpus, second.gpus) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert (first.env_dict["UCX_NET_DEVICES"], second.env_dict["UCX_NET_DEVICES"]) == (
        "mlx5_0:1,mlx5_1:1", "mlx5_2:1,mlx5_3:1")  # fmt: skip
    assert "--port" in first.argv and first.argv[first.argv.index("--port") + 1] == "8100"
    assert second.argv[second.argv.index("--port") + 1] == "8101"  # a node's second engine: the next port
    assert "NVSHMEM_HCA_LIST" not in first.env_dict  # no DeepEP kernels in that pool
    overridden = build_disaggregated_plan(profile_from_mapping(pd_profile(env={"UCX_NET_DEVICES": "mlx5_7:1"})),
                                          nodes)  # fmt: skip
    assert overridden.commands[0].env_dict["UCX_NET_DEVICES"] == "mlx5_7:1"


def test_tcp_transport_and_unknown_nics_set_no_ucx_devices() -> None:
    data = pd_profile()
    data["disaggregated"]["kv_connector"] = {"buffer_device": "cpu", "transport": "tcp"}
    plan = plan_of(data, ib=2)
    assert all("UCX_NET_DEVICES" not in c.env_dict for c in plan.commands)
    assert '"kv_buffer_device":"cpu"' in plan.commands[0].argv[plan.commands[0].argv.index("--kv-transfer-config") + 1]


def test_eplbs_divisibility_rule_is_checked_with_the_fewest_redundant_experts_named() -> None:
    data = pd_profile()
    data["disaggregated"]["decode"]["wide_ep"]["redundant_experts"] = 10
    with pytest.raises(InputError, match=r"256 routed \+ 10 redundant experts = 266 do not divide evenly over EP 16"):
        plan_of(data)
    pools = profile_from_mapping(pd_profile()).disaggregated
    assert pools is not None
    assert eplb_problems(pools, 256) == []
    assert eplb_problems(pools, 250)[0][1].endswith("use 6 (or 6 + a multiple of 8)")
    unknown = plan_of(pd_profile(model="/models/my-moe"))
    assert any("divisibility was not checked" in w for w in unknown.warnings)


def test_the_dry_run_shows_every_process_and_each_nodes_ports() -> None:
    plan = plan_of(pd_profile())
    document = plan.dry_run()
    assert [n["name"] for n in document["nodes"]][-1] == "router"
    ports = {(p["host"], p["port"], p["purpose"]) for p in document["ports"]}
    assert ("d2", 5708, "decode0 NIXL side channel") in ports and ("p1", 8000, "router API") in ports
    assert all(p["address"] for p in document["ports"])
