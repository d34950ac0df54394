"""DeepSeek-V4's KV cache as vLLM 0.32 sizes it (meshdeck.core.v4_kv): hand-computed pages and groups, the numbers
vLLM's own get_kv_cache_configs gave for the tiny V4 model (tests/integration/vllm/test_v4_kv_matches_vllm.py checks
them live), the Flash / Pro per-token breakdown, refusals naming the field, and monotonicity."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck.core.errors import InputError
from meshdeck.core.model_card import ModelCard, model_card_from_config
from meshdeck.core.v4_kv import (
    V4Backend,
    cache_specs,
    cuda_backend,
    min_blocks_over_stages,
    plan_v4_kv,
    resolve_kv_cache_dtype,
)
from meshdeck.services.catalog import load_model

TINY = Path(__file__).resolve().parents[3] / "resources" / "vllm-models" / "tiny-deepseek-v4" / "config.json"
GIB = 1 << 30


def tiny_card() -> ModelCard:
    return model_card_from_config(json.loads(TINY.read_text()), str(TINY))


def cpu_plan(card: ModelCard, budget: int, max_model_len: int = 4096, **kwargs: Any) -> Any:
    defaults: dict[str, Any] = {
        "backend": V4Backend.CPU,
        "kv_cache_dtype": "auto",
        "kv_budget_bytes": budget,
        "max_model_len": max_model_len,
        "max_num_batched_tokens": max(max_model_len, 2048),
        "concurrent_batches": 1,
        "release": (0, 32),
    }
    return plan_v4_kv(card, **{**defaults, **kwargs})


def test_fp8_ds_mla_pages_are_584_byte_rows_padded_to_576() -> None:
    specs = cache_specs(
        tiny_card(), backend=V4Backend.CPU, kv_cache_dtype="fp8_ds_mla", max_model_len=4096, max_in_flight_tokens=4096
    )
    pages = {
        name: (s.block_size, s.real_page_size_bytes, s.page_size_bytes, s.pages_per_request)
        for name, s in specs.items()
    }
    assert pages == {
        "swa": (64, 64 * 584, 37440, 4096 // 64 + 1),  # 37,376 → 65 × 576
        "c4_latent": (256, 64 * 584, 37440, 16),
        "c128_latent": (256, 2 * 584, 1728, 16),  # 1,168 → 3 × 576
        "indexer": (256, 64 * 132, 8640, 16),  # 128 fp8 + 4 B scale per row
        "compressor_state:c4_indexer": (4, 4 * 2 * 2 * 128 * 4, 8640, 1025),
        "compressor_state:c4": (4, 4 * 2 * 2 * 512 * 4, 32832, 1025),
        "compressor_state:c128": (8, 8 * 2 * 512 * 4, 32832, 513),
    }


def test_the_tiny_model_gives_what_vllms_get_kv_cache_configs_gave() -> None:
    # vLLM 0.32.0 CPU build, tiny V4 (compress_ratios 0,4,128,4), max_model_len 4096, v4_kv_probe.py.
    for budget, blocks, tokens, concurrency in (
        (GIB, 11436, 27815, 6.790973871733967),
        (3 * GIB, 34309, 83449, 20.37351543942993),
    ):
        plan = cpu_plan(tiny_card(), budget)
        assert (plan.num_blocks, plan.tokens, plan.max_concurrency) == (blocks, tokens, concurrency)
    groups = [(g.kinds, g.layers, g.page_size_bytes, g.pages_per_request) for g in plan.groups]
    assert groups == [
        (("swa",), 2, 74880, 65),  # the SWA bucket split in two: 2 repeats a group
        (("swa",), 2, 74880, 65),
        (("indexer", "c4_latent", "c128_latent"), 5, 2 * 8640 + 2 * 37440 + 1728, 16),
        (("compressor_state",), 4, 2 * 8640 + 2 * 32832, 1025),
        (("compressor_state",), 1, 32832, 513),
    ]
    assert plan.bytes_per_block == 93888 and plan.blocks_per_request == 65 + 65 + 16 + 1025 + 513


def test_breakdown_sums_to_the_bytes_per_token_that_reproduce_the_token_count() -> None:
    plan = cpu_plan(tiny_card(), GIB)
    parts = plan.breakdown()
    assert set(parts) == {"swa", "c4_latent", "c128_latent", "indexer", "compressor_state", "padding"}
    assert sum(parts.values()) == pytest.approx(plan.kv_bytes_per_token_per_gpu)
    assert plan.kv_bytes_per_token_per_gpu == 93888 * 1684 / 4096
    assert abs(plan.num_blocks * plan.bytes_per_block / plan.kv_bytes_per_token_per_gpu - plan.tokens) < 1
    assert parts["c128_latent"] == 16 * 1728 / 4096
    assert parts["indexer"] == 16 * 2 * 8640 / 4096


def test_short_max_model_len_caps_the_sliding_windows() -> None:
    plan = cpu_plan(tiny_card(), GIB, max_model_len=1024)  # 2,048 in flight but no request is longer than 1,024
    assert [g.pages_per_request for g in plan.groups] == [17, 17, 4, 257, 129]


@pytest.mark.parametrize(
    ("model", "per_token"),
    [
        # FlashMLA (fp8_ds_mla), max_model_len 1,048,576, 8,192 batched tokens, 40 GiB
        ("deepseek-v4-flash", 1002240 * 7450 / 1048576),
        ("deepseek-v4-pro", 1435968 * 7450 / 1048576),
    ],
)
def test_flash_and_pro_on_flashmla_at_a_million_tokens(model: str, per_token: float) -> None:
    plan = plan_v4_kv(
        load_model(model),
        backend=V4Backend.CUDA_FLASHMLA,
        kv_cache_dtype="auto",
        kv_budget_bytes=40 * GIB,
        max_model_len=1 << 20,
        max_num_batched_tokens=8192,
        concurrent_batches=1,
        release=(0, 32),
    )
    assert plan.kv_cache_dtype == "fp8_ds_mla"
    assert plan.kv_bytes_per_token_per_gpu == per_token
    parts = plan.breakdown()
    card = load_model(model)
    assert card.v4 is not None
    c4 = card.v4.layers_with_ratio(4, 0, card.num_hidden_layers, card.num_hidden_layers)
    c128 = card.v4.layers_with_ratio(128, 0, card.num_hidden_layers, card.num_hidden_layers)
    # at max_model_len the compressed latents cost their page over 256 tokens, per layer
    assert parts["c4_latent"] == c4 * 37440 / 256 and parts["c128_latent"] == c128 * 1728 / 256
    assert parts["indexer"] == c4 * 8640 / 256


def test_flashinfer_rows_are_plain_bf16_or_fp8() -> None:
    card = load_model("deepseek-v4-flash")
    kwargs: dict[str, Any] = {"max_model_len": 65536, "max_in_flight_tokens": 8192}
    bf16 = cache_specs(card, backend=V4Backend.CUDA_FLASHINFER, kv_cache_dtype="bfloat16", **kwargs)
    fp8 = cache_specs(card, backend=V4Backend.CUDA_FLASHINFER, kv_cache_dtype="fp8", **kwargs)
    assert (bf16["c4_latent"].page_size_bytes, fp8["c4_latent"].page_size_bytes) == (64 * 1024, 64 * 512)
    assert bf16["indexer"].page_size_bytes == 8704  # 8,448 rounded to 512
    assert bf16["compressor_state:c4"].page_size_bytes == 32768  # no padding at 512


def test_mtp_adds_one_swa_layer_on_the_last_stage() -> None:
    card = load_model("deepseek-v4-flash")
    common: dict[str, Any] = {
        "backend": V4Backend.CUDA_FLASHMLA,
        "kv_cache_dtype": "auto",
        "kv_budget_bytes": 40 * GIB,
        "max_model_len": 131072,
        "max_num_batched_tokens": 8192,
        "concurrent_batches": 1,
        "release": (0, 32),
    }
    plain = plan_v4_kv(card, **common)
    mtp = plan_v4_kv(card, mtp=True, **common)
    assert sum(g.layers for g in mtp.groups if g.kinds == ("swa",)) == 44
    assert sum(g.layers for g in plain.groups if g.kinds == ("swa",)) == 43
    first = plan_v4_kv(card, mtp=True, stage=(0, 22), **{**common, "concurrent_batches": 2})
    last = plan_v4_kv(card, mtp=True, stage=(22, 43), **{**common, "concurrent_batches": 2})
    assert sum(g.layers for g in first.groups) + sum(g.layers for g in last.groups) == sum(g.layers for g in mtp.groups)
    assert min_blocks_over_stages([first, last]) == min(first.num_blocks, last.num_blocks)
    assert first.blocks_per_request == last.blocks_per_request  # every worker counts every global group


def test_resolution_of_the_kv_dtype_follows_the_backend() -> None:
    assert resolve_kv_cache_dtype(V4Backend.CPU, "auto") == "fp8_ds_mla"
    assert resolve_kv_cache_dtype(V4Backend.ROCM, "fp8") == "fp8_ds_mla"
    assert resolve_kv_cache_dtype(V4Backend.CUDA_FLASHINFER, "auto") == "auto"
    assert cuda_backend(9) is V4Backend.CUDA_FLASHMLA and cuda_backend(10) is V4Backend.CUDA_FLASHMLA
    assert cuda_backend(12) is V4Backend.CUDA_FLASHINFER_SM120
    assert cuda_backend(10, "FLASHINFER_MLA_SPARSE_DSV4") is V4Backend.CUDA_FLASHINFER


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kv_cache_dtype": "bfloat16"}, "vllm.kv_cache_dtype"),  # fp8_ds_mla layout has no bf16
        ({"kv_cache_dtype": "int8"}, "vllm.kv_cache_dtype"),
        ({"backend": V4Backend.CUDA_FLASHINFER, "kv_cache_dtype": "fp8_ds_mla"}, "vllm.kv_cache_dtype"),
        ({"kv_budget_bytes": 0}, "kv_budget_bytes"),
        ({"kv_budget_bytes": 10 << 20}, "kv_budget_bytes"),  # not one request of 4,096 tokens
        ({"max_model_len": 0}, "vllm.max_model_len"),
        ({"max_num_batched_tokens": -1}, "vllm.max_num_batched_tokens"),
        ({"concurrent_batches": 0}, "concurrent_batches"),
        ({"stage": (3, 3)}, "stage"),
        ({"stage": (0, 5)}, "stage"),
        ({"tensor_parallel": True}, "layout.tensor_parallel"),
        ({"mtp": True}, "vllm.speculative_config"),  # the tiny model has no MTP layer
        ({"indexer_kv_dtype": "fp16"}, "vllm.attention_config.indexer_kv_dtype"),
        ({"backend": "cpu"}, "backend"),
    ],
)
def test_bad_inputs_are_refused_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as refused:
        cpu_plan(tiny_card(), GIB, **kwargs)
    assert refused.value.field == field


def test_a_card_without_v4_is_refused() -> None:
    card = dataclasses.replace(tiny_card(), v4=None)
    with pytest.raises(InputError, match="not a DeepSeek-V4"):
        cpu_plan(card, GIB)


@settings(max_examples=60, deadline=None)
@given(
    budget=st.integers(min_value=200 << 20, max_value=64 << 30),
    extra=st.integers(min_value=0, max_value=8 << 30),
    max_model_len=st.sampled_from([1024, 4096]),
)
def test_more_budget_never_buys_fewer_tokens(budget: int, extra: int, max_model_len: int) -> None:
    card = tiny_card()
    try:
        small = cpu_plan(card, budget, max_model_len=max_model_len)
    except InputError:
        return
    large = cpu_plan(card, budget + extra, max_model_len=max_model_len)
    assert large.num_blocks >= small.num_blocks and large.tokens >= small.tokens
    assert large.max_concurrency >= small.max_concurrency
