"""Invariants that hold for any cluster, model and settings (hypothesis)."""

from __future__ import annotations

from collections import defaultdict

from core_planner_inputs import KIMI_K2_THINKING, make_cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from meshdeck.core.model_card import model_card_from_config
from meshdeck.core.planner import PlanRequest, plan
from meshdeck.services.catalog import load_gpu_catalog, load_model

MODELS = {
    "deepseek-v3.2": load_model("deepseek-v3.2"),
    "deepseek-v3": load_model("deepseek-v3"),
    "kimi-k2": model_card_from_config(KIMI_K2_THINKING, "kimi", "kimi-k2"),
}
GPUS = {gpu.name: gpu for gpu in load_gpu_catalog()}

requests = st.builds(
    lambda model, gpu, nodes, gpn, util, length, kv, seqs, goal: PlanRequest(
        MODELS[model],
        make_cluster(GPUS[gpu], nodes, gpn),
        gpu_memory_utilization=util,
        max_model_len=length,
        kv_cache_dtype=kv,
        max_num_seqs=seqs,
        goal=goal,
    ),
    model=st.sampled_from(sorted(MODELS)),
    gpu=st.sampled_from(sorted(GPUS)),
    nodes=st.integers(1, 6),
    gpn=st.sampled_from([4, 8]),
    util=st.floats(0.5, 0.97),
    length=st.integers(1024, 163840),
    kv=st.sampled_from(["auto", "bf16", "fp8"]),
    seqs=st.one_of(st.none(), st.integers(1, 1024)),
    goal=st.sampled_from(["throughput", "latency", "context"]),
)

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
