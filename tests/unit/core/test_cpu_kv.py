"""KV bytes per token and KV tokens on vLLM's CPU build, against what vLLM 0.32.0's CPU build logged for
resources/vllm-models/tiny-deepseek-v3 (tests/fixtures/agent/vllm_log_v0.32.0-cpu_*.txt, SOURCES.md)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck.core.cpu_kv import GIB, cpu_kv_plan, human_readable_bytes, kv_cache_space_bytes, model_dtype_bytes
from meshdeck.core.errors import InputError
from meshdeck.core.model_card import model_card_from_config

TINY = Path(__file__).resolve().parents[3] / "resources" / "vllm-models" / "tiny-deepseek-v3" / "config.json"


def tiny_card():
    config = json.loads(TINY.read_text())
    return model_card_from_config(config, str(TINY)), model_dtype_bytes(config, str(TINY))


@pytest.mark.parametrize(("pipeline_parallel", "tokens", "concurrency"), [(1, 233_008, 113.77), (2, 466_032, 227.55)])
def test_the_tiny_models_kv_tokens_are_what_vllms_cpu_build_logged(
    pipeline_parallel: int, tokens: int, concurrency: float
) -> None:
    card, dtype_bytes = tiny_card()
    plan = cpu_kv_plan(card, kv_cache_bytes=GIB, pipeline_parallel=pipeline_parallel, element_bytes=dtype_bytes,
                       max_model_len=2048)  # fmt: skip
    # "CPU KV cache size: 233,008 tokens, Maximum concurrency for 2,048 tokens per request: 113.77x" (TP=2),
    # "CPU KV cache size: 466,032 tokens, ... 227.55x" (PP=2): one bf16 latent of 512 + 64 values per layer
    assert plan.tokens == tokens and round(plan.max_concurrency, 2) == concurrency
    assert plan.bytes_per_token == (512 + 64) * 2 * (4 // pipeline_parallel)


def test_the_budget_is_read_as_vllm_reads_it() -> None:
    assert kv_cache_space_bytes({"VLLM_CPU_KVCACHE_SPACE": "1"}) == GIB
    # the env wins over the flag (vllm/platforms/cpu.py: the legacy setting overwrites kv_cache_memory_bytes)
    assert kv_cache_space_bytes({"VLLM_CPU_KVCACHE_SPACE": "2"}, ["--kv-cache-memory-bytes", "1G"]) == 2 * GIB
    assert kv_cache_space_bytes({}, ["--kv-cache-memory-bytes=512M"]) == 512 << 20
    assert kv_cache_space_bytes({}, ["--kv_cache_memory_bytes", "1.5g"]) == 1_500_000_000
    assert kv_cache_space_bytes({}) is None  # vLLM sizes it from free memory: no prediction
    for bad in ("1.5", "0", "one"):
        with pytest.raises(InputError, match="VLLM_CPU_KVCACHE_SPACE"):
            kv_cache_space_bytes({"VLLM_CPU_KVCACHE_SPACE": bad})
    with pytest.raises(InputError, match="--kv-cache-memory-bytes"):
        human_readable_bytes("1.5G")  # vLLM refuses decimals with binary suffixes


def test_a_200k_digit_budget_is_one_short_line_quoting_its_start_and_length() -> None:
    with pytest.raises(InputError) as info:
        kv_cache_space_bytes({"VLLM_CPU_KVCACHE_SPACE": "9" * 200_000})
    message = str(info.value)
    assert len(message) < 200 and message.endswith("(200000 characters): vLLM reads whole GiB (an integer)")
    assert message.startswith("env.VLLM_CPU_KVCACHE_SPACE: '999")


@pytest.mark.parametrize(
    ("env", "args"),
    [
        ({"VLLM_CPU_KVCACHE_SPACE": "9" * 400}, []),  # an int Python converts, but no budget is that large
        ({}, ["--kv-cache-memory-bytes", "9" * 400 + ".5g"]),  # a float that overflows
        ({}, ["--kv-cache-memory-bytes", "9" * 4_000]),
    ],
    ids=["env-400-digits", "flag-float-overflow", "flag-4000-digits"],
)
def test_a_budget_beyond_any_machine_is_refused_naming_where(env: dict[str, str], args: list[str]) -> None:
    with pytest.raises(InputError) as info:
        kv_cache_space_bytes(env, args)
    assert len(str(info.value)) < 250
    assert info.value.field in ("env.VLLM_CPU_KVCACHE_SPACE", "vllm.extra_args: --kv-cache-memory-bytes")


@settings(deadline=None, max_examples=300)
@given(
    budget=st.integers(min_value=1 << 20, max_value=64 * GIB),
    layers=st.integers(min_value=1, max_value=64),
    pipeline=st.integers(min_value=1, max_value=8),
    element=st.sampled_from([2, 4]),
)
def test_the_pool_never_outgrows_the_budget_and_a_block_more_would(budget, layers, pipeline, element) -> None:
    card, _ = tiny_card()
    card = dataclasses.replace(card, num_hidden_layers=layers)
    if pipeline > layers:
        with pytest.raises(InputError):
            cpu_kv_plan(card, kv_cache_bytes=budget, pipeline_parallel=pipeline, element_bytes=element,
                        max_model_len=2048)  # fmt: skip
        return
    plan = cpu_kv_plan(
        card, kv_cache_bytes=budget, pipeline_parallel=pipeline, element_bytes=element, max_model_len=2048
    )
    assert plan.tokens % plan.block_size == 0
    assert plan.tokens * plan.bytes_per_token <= budget < (plan.num_blocks + 1) * plan.block_size * plan.bytes_per_token
