"""DeepSeek-V4 and aiconfigurator-core 0.12.0: its V4 configs (deepseek-ai/DeepSeek-V4-Pro, -Flash; family DEEPSEEKV4)
are asked where its tables hold the plan's experts and KV cache, else the roofline stands in naming what is missing.

What the library holds (read from its systems/data): vLLM 0.24.0 DeepSeek-V4 attention modules (sparse_attention/
dsv4_*: FP8 KV only, measured on the sgl-project FP8 requants), mHC, FP8-block GEMMs and FP8-block MoE rows of both V4
shapes on h200_sxm and b200_sxm; MXFP4 expert rows (w4a8_mxfp4_mxfp8, the mode it infers for DeepSeek's FP4 experts)
only on b200_sxm."""

from __future__ import annotations

from dataclasses import replace

import pytest
from meshdeck.core.cluster import ClusterSpec, default_inter_node_bytes_per_s
from meshdeck.core.errors import InputError
from meshdeck.core.gpu_spec import resolve_gpu
from meshdeck.core.planner import PlanRequest, plan
from meshdeck.core.serving import EngineShape, SpeedQuery
from meshdeck.services.catalog import load_gpu_catalog, load_model
from meshdeck.speed.kernels import KernelSpeed, kernel_speed_for
from meshdeck.speed.tables import speed_tables


def v4_request(model: str = "deepseek-v4-pro", gpu: str = "H200-SXM-141GB", expert_dtype: str | None = None, **kw):
    spec = resolve_gpu(gpu, load_gpu_catalog())
    cluster = ClusterSpec(2, 8, spec, "nvlink", default_inter_node_bytes_per_s(8, "nvlink"))
    card = load_model(model)
    if expert_dtype is not None:
        assert card.v4 is not None
        card = replace(card, v4=replace(card.v4, expert_dtype=expert_dtype))
    return PlanRequest(card, cluster, **kw)


def test_the_tables_map_each_v4_card_to_the_librarys_config():
    tables = speed_tables()
    assert tables.bundled_models["deepseek-v4-pro"] == "deepseek-ai/DeepSeek-V4-Pro"
    assert tables.bundled_models["deepseek-v4-flash"] == "deepseek-ai/DeepSeek-V4-Flash"
    assert tables.architectures["DeepseekV4ForCausalLM"] == "deepseek-ai/DeepSeek-V4-Pro"
    assert tables.v4_experts == {"fp4": "w4a8_mxfp4_mxfp8", "fp8": "fp8_block", "bf16": "bfloat16"}
    assert tables.v4_kv_cache == ("fp8",)


@pytest.mark.parametrize("model", ["deepseek-v4-pro", "deepseek-v4-flash"])
def test_fp4_experts_on_h200_are_not_in_the_tables_so_the_roofline_names_what_is_missing(model):
    reason = kernel_speed_for(v4_request(model, kv_cache_dtype="fp8"))
    assert isinstance(reason, str)
    assert "h200_sxm vllm 0.24.0" in reason and f"no w4a8_mxfp4_mxfp8 MoE rows for {model}'s fp4 experts" in reason
    assert "it holds fp8_block rows of that shape" in reason and "KV cache" not in reason


def test_auto_is_the_fp8_cache_flashmla_stores_and_a_bf16_cache_is_refused_before_any_table_is_asked():
    """V4's FlashMLA backend (Hopper, Blackwell) stores fp8_ds_mla only (attention.py _resolve_dsv4_kv_cache_dtype):
    `auto` plans the fp8 cache the library measured; bfloat16 is vLLM's own refusal, named by the flag."""
    reason = kernel_speed_for(v4_request(kv_cache_dtype="auto"))
    assert isinstance(reason, str) and "KV cache" not in reason  # only the FP4 experts are missing on H200
    with pytest.raises(InputError) as refused:
        plan(v4_request(kv_cache_dtype="bfloat16"))
    assert refused.value.field == "--kv-cache-dtype" and "fp8_ds_mla" in refused.value.problem


def test_fp8_experts_on_h200_are_measured_with_the_v4_config():
    """An FP8-expert V4 checkpoint (the FP8 requant the library's V4 rows were measured on) with an FP8 KV cache."""
    speed = kernel_speed_for(v4_request(expert_dtype="fp8", kv_cache_dtype="fp8"))
    assert isinstance(speed, KernelSpeed)
    assert (speed.model_id, speed.gemm_mode, speed.moe_mode, speed.kv_mode) == (
        "deepseek-ai/DeepSeek-V4-Pro", "fp8_block", "fp8_block", "fp8",
    )  # fmt: skip
    assert "h200_sxm vLLM 0.24.0" in speed.source.label
    times = speed.times(SpeedQuery(EngineShape(8, 1, 2, True, 8), "aggregated", 64, 1024, 1024, 8192))
    assert times is not None and 5 < times.tpot_ms < 500 and times.ttft_ms > 0


def test_fp4_experts_on_b200_are_measured_with_the_mxfp4_mode():
    speed = kernel_speed_for(v4_request(gpu="B200", kv_cache_dtype="fp8"))
    assert isinstance(speed, KernelSpeed)
    assert (speed.model_id, speed.moe_mode) == ("deepseek-ai/DeepSeek-V4-Pro", "w4a8_mxfp4_mxfp8")
    times = speed.times(SpeedQuery(EngineShape(8, 1, 1, True, 8), "aggregated", 32, 1024, 1024, 8192))
    assert times is not None and times.tpot_ms > 0
