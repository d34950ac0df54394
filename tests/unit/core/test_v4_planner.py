"""DeepSeek-V4 through the GPU planner: every layout's weights are core.v4_weights' exact stage bytes, its KV cache
core.v4_kv's groups at the budget the layout leaves (vLLM 0.32's sizing, proven against vLLM's own code in
tests/integration/vllm/test_v4_kv_matches_vllm.py), and what vLLM would refuse is refused naming its rule."""

from __future__ import annotations

import json

import pytest
from core_planner_inputs import make_cluster
from meshdeck.cli import main
from meshdeck.core.gpu_spec import resolve_gpu
from meshdeck.core.layout_parts import pp_partition
from meshdeck.core.planner import PlanRequest, plan
from meshdeck.core.v4_kv import V4Backend, plan_v4_kv
from meshdeck.core.v4_weights import V4Shard, stage_bytes
from meshdeck.services.catalog import load_gpu_catalog, load_model


def _gpu(name: str):
    return resolve_gpu(name, load_gpu_catalog())


def _layout(result, tp: int, pp: int, dp: int, ep: bool):
    return next(
        layout
        for layout in result.layouts
        if (layout.tensor_parallel, layout.pipeline_parallel, layout.data_parallel, layout.expert_parallel)
        == (tp, pp, dp, ep)
        and layout.placement.instances == 1
    )


@pytest.mark.parametrize(("model", "gpu", "nodes", "tp", "dp", "ep"), [
    ("deepseek-v4-pro", "H200-SXM-141GB", 2, 8, 2, True),
    ("deepseek-v4-pro", "H200-SXM-141GB", 2, 16, 1, True),
    ("deepseek-v4-flash", "B200", 1, 8, 1, False),
    ("deepseek-v4-flash", "B200", 1, 4, 2, True),
])  # fmt: skip
def test_a_layouts_weights_and_kv_are_v4s_own_arithmetic(model, gpu, nodes, tp, dp, ep) -> None:
    card = load_model(model)
    result = plan(PlanRequest(card, make_cluster(_gpu(gpu), nodes=nodes), max_model_len=131072))
    layout = _layout(result, tp, 1, dp, ep)
    shard = V4Shard(tensor_parallel=tp, moe_ranks=tp * dp, expert_parallel=ep)
    held = stage_bytes(card, shard, max_num_batched_tokens=result.settings.max_num_batched_tokens)
    assert layout.weights_bytes_per_gpu == held.total
    kv = plan_v4_kv(
        card,
        backend=V4Backend.CUDA_FLASHMLA,
        kv_cache_dtype="auto",
        kv_budget_bytes=layout.kv_budget_bytes_per_gpu,
        max_model_len=131072,
        max_num_batched_tokens=result.settings.max_num_batched_tokens,
        concurrent_batches=2,  # async scheduling at PP 1
        release=(0, 32),
    )
    assert layout.kv_tokens_per_replica == layout.kv_tokens_logged_per_replica == kv.tokens
    assert layout.max_concurrency == kv.max_concurrency
    assert layout.kv_cache_bytes_per_gpu == kv.num_blocks * kv.bytes_per_block
    parts = dict(layout.kv_bytes_per_token_by_part)
    assert {"swa", "c4_latent", "c128_latent", "indexer", "compressor_state"} <= set(parts)
    assert sum(parts.values()) == pytest.approx(layout.kv_bytes_per_token_per_gpu, abs=1)


def test_pipeline_stages_are_counted_layer_by_layer_and_cut_to_the_smallest_stage() -> None:
    card = load_model("deepseek-v4-flash")
    result = plan(
        PlanRequest(
            card, make_cluster(_gpu("H200-SXM-141GB")), max_model_len=65536, pipeline_parallel=2, tensor_parallel=4
        )
    )
    layout = _layout(result, 4, 2, 1, False)
    stages = layout.stages
    assert [(s.first_layer, s.end_layer) for s in stages] == list(pp_partition(card.num_hidden_layers, 2))
    budgets = [s.kv_budget_bytes for s in stages]
    plans = [
        plan_v4_kv(
            card,
            backend=V4Backend.CUDA_FLASHMLA,
            kv_cache_dtype="auto",
            kv_budget_bytes=budget,
            max_model_len=65536,
            max_num_batched_tokens=result.settings.max_num_batched_tokens,
            concurrent_batches=3,  # PP + 1 with async scheduling on Model Runner V2
            release=(0, 32),
            stage=bounds,
        )
        for budget, bounds in zip(budgets, pp_partition(card.num_hidden_layers, 2), strict=True)
    ]
    blocks = min(p.num_blocks for p in plans)
    assert layout.kv_tokens_per_replica == int(blocks / plans[0].blocks_per_request * 65536)


def test_what_vllm_refuses_for_v4_is_refused_naming_the_rule() -> None:
    card = load_model("deepseek-v4-flash")  # o_groups 8: TP 16 would leave no output group on a rank
    result = plan(PlanRequest(card, make_cluster(_gpu("H200-SXM-141GB"), nodes=2), max_model_len=65536))
    refused = [layout for layout in result.layouts if layout.tensor_parallel == 16 and not layout.valid]
    assert refused and all("o_groups" in (layout.invalid_reason or "") for layout in refused)


def test_a_budget_short_of_one_request_does_not_fit_and_says_by_how_much() -> None:
    card = load_model("deepseek-v4-pro")  # 805 GiB of weights on 8 × 80 GB cannot fit
    result = plan(PlanRequest(card, make_cluster(_gpu("H100-SXM5-80GB")), max_model_len=65536))
    assert not [layout for layout in result.layouts if layout.fits]
    short = [layout for layout in result.layouts if layout.valid and not layout.fits]
    assert short and all(layout.shortfall_bytes > 0 for layout in short)


@pytest.mark.parametrize("args", [
    ["--model", "deepseek-v4-pro", "--gpu", "H200-SXM-141GB", "--nodes", "2", "--top", "5"],
    ["--model", "deepseek-v4-flash", "--gpu", "B200"],
])  # fmt: skip
def test_the_issues_commands_list_layouts_with_their_kv_parts(capsys, args) -> None:
    assert main(["plan", *args, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["layouts_fitting"] > 0
    top = payload["layouts"][0]
    assert top["fits"] and top["kv_tokens_per_replica"] > 0 and top["weights_gib_per_gpu"] > 0
    assert set(top["kv_bytes_per_token_by_part"]) >= {"swa", "c4_latent", "compressor_state"}
    assert "--tokenizer-mode" in top["vllm_args"]


def test_requests_in_flight_are_vllms_own_bound_at_the_workloads_length() -> None:
    """A V4 request's window and compressor-state pages do not shrink with max_model_len's amortisation: a replica
    holds blocks / (pages one isl + osl request takes) of them, as vLLM's concurrency formula counts it."""
    card = load_model("deepseek-v4-flash")
    result = plan(PlanRequest(card, make_cluster(_gpu("B200"))))
    layout = _layout(result, 1, 1, 8, True)
    short = plan_v4_kv(
        card,
        backend=V4Backend.CUDA_FLASHMLA,
        kv_cache_dtype="auto",
        kv_budget_bytes=layout.kv_budget_bytes_per_gpu,
        max_model_len=2048,  # the default workload: 1,024 in + 1,024 out
        max_num_batched_tokens=result.settings.max_num_batched_tokens,
        concurrent_batches=2,
        release=(0, 32),
    )
    assert layout.serving is not None
    assert layout.serving.capacity_per_replica <= min(short.num_blocks // short.blocks_per_request + 1, 1024)
    assert layout.serving.capacity_per_replica < layout.kv_tokens_per_replica // 2048  # not the 1M amortisation
