"""The `vllm serve` flags for a layout: parallel sizes, memory settings, V3.2 front end, MTP."""

from __future__ import annotations

import json
from dataclasses import dataclass

from meshdeck.core.vllm_args import ServeSettings, vllm_serve_args


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
