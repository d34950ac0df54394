"""Invariants that hold for any cluster, model and settings (hypothesis)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from core_planner_inputs import KIMI_K2_THINKING, make_cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from meshdeck.core.model_card import model_card_from_config
from meshdeck.core.planner import PlanRequest, plan
from meshdeck.core.rocm import kv_dtype_problem
from meshdeck.core.weights import ShardShape, stage_weights
from meshdeck.services.catalog import load_gpu_catalog, load_model

MODELS = {
    "deepseek-v3.2": load_model("deepseek-v3.2"),
    "deepseek-v3": load_model("deepseek-v3"),
    "kimi-k2": model_card_from_config(KIMI_K2_THINKING, "kimi", "kimi-k2"),
}
GPUS = {gpu.name: gpu for gpu in load_gpu_catalog()}


def _servable(request: PlanRequest) -> bool:
    """vLLM on ROCm refuses some KV dtypes in some releases (core.rocm); the planner says so and plans nothing."""
    if request.cluster.gpu.vendor != "amd":
        return True
    return kv_dtype_problem(request.model, request.kv_cache_dtype, request.vllm_version) is None


requests = st.builds(
    lambda model, gpu, nodes, gpn, util, length, kv, seqs, goal, version: PlanRequest(
        MODELS[model],
        make_cluster(GPUS[gpu], nodes, gpn),
        gpu_memory_utilization=util,
        max_model_len=length,
        kv_cache_dtype=kv,
        max_num_seqs=seqs,
        goal=goal,
        vllm_version=version,
    ),
    model=st.sampled_from(sorted(MODELS)),
    gpu=st.sampled_from(sorted(GPUS)),
    nodes=st.integers(1, 6),
    gpn=st.sampled_from([4, 8]),
    util=st.floats(0.5, 0.97),
    length=st.integers(1024, 163840),
    kv=st.sampled_from(["auto", "bfloat16", "fp8", "fp8_e4m3"]),
    seqs=st.one_of(st.none(), st.integers(1, 1024)),
    goal=st.sampled_from(["throughput", "latency", "context"]),
    version=st.sampled_from([(0, 16), (0, 33)]),
).filter(_servable)

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(requests)
def test_a_fitting_layout_never_exceeds_utilization_times_memory_on_any_stage(request):
    result = plan(request)
    usable = request.cluster.gpu.torch_visible_bytes * request.gpu_memory_utilization
    for layout in result.fitting:
        for stage in layout.stages:
            assert stage.weights_bytes + stage.reserve.in_budget_bytes + stage.kv_cache_bytes <= usable + 1
        assert layout.kv_tokens_per_replica >= result.settings.max_model_len


@SETTINGS
@given(requests)
def test_cluster_kv_tokens_are_replicas_times_tokens_per_replica_in_whole_blocks(request):
    for layout in plan(request).fitting:
        assert layout.kv_tokens_total == layout.instances * layout.data_parallel * layout.kv_tokens_per_replica
        assert layout.kv_tokens_per_replica % layout.kv_block_size == 0


@SETTINGS
@given(requests)
def test_kv_bytes_per_token_per_gpu_do_not_change_with_tp(request):
    by_pp: dict[int, set[int]] = defaultdict(set)
    for layout in plan(request).layouts:
        if layout.valid:
            by_pp[layout.pipeline_parallel].add(layout.kv_bytes_per_token_per_gpu)
    assert all(len(values) == 1 for values in by_pp.values())


@SETTINGS
@given(requests)
def test_layouts_that_do_not_fit_say_by_how_much(request):
    for layout in plan(request).layouts:
        if layout.valid and not layout.fits:
            assert layout.shortfall_bytes > 0
            assert layout.est_decode_tokens_per_s == 0


@SETTINGS
@given(requests, st.booleans())
def test_stages_cover_every_layer_and_each_holds_its_own_weights(request, mtp):
    """Stages of one kind share one memory computation: each must still hold exactly its own layers' weights,
    and the per-GPU figures must be the first stage holding the most weights."""
    if mtp and request.model.num_nextn_predict_layers:
        request = replace(request, mtp=True)
    result = plan(request)
    card, settings = request.model, result.settings
    for layout in result.layouts:
        if not layout.valid:
            continue
        stages = layout.stages
        assert [stage.stage for stage in stages] == list(range(layout.pipeline_parallel))
        assert [(s.first_layer, s.end_layer) for s in stages] == list(
            zip([0] + [s.end_layer for s in stages[:-1]], [s.end_layer for s in stages], strict=True)
        )
        assert stages[-1].end_layer == card.num_hidden_layers
        shape = ShardShape(
            layout.tensor_parallel,
            layout.tensor_parallel * layout.data_parallel,
            layout.expert_parallel,
            settings.weights_dtype,
            rocm_row_padding=request.cluster.gpu.vendor == "amd",
        )
        for stage in stages:
            alone = stage_weights(
                card, shape, stage.first_layer, stage.end_layer,
                first_stage=stage.stage == 0, last_stage=stage.stage == layout.pipeline_parallel - 1,
                mtp=request.mtp, max_num_batched_tokens=settings.max_num_batched_tokens,
            )  # fmt: skip
            assert stage.weights_bytes == alone.total_bytes, (layout.label(), stage.stage)
            kv_layers = stage.end_layer - stage.first_layer
            if stage.stage == layout.pipeline_parallel - 1 and request.mtp:
                kv_layers += card.num_nextn_predict_layers
            per_token = kv_layers * settings.kv.bytes_per_token_per_layer
            assert stage.kv_cache_bytes == layout.kv_tokens_per_replica * per_token, (layout.label(), stage.stage)
        busiest = next(s for s in stages if s.weights_bytes == max(t.weights_bytes for t in stages))
        assert (layout.weights_bytes_per_gpu, layout.kv_cache_bytes_per_gpu, layout.reserve) == (
            busiest.weights_bytes,
            busiest.kv_cache_bytes,
            busiest.reserve,
        )
        assert dict(layout.weights_by_component) == stage_weights(
            card, shape, busiest.first_layer, busiest.end_layer,
            first_stage=busiest.stage == 0, last_stage=busiest.stage == layout.pipeline_parallel - 1,
            mtp=request.mtp, max_num_batched_tokens=settings.max_num_batched_tokens,
        ).as_dict()  # fmt: skip
