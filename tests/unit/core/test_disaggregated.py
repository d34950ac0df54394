"""Prefill/decode-disaggregated plans: rate matching, the split of the cluster, each pool's flags and warnings."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck.core.disaggregated import (
    DECODE_DEGRADATION,
    PREFILL_DEGRADATION,
    TTFT_QUEUEING_CORRECTION,
    _packs,
    redundant_experts,
)
from meshdeck.core.planner import plan
from meshdeck.core.serving import Workload


def test_redundant_experts_make_every_ep_rank_hold_as_many() -> None:
    assert redundant_experts(256, 8) == 0
    assert redundant_experts(256, 72) == 32  # (256 + 32) % 72 == 0
    assert redundant_experts(256, 24) == 8
    assert all((256 + redundant_experts(256, ep)) % ep == 0 for ep in range(1, 300))


def test_sub_node_workers_pack_into_nodes_and_multi_node_workers_take_whole_nodes() -> None:
    assert _packs([(4, 2), (8, 1)], 2, 8)
    assert not _packs([(16, 1), (4, 1)], 2, 8)
    assert _packs([(16, 1), (4, 2)], 3, 8)
    assert not _packs([(8, 3)], 2, 8)


@pytest.fixture(scope="module")
def four_nodes(request_for, v32):
    request = request_for(v32, "H200-SXM-141GB", 4, 8, max_model_len=16384)
    from dataclasses import replace

    return plan(replace(request, workload=Workload(8192, 1024, stated=True), disaggregated=True))


def test_plans_are_rate_matched_and_within_the_cluster(four_nodes) -> None:
    options = four_nodes.disaggregated
    assert options
    for option in options:
        serving = option.serving
        prefill_rate = option.prefill.requests_per_s * PREFILL_DEGRADATION
        decode_rate = option.decode.requests_per_s * DECODE_DEGRADATION
        assert serving.output_tokens_per_s == pytest.approx(min(prefill_rate, decode_rate) * 1024)
        assert option.prefill.gpus + option.decode.gpus <= 32 == serving.gpus or serving.gpus <= 32
        assert serving.ttft_ms >= option.kv_transfer_ms
        assert serving.source.kind == "roofline"  # core alone: the roofline, said so
    best = options[0].serving.output_tokens_per_s
    assert all(option.serving.output_tokens_per_s <= best + 1e-6 for option in options)


def test_the_aggregated_best_is_the_yardstick(four_nodes) -> None:
    data = four_nodes.as_dict()
    aggregated = data["aggregated_best"]["serving"]["output_tokens_per_s"]
    first = data["disaggregated"][0]
    assert first["versus_aggregated"] == pytest.approx(first["serving"]["output_tokens_per_s"] / aggregated, rel=1e-3)
    for key in ("tensor_parallel", "data_parallel", "expert_parallel", "workers", "gpus"):
        assert key in first["prefill"] and key in first["decode"]


def test_decode_runs_only_the_batch_it_needs_to_keep_up_with_prefill(four_nodes) -> None:
    """A decode pool faster than its prefill pool is not filled to its KV capacity: TPOT stays low."""
    for option in four_nodes.disaggregated:
        decode = option.decode
        if decode.requests_per_s * DECODE_DEGRADATION > option.prefill.requests_per_s * PREFILL_DEGRADATION * 2:
            capacity = decode.layout.kv_tokens_per_replica // (8192 + 1024)
            assert decode.batch_per_rank < capacity


def test_ttft_carries_the_queueing_correction_and_the_kv_transfer(four_nodes) -> None:
    option = four_nodes.disaggregated[0]
    assert option.serving.ttft_ms > TTFT_QUEUEING_CORRECTION * 0 + option.kv_transfer_ms
    assert option.kv_transfer_ms > 0


def test_wide_ep_pools_launch_with_deepep_eplb_and_dbo(request_for, v32) -> None:
    from dataclasses import replace

    request = request_for(
        v32, "H200-SXM-141GB", 4, 8, max_model_len=16384, inter_node_bytes_per_s=400e9,
        tensor_parallel=1, pipeline_parallel=1, data_parallel=16, expert_parallel=True,
    )  # fmt: skip
    result = plan(replace(request, workload=Workload(2048, 2048, stated=True), disaggregated=True))
    wide = [
        pool
        for option in result.disaggregated
        for pool in (option.prefill, option.decode)
        if pool.shape.expert_parallel_crosses_nodes
    ]
    assert wide, [option.label() for option in result.disaggregated]
    for pool in wide:
        args = list(pool.vllm_args)
        backend = "deepep_high_throughput" if pool.role == "prefill" else "deepep_low_latency"
        assert args[args.index("--all2all-backend") + 1] == backend
        assert "--enable-dbo" in args and "--enable-eplb" in args
        redundant = json.loads(args[args.index("--eplb-config") + 1])["num_redundant_experts"]
        assert (256 + redundant) % pool.shape.expert_parallel_size == 0
        assert json.loads(args[args.index("--kv-transfer-config") + 1])["kv_connector"] == "NixlConnector"


def test_vllm_0_11_gets_the_all2all_backend_from_its_environment(request_for, v32) -> None:
    from dataclasses import replace

    request = request_for(
        v32, "H200-SXM-141GB", 4, 8, max_model_len=16384, vllm_version=(0, 11),
        tensor_parallel=1, pipeline_parallel=1, data_parallel=16, expert_parallel=True,
    )  # fmt: skip
    result = plan(replace(request, workload=Workload(2048, 2048, stated=True), disaggregated=True))
    pools = [p for o in result.disaggregated for p in (o.prefill, o.decode) if p.shape.expert_parallel_crosses_nodes]
    assert pools
    for pool in pools:
        assert "--all2all-backend" not in pool.vllm_args
        assert dict(pool.env)["VLLM_ALL2ALL_BACKEND"].startswith("deepep_")


def test_hosts_without_rdma_are_named_in_every_plan(request_for, v32) -> None:
    from dataclasses import replace

    request = request_for(v32, "H200-SXM-141GB", 2, 8, max_model_len=16384)
    result = plan(replace(request, disaggregated=True, hosts_without_rdma=("gpu-b",)))
    assert result.disaggregated
    assert all(any("gpu-b" in warning and "RDMA" in warning for warning in o.warnings) for o in result.disaggregated)


def test_one_node_that_cannot_hold_two_pools_plans_none(request_for, v32) -> None:
    from dataclasses import replace

    result = plan(replace(request_for(v32, "H200-SXM-141GB", 1, 8), disaggregated=True))
    assert result.disaggregated == ()
    assert result.as_dict()["disaggregated"] == []


def _first_fit(sizes: list[tuple[int, int]], nodes: int, per_node: int) -> bool:
    """The plain simulation `_packs` computes in closed form: whole nodes first, then first fit, largest first."""
    free = [per_node] * nodes
    for size, count in sorted(sizes, reverse=True):
        for _ in range(count):
            if size >= per_node:
                empty = [i for i, left in enumerate(free) if left == per_node][: size // per_node]
                if len(empty) < size // per_node:
                    return False
                for i in empty:
                    free[i] = 0
            else:
                spot = next((i for i, left in enumerate(free) if left >= size), None)
                if spot is None:
                    return False
                free[spot] -= size
    return True


@settings(max_examples=300, deadline=None)
@given(
    per_node=st.sampled_from([2, 4, 6, 8, 12, 16]),
    nodes=st.integers(1, 12),
    data=st.data(),
)
def test_packing_in_closed_form_matches_the_first_fit_simulation(per_node: int, nodes: int, data) -> None:
    divisors = [d for d in range(1, per_node + 1) if per_node % d == 0]
    sizes = divisors + [per_node * k for k in (2, 3, 4)]
    pools = [(data.draw(st.sampled_from(sizes)), data.draw(st.integers(0, 12))) for _ in range(2)]
    assert _packs(pools, nodes, per_node) == _first_fit(pools, nodes, per_node)


def test_the_crossing_search_finds_the_split_an_exhaustive_scan_finds(request_for, v32, monkeypatch) -> None:
    from dataclasses import replace

    from meshdeck.core import disaggregated

    request = request_for(v32, "H200-SXM-141GB", 24, 8, max_model_len=16384)
    request = replace(request, workload=Workload(4096, 512, stated=True), disaggregated=True)
    fast = plan(request).disaggregated
    monkeypatch.setattr(
        disaggregated._Planner,
        "_prefill_counts",
        lambda self, prefill, shape, layout: list(range(1, self.cluster.total_gpus // prefill.shape.gpus + 1)),
    )
    exhaustive = plan(request).disaggregated
    assert fast[0].serving.output_tokens_per_s == pytest.approx(exhaustive[0].serving.output_tokens_per_s, rel=1e-9)
    assert fast[0].label() == exhaustive[0].label()
