"""KV bytes per token follow VLLM-FACTS.md, and tokens round down to whole blocks as vLLM does."""

from __future__ import annotations

import pytest
from meshdeck.core.errors import InputError
from meshdeck.core.kv_cache import kv_capacity, kv_format, normalize_kv_cache_dtype
from meshdeck.core.units import GIB


@pytest.mark.parametrize(
    ("model", "dtype", "latent", "indexer", "vllm_value"),
    [
        ("v32", "auto", 1152, 132, "auto"),
        ("v32", "bf16", 1152, 132, "bfloat16"),
        ("v32", "fp8", 656, 132, "fp8_ds_mla"),
        ("v3", "auto", 1152, 0, "auto"),
        ("v3", "fp8", 576, 0, "fp8"),
    ],
)
def test_bytes_per_token_per_layer(request, gpu, model, dtype, latent, indexer, vllm_value):
    fmt = kv_format(request.getfixturevalue(model), gpu("H200-SXM-141GB"), dtype)
    assert (fmt.latent_bytes_per_token_per_layer, fmt.indexer_bytes_per_token_per_layer) == (latent, indexer)
    assert fmt.vllm_kv_cache_dtype == vllm_value


def test_flashmla_backends_use_64_token_blocks_and_triton_16(v32, v3, gpu):
    assert kv_format(v32, gpu("H200-SXM-141GB"), "auto").block_size == 64
    assert kv_format(v3, gpu("H100-SXM5-80GB"), "auto").block_size == 64
    assert kv_format(v3, gpu("A100-SXM4-80GB"), "auto").block_size == 16


def test_kimi_k2_log_46_80_gib_holds_715_072_tokens(kimi_k2, gpu):
    # vllm-project/recipes Kimi-K2-Think.md: "Available KV cache memory: 46.80 GiB" / "GPU KV cache size: 715,072 tokens"
    fmt = kv_format(kimi_k2, gpu("H200-SXM-141GB"), "auto")
    low = kv_capacity((int(46.795 * GIB),), (61,), fmt, 262144).tokens
    high = kv_capacity((int(46.805 * GIB),), (61,), fmt, 262144).tokens
    assert low <= 715_072 <= high
    assert 715_072 % 64 == 0


def test_replica_blocks_are_the_tightest_stage(v32, gpu):
    fmt = kv_format(v32, gpu("H200-SXM-141GB"), "auto")
    roomy, tight = 20 * GIB, 10 * GIB
    both = kv_capacity((roomy, tight), (30, 31), fmt, 16384)
    alone = kv_capacity((tight,), (31,), fmt, 16384)
    assert both.num_blocks == alone.num_blocks
    assert both.tokens % 64 == 0


def test_max_concurrency_is_blocks_over_blocks_per_request(v32, gpu):
    fmt = kv_format(v32, gpu("H200-SXM-141GB"), "auto")
    capacity = kv_capacity((30 * GIB,), (61,), fmt, 163_840)
    assert capacity.max_concurrency == pytest.approx(capacity.num_blocks / (163_840 / 64))


def test_v32_tp8_pp4_log_concurrency_is_tokens_over_max_model_len():
    # vllm issue #31903: "GPU KV cache size: 1,214,464 tokens" and "Maximum concurrency for 163,840 tokens
    # per request: 7.41x" — concurrency = blocks / blocks-per-request with 64-token blocks.
    from meshdeck.core.kv_cache import kv_capacity_from_blocks

    capacity = kv_capacity_from_blocks(1_214_464 // 64, 64, 163_840)
    assert capacity.tokens == 1_214_464
    assert round(capacity.max_concurrency, 2) == 7.41


def test_unknown_kv_dtype_is_refused_naming_the_flag():
    with pytest.raises(InputError) as err:
        normalize_kv_cache_dtype("int8")
    assert err.value.field == "--kv-cache-dtype"
