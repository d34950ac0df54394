"""The planner reproduces vLLM's own startup numbers for DeepSeek deployments.

Public point (VLLM-FACTS.md): vLLM 0.16.0, DeepSeek-V3.2, TP8 on 8×H200, gpu_memory_utilization 0.85,
max_model_len 16384, KV auto (BF16 on the FlashMLA-sparse path), vLLM's defaults otherwise
(max_num_seqs 1024 and max_num_batched_tokens 8192 for `vllm serve` on a >= 70 GiB GPU):
"Model loading took 80.78 GiB", "Available KV cache memory: 30.52 GiB", "GPU KV cache size: 418,304 tokens".
"""

from __future__ import annotations

import pytest
from meshdeck.core.planner import plan
from meshdeck.core.units import GIB


def test_v32_tp8_h200_weights_within_3_percent_and_kv_tokens_within_5_percent(v32, request_for):
    request = request_for(
        v32,
        max_model_len=16384,
        gpu_memory_utilization=0.85,
        max_num_seqs=1024,
        tensor_parallel=8,
        pipeline_parallel=1,
        data_parallel=1,
        expert_parallel=False,
    )
    layout = plan(request).layouts[0]
    assert layout.weights_bytes_per_gpu / GIB == pytest.approx(80.78, rel=0.03)
    assert layout.kv_tokens_per_replica == pytest.approx(418_304, rel=0.05)
    assert layout.kv_cache_bytes_per_gpu / GIB == pytest.approx(30.52, rel=0.05)


def test_h200_torch_visible_memory_matches_the_calibration_log(gpu):
    assert gpu("H200-SXM-141GB").torch_visible_bytes / GIB == pytest.approx(139.81, abs=0.02)
