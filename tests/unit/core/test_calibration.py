"""The planner reproduces vLLM's own startup numbers for DeepSeek deployments.

Public point (RedHat PSAP's validation database, fixtures/calibration/SOURCES.md): vLLM 0.16.0, DeepSeek-V3.2, TP8
on 8×H200, gpu_memory_utilization 0.92, max_model_len 8192, KV auto (BF16 on the FlashMLA-sparse path), vLLM's
defaults otherwise: "Model loading took 80.62 GiB", "Available KV cache memory: 42.19 GiB", "GPU KV cache size:
578,368 tokens". Every point here goes through the defaults a user gets (nothing the published run did not set
is set here): the planner must itself resolve vLLM's max_num_seqs 1024 / max_num_batched_tokens 8192 for
`vllm serve` on a >= 70 GiB GPU. tests/unit/test_cli_plan.py runs the same point through `meshdeck plan`.
(VLLM-FACTS.md's 0.16 point, 418,304 tokens at util 0.85 / 16384, ran with max_num_batched_tokens 32768 and an
LMCache connector: the calibration table reports it.)
"""

from __future__ import annotations

import pytest
from meshdeck.core.planner import plan
from meshdeck.core.units import GIB


def test_v32_tp8_h200_weights_within_1_percent_and_kv_tokens_within_2_percent(v32, request_for):
    request = request_for(
        v32,
        max_model_len=8192,
        gpu_memory_utilization=0.92,
        vllm_version=(0, 16),
        tensor_parallel=8,
        pipeline_parallel=1,
        data_parallel=1,
        expert_parallel=False,
    )
    result = plan(request)
    assert (result.settings.max_num_seqs, result.settings.max_num_batched_tokens) == (1024, 8192)
    layout = result.layouts[0]
    assert layout.weights_bytes_per_gpu / GIB == pytest.approx(80.62, rel=0.01)
    assert layout.kv_tokens_per_replica == pytest.approx(578_368, rel=0.02)
    assert layout.kv_cache_bytes_per_gpu / GIB == pytest.approx(42.19, rel=0.02)


def test_h200_torch_visible_memory_matches_the_calibration_log(gpu):
    assert gpu("H200-SXM-141GB").torch_visible_bytes / GIB == pytest.approx(139.81, abs=0.02)


def test_kimi_k2_thinking_tp8_h200_available_kv_within_5_percent(kimi_k2, request_for):
    # vllm-project/recipes moonshotai/Kimi-K2-Think.md (vLLM ~0.11, 8×H200, `vllm serve --tensor-parallel-size 8`
    # with every memory setting at its default): "Available KV cache memory: 46.80 GiB",
    # "GPU KV cache size: 715,072 tokens". A different checkpoint format (int4 experts, BF16 rest), head
    # count, expert count and vocabulary than the V3.2 point: the same accounting must carry over.
    request = request_for(
        kimi_k2, vllm_version=(0, 11), tensor_parallel=8, pipeline_parallel=1, data_parallel=1, expert_parallel=False
    )
    layout = plan(request).layouts[0]
    assert layout.kv_budget_bytes_per_gpu / GIB == pytest.approx(46.80, rel=0.05)
    assert layout.kv_tokens_per_replica == pytest.approx(715_072, rel=0.05)


def test_every_reserve_term_is_positive_and_named(v32, request_for):
    layout = plan(
        request_for(
            v32, vllm_version=(0, 16), tensor_parallel=8, pipeline_parallel=1, data_parallel=1, expert_parallel=False
        )
    ).layouts[0]
    reserve = layout.reserve
    assert reserve.activation_peak_bytes > 0 and reserve.sampler_bytes > 0 and reserve.non_torch_bytes > 0
    assert reserve.cudagraph_bytes > 0 and not reserve.cudagraph_in_budget
    assert set(layout.as_dict()["reserve_gib"]) >= {"activation_peak", "sampler", "non_torch", "cudagraphs"}


def test_newer_vllm_subtracts_cuda_graphs_from_the_kv_budget(v32, request_for):
    common = {"tensor_parallel": 8, "pipeline_parallel": 1, "data_parallel": 1, "expert_parallel": False}
    # 0.19 and 0.20 differ in the graphs only (both sample natively; 0.21 turns FlashInfer sampling on)
    old = plan(request_for(v32, vllm_version=(0, 19), **common)).layouts[0]
    new = plan(request_for(v32, vllm_version=(0, 20), **common)).layouts[0]
    assert new.reserve.cudagraph_in_budget
    assert old.kv_budget_bytes_per_gpu - new.kv_budget_bytes_per_gpu == new.reserve.cudagraph_bytes


def test_mtp_loads_a_layer_adds_its_kv_and_samples_every_draft(v32, request_for):
    common = {"tensor_parallel": 8, "pipeline_parallel": 1, "data_parallel": 1, "expert_parallel": False}
    plain = plan(request_for(v32, max_model_len=16384, **common)).layouts[0]
    mtp = plan(request_for(v32, max_model_len=16384, mtp=True, **common)).layouts[0]
    assert mtp.weights_bytes_per_gpu > plain.weights_bytes_per_gpu
    assert mtp.kv_bytes_per_token_per_gpu == plain.kv_bytes_per_token_per_gpu * 62 // 61
    assert mtp.reserve.sampler_pass_bytes == 4 * plain.reserve.sampler_pass_bytes  # 1 + 3 speculative rows
    assert "--speculative-config" in mtp.vllm_args


def test_scheduler_defaults_follow_vllm_serve(gpu):
    # vLLM EngineArgs.get_batch_defaults / _set_default_max_num_seqs_and_batched_tokens_args, OPENAI_API_SERVER.
    from meshdeck.core.plan_request import scheduler_limits

    assert scheduler_limits(gpu("H200-SXM-141GB"), 163840, None, None) == (8192, 1024)
    assert scheduler_limits(gpu("H100-SXM5-80GB"), 163840, None, None) == (8192, 1024)  # 79 GiB >= 70
    assert scheduler_limits(gpu("A100-SXM4-80GB"), 163840, None, None) == (2048, 256)  # A100 excluded by name
    assert scheduler_limits(gpu("L40S"), 163840, None, None) == (2048, 256)  # < 70 GiB
    assert scheduler_limits(gpu("H200-SXM-141GB"), 4, None, None) == (4096, 1024)  # budget <= seqs × max_model_len
    assert scheduler_limits(gpu("H200-SXM-141GB"), 163840, None, 512) == (512, 512)  # seqs <= a set budget
    assert scheduler_limits(gpu("H200-SXM-141GB"), 163840, 2048, 512) == (512, 2048)  # set values stay as set
