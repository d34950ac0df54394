"""The decode estimate of 4-bit weight formats counts the parameters the GPU multiplies, not bytes / 2.

One decode step reads a stage's weights as stored (0.5 byte a parameter plus group scales for int4 and
NVFP4: core/weights.py) but computes 2 FLOPs per parameter whatever the storage. The step's FLOPs used
to be inferred as bytes / (1 if fp8 else 2), which counts NVFP4's 4-bit dense MLP and shared experts as
a quarter of their parameters.
"""

from __future__ import annotations

import pytest
from meshdeck.core.evaluate import LayoutEvaluator
from meshdeck.core.layout_parts import pipeline_stages
from meshdeck.core.plan_request import resolve
from meshdeck.core.planner import plan
from meshdeck.core.reserve import ProcessMemory

TP8 = {"tensor_parallel": 8, "pipeline_parallel": 1, "data_parallel": 1, "expert_parallel": False}


def _step_inputs(request_for, card, weights_dtype, gpu_name="B200"):
    request = request_for(card, gpu_name, weights_dtype=weights_dtype, max_model_len=16384, **TP8)
    evaluator = LayoutEvaluator(request, resolve(request))
    sharding = evaluator.sharding(8, 1, False)
    kind = pipeline_stages(card, 1).kinds[0]
    stage = evaluator.stage_memory(sharding, kind, ProcessMemory(non_torch_bytes=0, communicator_bytes=0))
    return sharding.step_inputs(stage.weights_bytes, kind, kind.layers), stage.weights_bytes


@pytest.mark.parametrize("weights_dtype", ["fp8", "int4", "nvfp4"])
def test_a_step_computes_the_same_dense_flops_whatever_the_weights_are_stored_in(request_for, v3, weights_dtype):
    bf16, bf16_bytes = _step_inputs(request_for, v3, "bf16")
    other, other_bytes = _step_inputs(request_for, v3, weights_dtype)
    assert other_bytes < bf16_bytes  # stored smaller ...
    assert other.flops_per_token == pytest.approx(bf16.flops_per_token, rel=1e-9)  # ... multiplied the same
    assert other.expert_flops_per_token == bf16.expert_flops_per_token


def test_nvfp4_experts_are_read_at_their_4_bit_size(request_for, v3):
    # 0.5 byte + one fp8 scale per 16 inputs against FP8's 1 byte + one fp32 scale per 128×128 block
    fp8, _ = _step_inputs(request_for, v3, "fp8")
    nvfp4, _ = _step_inputs(request_for, v3, "nvfp4")
    assert nvfp4.expert_bytes_per_expert_layer < 0.6 * fp8.expert_bytes_per_expert_layer


@pytest.mark.parametrize(("gpu_name", "warned"), [("H200-SXM-141GB", True), ("B200", False)])
def test_nvfp4_weights_off_blackwell_warn_that_vllm_runs_them_weight_only(request_for, v3, gpu_name, warned):
    layout = plan(request_for(v3, gpu_name, weights_dtype="nvfp4", max_model_len=16384, **TP8)).layouts[0]
    details = layout.details
    assert ("nvfp4_weight_only" in details.warning_codes) is warned
    if warned:
        message = details.warnings[details.warning_codes.index("nvfp4_weight_only")]
        assert "Marlin" in message and "W4A16" in message
        assert layout.fits  # a warning, not a refusal: vLLM serves it
