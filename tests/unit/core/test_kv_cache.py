"""KV bytes per token follow VLLM-FACTS.md, and tokens round down to whole blocks as vLLM does."""

from __future__ import annotations

import pytest
from meshdeck.core.errors import InputError
from meshdeck.core.kv_cache import KV_CACHE_DTYPES, kv_capacity, kv_format, normalize_kv_cache_dtype
from meshdeck.core.units import GIB


# vLLM 0.33.0 source (the wheel app/meshdeck/launch/vllm_known_flags.py was generated from):
# - bytes per token of an MLA layer = head_size (kv_lora_rank + qk_rope_head_dim = 576) × the cache dtype's size,
#   MLA has no separate V (vllm/v1/kv_cache_interface.py:585-590 state_content_size_bytes, :743 head_size_v = 0);
#   fp8_ds_mla / nvfp4_ds_mla are opaque packed rows of 656 / 352 bytes
#   (vllm/model_executor/layers/attention/mla_attention.py:1386 state_content_bytes);
# - V3.2's indexer key cache: index_head_dim + index_head_dim // 128 × 4 uint8 bytes = 132, whatever the KV dtype
#   (vllm/model_executor/models/deepseek_v2.py:731-736);
# - which backend stores what: on SM90 FLASHMLA_SPARSE takes auto/bfloat16/fp8/fp8_ds_mla and serves every
#   quantized dtype as fp8_ds_mla (flashmla_sparse.py:149-155, mla_attention.py:359-376), fp8_e4m3 is not in its
#   list so the next sparse backend, FLASHINFER_MLA_SPARSE_SM90, stores a plain fp8 latent
#   (flashinfer_mla_sparse_sm90.py:148-153; order in vllm/platforms/cuda.py:138-155); on SM100 a quantized cache
#   prefers FLASHINFER_MLA_SPARSE (plain fp8; it refuses fp8_ds_mla) over FLASHMLA_SPARSE
#   (vllm/platforms/cuda.py:101-105, flashinfer_mla_sparse.py:84-90 and :134-135).
@pytest.mark.parametrize(
    ("model", "gpu_name", "dtype", "latent", "indexer", "vllm_value", "backend"),
    [
        ("v32", "H200-SXM-141GB", "auto", 1152, 132, "auto", "FLASHMLA_SPARSE"),
        ("v32", "H200-SXM-141GB", "bfloat16", 1152, 132, "bfloat16", "FLASHMLA_SPARSE"),
        ("v32", "H200-SXM-141GB", "fp8", 656, 132, "fp8_ds_mla", "FLASHMLA_SPARSE"),
        ("v32", "H200-SXM-141GB", "fp8_ds_mla", 656, 132, "fp8_ds_mla", "FLASHMLA_SPARSE"),
        ("v32", "H200-SXM-141GB", "fp8_e4m3", 576, 132, "fp8_e4m3", "FLASHINFER_MLA_SPARSE_SM90"),
        ("v32", "B200", "auto", 1152, 132, "auto", "FLASHMLA_SPARSE"),
        ("v32", "B200", "fp8", 576, 132, "fp8", "FLASHINFER_MLA_SPARSE"),
        ("v32", "B200", "fp8_e4m3", 576, 132, "fp8_e4m3", "FLASHINFER_MLA_SPARSE"),
        ("v32", "B200", "fp8_ds_mla", 656, 132, "fp8_ds_mla", "FLASHMLA_SPARSE"),
        ("v32", "B200", "nvfp4_ds_mla", 352, 132, "nvfp4_ds_mla", "FLASHMLA_SPARSE"),
        ("v3", "H200-SXM-141GB", "auto", 1152, 0, "auto", "FLASH_ATTN_MLA"),
        ("v3", "H200-SXM-141GB", "bfloat16", 1152, 0, "bfloat16", "FLASH_ATTN_MLA"),
        ("v3", "H200-SXM-141GB", "fp8", 576, 0, "fp8", "FLASHMLA"),
        ("v3", "H200-SXM-141GB", "fp8_e4m3", 576, 0, "fp8_e4m3", "FLASHMLA"),
        ("v3", "B200", "fp8", 576, 0, "fp8", "FLASHINFER_MLA"),
        ("v3", "A100-SXM4-80GB", "fp8_e4m3", 576, 0, "fp8_e4m3", "TRITON_MLA"),
    ],
)
def test_bytes_per_token_per_layer_are_vllms_for_each_kv_dtype(
    request, gpu, model, gpu_name, dtype, latent, indexer, vllm_value, backend
):
    """Each accepted --kv-cache-dtype costs what vLLM 0.33.0 allocates (sources in the comment above)."""
    fmt = kv_format(request.getfixturevalue(model), gpu(gpu_name), dtype)
    assert (fmt.latent_bytes_per_token_per_layer, fmt.indexer_bytes_per_token_per_layer) == (latent, indexer)
    assert (fmt.vllm_kv_cache_dtype, fmt.attention_backend) == (vllm_value, backend)


def test_sparse_backends_of_v32_allocate_64_token_blocks(v32, gpu):
    """The indexer backend takes only 64-token blocks on CUDA (vllm/v1/attention/backends/mla/indexer.py:285-286);
    vLLM picks the smallest block size every backend of the model accepts (vllm/platforms/interface.py:700-740),
    so FLASHINFER_MLA_SPARSE's MultipleOf(32) still gives 64."""
    for gpu_name, dtype in (("H200-SXM-141GB", "fp8_e4m3"), ("B200", "fp8"), ("B200", "nvfp4_ds_mla")):
        assert kv_format(v32, gpu(gpu_name), dtype).block_size == 64


@pytest.mark.parametrize(
    ("model", "gpu_name", "dtype", "reason"),
    [
        ("v3", "H200-SXM-141GB", "fp8_ds_mla", "V3.2"),
        ("v3", "B200", "nvfp4_ds_mla", "V3.2"),
        ("v32", "H200-SXM-141GB", "nvfp4_ds_mla", "Blackwell"),
    ],
)
def test_packed_sparse_formats_are_refused_where_vllm_has_no_backend_for_them(
    request, gpu, model, gpu_name, dtype, reason
):
    with pytest.raises(InputError) as err:
        kv_format(request.getfixturevalue(model), gpu(gpu_name), dtype)
    assert err.value.field == "--kv-cache-dtype"
    assert reason in str(err.value)


def test_flashmla_backends_use_64_token_blocks_and_triton_16(v32, v3, gpu):
    assert kv_format(v32, gpu("H200-SXM-141GB"), "auto").block_size == 64
    assert kv_format(v3, gpu("H100-SXM5-80GB"), "fp8").block_size == 64
    assert kv_format(v3, gpu("A100-SXM4-80GB"), "auto").block_size == 16


@pytest.mark.parametrize(
    ("gpu_name", "dtype", "release", "backend", "block"),
    [
        ("H200-SXM-141GB", "auto", (0, 11), "FLASHMLA", 64),  # 0.11 forces FlashMLA on Hopper
        ("H200-SXM-141GB", "auto", (0, 12), "FLASH_ATTN_MLA", 16),  # then FA MLA leads, BF16 caches only
        ("H200-SXM-141GB", "fp8", (0, 33), "FLASHMLA", 64),
        ("B200", "fp8", (0, 14), "CUTLASS_MLA", 128),
        ("B200", "fp8", (0, 15), "FLASHINFER_MLA", 32),  # the 0.19 / 0.22 B200 logs: block size 32
    ],
)
def test_the_dense_backend_follows_the_releases_priority_list(v3, gpu, gpu_name, dtype, release, backend, block):
    fmt = kv_format(v3, gpu(gpu_name), dtype, release)
    assert (fmt.attention_backend, fmt.block_size) == (backend, block)


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


@pytest.mark.parametrize("value", ["int8", "bf16", "float16", "fp8_e5m2", "fp8_inc", "nvfp4", "turboquant_k8v4"])
def test_kv_dtypes_vllm_cannot_serve_for_deepseek_are_refused_naming_the_flag_and_the_accepted_values(value):
    """float16 is refused for a BF16 model (vllm/config/vllm.py:1492-1508); fp8_e5m2, fp8_inc and the other
    CacheDType values (vllm/config/cache.py:44-67) are listed by no CUDA MLA backend (supported_kv_cache_dtypes in
    vllm/v1/attention/backends/mla/*.py), so vLLM finds no attention backend for them."""
    with pytest.raises(InputError) as err:
        normalize_kv_cache_dtype(value)
    assert err.value.field == "--kv-cache-dtype"
    assert ", ".join(KV_CACHE_DTYPES) in str(err.value)


def test_accepted_kv_dtypes_are_vllms_own_spellings():
    assert KV_CACHE_DTYPES == ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_ds_mla", "nvfp4_ds_mla")
