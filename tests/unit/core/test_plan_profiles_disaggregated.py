"""A prefill/decode plan saved as a profile: its pools, hosts and wide-EP settings, loaded and launched."""

from __future__ import annotations

from dataclasses import replace

import pytest
from meshdeck.core.disaggregated import DisaggregatedPlan, Pool, redundant_experts
from meshdeck.core.errors import InputError
from meshdeck.core.planner import PlanResult, plan
from meshdeck.core.serving import Workload
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.plan import LaunchPlan
from meshdeck.launch.profile import Profile, dump_profile, load_profile
from meshdeck.services.plan_profiles import (
    default_disaggregated_name,
    disaggregated_profile,
    disaggregated_profile_mapping,
    host_name,
)
from unit.launch.launch_builders import make_node  # tests/ is on sys.path (tests/conftest.py)

MODEL = "deepseek-ai/DeepSeek-V3.2"
HOSTS = ("gpu-a", "gpu-b", "gpu-c", "gpu-d")


@pytest.fixture(scope="module")
def four_nodes(request_for, v32) -> PlanResult:
    request = request_for(v32, "H200-SXM-141GB", 4, 8, max_model_len=16384)
    return plan(replace(request, workload=Workload(8192, 1024, stated=True), disaggregated=True))


@pytest.fixture(scope="module")
def wide_ep(request_for, v32) -> PlanResult:
    """Plans whose pools run expert parallel over two nodes (DP16 with EP), as core's wide-EP test plans them."""
    request = request_for(
        v32, "H200-SXM-141GB", 4, 8, max_model_len=16384, inter_node_bytes_per_s=400e9,
        tensor_parallel=1, pipeline_parallel=1, data_parallel=16, expert_parallel=True,
    )  # fmt: skip
    return plan(replace(request, workload=Workload(2048, 2048, stated=True), disaggregated=True))


def saved(option: DisaggregatedPlan, result: PlanResult, hosts=HOSTS, **kwargs) -> Profile:
    return disaggregated_profile(option, result, name="ds32-pd", hosts=hosts, model=MODEL, **kwargs)


def launched(profile: Profile) -> LaunchPlan:
    nodes = [make_node(host, f"10.0.0.{i}", ib=8) for i, host in enumerate(profile.hosts, start=1)]
    return build_launch_plan(profile, nodes, run_id="r")


def pool_matches(saved_pool, planned: Pool) -> None:
    shape = planned.shape
    layout = saved_pool.layout
    assert (layout.tensor_parallel, layout.pipeline_parallel, layout.data_parallel, layout.expert_parallel) == (
        shape.tensor_parallel,
        1,
        shape.data_parallel,
        shape.expert_parallel,
    )
    assert saved_pool.workers == planned.workers


def test_every_plan_saves_as_one_profile_whose_pools_are_the_plans_and_round_trips(four_nodes) -> None:
    assert four_nodes.disaggregated
    for option in four_nodes.disaggregated:
        profile = saved(option, four_nodes)
        pools = profile.disaggregated
        assert pools is not None and profile.engine == "vllm" and profile.gpus_per_node == 8
        pool_matches(pools.prefill, option.prefill)
        pool_matches(pools.decode, option.decode)
        prefill_nodes, decode_nodes = option.prefill.gpus // 8, option.decode.gpus // 8
        assert pools.prefill.hosts == list(HOSTS[:prefill_nodes])  # prefill's nodes first, then decode's
        assert pools.decode.hosts == list(HOSTS[prefill_nodes : prefill_nodes + decode_nodes])
        assert profile.hosts == [*pools.prefill.hosts, *pools.decode.hosts]
        assert (pools.kv_connector.name, pools.kv_connector.buffer_device) == ("NixlConnector", "cuda")
        assert pools.router == type(pools.router)()  # the router's defaults
        text = dump_profile(profile)
        assert load_profile(text) == profile
        assert "--kv-transfer-config" not in text and "--all2all-backend" not in text  # the launcher's flags


def test_the_plans_vllm_settings_go_into_the_profile_as_the_aggregated_path_puts_them(four_nodes) -> None:
    option = four_nodes.disaggregated[0]
    profile = saved(option, four_nodes)
    vllm = profile.vllm
    assert (vllm.max_model_len, vllm.kv_cache_dtype, vllm.speculative_mtp) == (16384, "auto", False)
    assert vllm.gpu_memory_utilization == pytest.approx(0.9)
    assert vllm.max_num_seqs == 256  # V3.2's FlashMLA mitigation, applied unless declined
    assert saved(option, four_nodes, mitigations=()).vllm.max_num_seqs is None  # vLLM's own default kept


def test_without_host_names_the_pools_take_placeholder_hosts_as_the_aggregated_path_names_them(four_nodes) -> None:
    option = four_nodes.disaggregated[0]
    profile = saved(option, four_nodes, hosts=None)
    nodes = (option.prefill.gpus + option.decode.gpus) // 8
    assert profile.hosts == [host_name((), n) for n in range(nodes)] == [f"node{n}" for n in range(nodes)]


def test_too_few_host_names_are_refused_naming_hosts(four_nodes) -> None:
    option = four_nodes.disaggregated[0]
    split = f"{option.prefill.gpus // 8} prefill, {option.decode.gpus // 8} decode"
    with pytest.raises(InputError, match=rf"^hosts: the pools take 4 nodes \({split}\) but 2 host\(s\) are named"):
        disaggregated_profile_mapping(option, four_nodes, name="x", hosts=HOSTS[:2], model=MODEL)


def test_a_saved_plan_launches_its_pools_and_router_on_its_hosts(four_nodes) -> None:
    option = four_nodes.disaggregated[0]
    launch = launched(saved(option, four_nodes))
    engines = [c for c in launch.commands if c.name != "router"]
    prefill_heads = {c.name.split("-")[0] for c in engines if c.role.startswith("prefill")}
    decode_heads = {c.name.split("-")[0] for c in engines if c.role.startswith("decode")}
    assert (len(prefill_heads), len(decode_heads)) == (option.prefill.workers, option.decode.workers)
    assert launch.layout_class == "disaggregated" and launch.serving_command == "router"
    assert launch.layout["prefill_workers"] == option.prefill.workers
    assert launch.layout["decode_data_parallel"] == option.decode.shape.data_parallel


def test_pools_whose_expert_parallel_crosses_nodes_carry_the_planned_deepep_eplb_and_dbo(wide_ep) -> None:
    crossing = 0
    for option in wide_ep.disaggregated:
        profile = saved(option, wide_ep)
        assert profile.disaggregated is not None
        launch = launched(profile)
        for role, pool in profile.disaggregated.pools():
            planned: Pool = getattr(option, role)
            if not planned.shape.expert_parallel_crosses_nodes:
                assert pool.wide_ep is None
                continue
            crossing += 1
            backend = "deepep_high_throughput" if role == "prefill" else "deepep_low_latency"
            redundant = redundant_experts(256, planned.shape.expert_parallel_size)
            assert pool.wide_ep is not None
            assert (pool.wide_ep.all2all_backend, pool.wide_ep.eplb, pool.wide_ep.dbo) == (backend, True, True)
            assert pool.wide_ep.redundant_experts == redundant
            # the launched engine gets the flags the plan showed for this pool
            argv = next(c.argv for c in launch.commands if c.role.startswith(role) and "vllm" in c.argv[0])
            args = list(planned.vllm_args)
            for flag in ("--all2all-backend", "--eplb-config"):
                assert argv[argv.index(flag) + 1] == args[args.index(flag) + 1]
            assert "--enable-dbo" in argv and "--enable-eplb" in argv
    assert crossing, [option.label() for option in wide_ep.disaggregated]


def test_vllm_0_11_reads_the_all2all_backend_from_its_environment_so_wide_ep_is_refused(request_for, v32) -> None:
    request = request_for(
        v32, "H200-SXM-141GB", 4, 8, max_model_len=16384, vllm_version=(0, 11),
        tensor_parallel=1, pipeline_parallel=1, data_parallel=16, expert_parallel=True,
    )  # fmt: skip
    result = plan(replace(request, workload=Workload(2048, 2048, stated=True), disaggregated=True))
    option = next(o for o in result.disaggregated if o.prefill.shape.expert_parallel_crosses_nodes)
    with pytest.raises(
        InputError, match=r"^disaggregated\.prefill\.wide_ep: the plan follows vLLM 0\.11.*VLLM_ALL2ALL"
    ):
        saved(option, result)


def test_sub_node_workers_that_share_a_node_between_the_pools_are_refused_naming_the_pool(request_for, v32) -> None:
    request = request_for(v32, "H200-SXM-141GB", 1, 8, weights_dtype="int4", max_model_len=8192)
    result = plan(replace(request, disaggregated=True))
    option = next(o for o in result.disaggregated if o.prefill.gpus % 8)
    with pytest.raises(InputError, match=r"^disaggregated\.prefill: 1× .* takes 4 GPUs, not whole nodes of 8"):
        saved(option, result, hosts=("solo",))


def test_sub_node_workers_filling_whole_nodes_share_their_pools_hosts(request_for, v32) -> None:
    request = request_for(v32, "H200-SXM-141GB", 3, 8, weights_dtype="int4", max_model_len=8192, tensor_parallel=4)
    result = plan(replace(request, disaggregated=True))
    option = next(o for o in result.disaggregated if o.prefill.shape.gpus == 4 and o.prefill.gpus == 8)
    profile = saved(option, result, hosts=("a", "b", "c"))
    assert profile.disaggregated is not None and profile.disaggregated.prefill.hosts == ["a"]
    assert profile.disaggregated.prefill.workers == 2
    prefill = [c for c in launched(profile).commands if c.role.startswith("prefill")]
    assert {c.host for c in prefill} == {"a"} and sorted(c.gpus for c in prefill) == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_hosts_without_rdma_move_the_kv_cache_over_tcp(request_for, v32) -> None:
    request = request_for(v32, "H200-SXM-141GB", 2, 8, max_model_len=16384)
    result = plan(replace(request, disaggregated=True, hosts_without_rdma=("gpu-b",)))
    option = next(o for o in result.disaggregated if o.prefill.gpus == 8)
    profile = saved(option, result, hosts=("gpu-a", "gpu-b"))
    assert profile.disaggregated is not None and profile.disaggregated.kv_connector.transport == "tcp"
    assert saved(option, result, hosts=("gpu-c", "gpu-d")).disaggregated.kv_connector.transport == "rdma"


def test_the_default_name_folds_both_pools_into_one_valid_name(four_nodes) -> None:
    option = four_nodes.disaggregated[0]
    name = default_disaggregated_name(four_nodes, option)
    prefill = option.prefill.shape.label().lower().replace("·", "-")
    assert name.startswith(f"deepseek-v3.2-pd-{option.prefill.workers}x-{prefill}-{option.decode.workers}x-")
    assert saved(option, four_nodes).name == "ds32-pd" and "--" not in name
    disaggregated_profile(option, four_nodes, name=name, hosts=HOSTS, model=MODEL)  # valid as a profile name
