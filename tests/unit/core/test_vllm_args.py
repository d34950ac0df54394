"""The `vllm serve` flags for a layout: parallel sizes, memory settings, V3.2 and V4 front ends, MTP."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from core_planner_inputs import make_cluster
from meshdeck.core.gpu_spec import resolve_gpu
from meshdeck.core.planner import PlanRequest, plan
from meshdeck.core.vllm_args import (
    MTP_V4_SPECULATIVE_TOKENS,
    V4_FRONT_END,
    V32_FRONT_END,
    ServeSettings,
    vllm_serve_args,
)
from meshdeck.services.catalog import load_gpu_catalog, load_model


@dataclass(frozen=True)
class Shape:
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    data_parallel: int = 1
    expert_parallel: bool = False


def value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_parallel_flags_only_when_they_matter():
    args = vllm_serve_args(Shape(8), ServeSettings(max_model_len=16384, gpu_memory_utilization=0.9))
    assert value(args, "--tensor-parallel-size") == "8"
    assert "--pipeline-parallel-size" not in args and "--data-parallel-size" not in args
    assert "--enable-expert-parallel" not in args and "--kv-cache-dtype" not in args


def test_dp_ep_layout():
    args = vllm_serve_args(Shape(2, 2, 4, True), ServeSettings(max_model_len=32768, gpu_memory_utilization=0.85))
    assert value(args, "--pipeline-parallel-size") == "2"
    assert value(args, "--data-parallel-size") == "4"
    assert "--enable-expert-parallel" in args
    assert value(args, "--gpu-memory-utilization") == "0.85"
    assert value(args, "--max-model-len") == "32768"


def test_v32_front_end_and_fp8_ds_mla():
    settings = ServeSettings(
        max_model_len=163840, gpu_memory_utilization=0.9, kv_cache_dtype="fp8_ds_mla", max_num_seqs=256,
        deepseek_v32_frontend=True,
    )  # fmt: skip
    args = vllm_serve_args(Shape(2, 1, 4, True), settings)
    assert value(args, "--tokenizer-mode") == "deepseek_v32"
    assert value(args, "--tool-call-parser") == "deepseek_v32"
    assert value(args, "--reasoning-parser") == "deepseek_v3"
    assert "--enable-auto-tool-choice" in args
    assert value(args, "--kv-cache-dtype") == "fp8_ds_mla"
    assert value(args, "--max-num-seqs") == "256"


def test_mtp_speculative_config_is_one_json_argument():
    args = vllm_serve_args(
        Shape(8), ServeSettings(max_model_len=8192, gpu_memory_utilization=0.9, mtp_speculative_tokens=3)
    )
    assert json.loads(value(args, "--speculative-config")) == {"method": "mtp", "num_speculative_tokens": 3}


def test_every_argument_is_a_plain_string_with_no_shell_quoting():
    args = vllm_serve_args(Shape(4, 2, 2, True), ServeSettings(8192, 0.9, "fp8", 128, 4096, True, 2))
    assert all(isinstance(a, str) and a and "'" not in a for a in args)


def test_v4_front_end_swaps_each_v32_name_for_v4s():
    """vLLM 0.32.0 registers "deepseek_v4" as tokenizer mode (config/model.py 745-749), tool parser
    (tool_parsers/__init__.py 41) and reasoning parser (reasoning/__init__.py 31); V3.2 keeps its own."""
    settings = ServeSettings(max_model_len=65536, gpu_memory_utilization=0.9, deepseek_v4_frontend=True)
    args = vllm_serve_args(Shape(8), settings)
    assert settings.front_end is V4_FRONT_END
    assert value(args, "--tokenizer-mode") == "deepseek_v4"
    assert value(args, "--tool-call-parser") == "deepseek_v4"
    assert value(args, "--reasoning-parser") == "deepseek_v4"
    assert args.count("--enable-auto-tool-choice") == 1 and args.count("--tokenizer-mode") == 1
    assert "deepseek_v32" not in args and "deepseek_v3" not in args
    v32 = vllm_serve_args(Shape(8), ServeSettings(65536, 0.9, deepseek_v32_frontend=True))
    # the same flags in the same places, only the names differ
    assert [a for a in args if a.startswith("--")] == [a for a in v32 if a.startswith("--")]
    assert V32_FRONT_END.args()[1::2] != V4_FRONT_END.args()[1::2]


def test_no_front_end_flags_without_one_and_both_at_once_is_refused():
    args = vllm_serve_args(Shape(8), ServeSettings(8192, 0.9))
    assert "--tokenizer-mode" not in args and "--reasoning-parser" not in args
    with pytest.raises(ValueError, match="one front end"):
        vllm_serve_args(Shape(8), ServeSettings(8192, 0.9, deepseek_v32_frontend=True, deepseek_v4_frontend=True))


def test_v4_mtp_is_vllms_mtp_method():
    """config/speculative.py 695-706 maps a deepseek_v4 target to DeepSeekV4MTPModel under method "mtp"."""
    settings = ServeSettings(8192, 0.9, deepseek_v4_frontend=True, mtp_speculative_tokens=MTP_V4_SPECULATIVE_TOKENS)
    spec = json.loads(value(vllm_serve_args(Shape(8), settings), "--speculative-config"))
    assert spec == {"method": "mtp", "num_speculative_tokens": 2}


@pytest.mark.parametrize("model", ["deepseek-v4-pro", "deepseek-v4-flash"])
def test_a_v4_plan_emits_v4s_front_end_not_v32s(model):
    """A V4 card has a sparse indexer (index_topk) like V3.2, but its own tokenizer and parsers."""
    gpu = resolve_gpu("H200-SXM-141GB", load_gpu_catalog())
    card = load_model(model)
    assert card.has_sparse_indexer and card.is_v4
    result = plan(
        PlanRequest(card, make_cluster(gpu, nodes=2), max_model_len=65536, mtp=True, mtp_speculative_tokens=2)
    )
    assert result.layouts
    for layout in result.layouts[:5]:
        args = list(layout.vllm_args)
        assert value(args, "--tokenizer-mode") == "deepseek_v4"
        assert value(args, "--tool-call-parser") == "deepseek_v4"
        assert value(args, "--reasoning-parser") == "deepseek_v4"
        assert json.loads(value(args, "--speculative-config")) == {"method": "mtp", "num_speculative_tokens": 2}
        # V3.2's FlashMLA-sparse advice is not V4's
        assert not {"mla_combine_large_batch", "sparse_mla_head_padding"} & set(layout.warning_codes)


def test_a_v32_plan_keeps_v32s_front_end():
    gpu = resolve_gpu("H200-SXM-141GB", load_gpu_catalog())
    result = plan(PlanRequest(load_model("deepseek-v3.2"), make_cluster(gpu), max_model_len=65536))
    args = list(result.layouts[0].vllm_args)
    assert value(args, "--tokenizer-mode") == "deepseek_v32" and value(args, "--reasoning-parser") == "deepseek_v3"
