"""meshdeck.core.v4_kv against vLLM 0.32.0's own code (v4_kv_probe.py, run with vLLM's python).

CPU: vLLM builds the tiny V4 model as its CPU worker does and sizes the KV cache with get_kv_cache_configs; meshdeck
must give the same groups, num_blocks, tokens ("CPU KV cache size: N tokens") and concurrency. CUDA: the spec
objects the FlashMLA and FlashInfer V4 layers return, written here from vLLM's source (attention.py, compressor.py,
sparse_swa.py), go through the same vLLM grouping code for full-size V4-Flash and V4-Pro.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from meshdeck.core.errors import InputError
from meshdeck.core.model_card import ModelCard, model_card_from_config
from meshdeck.core.v4_kv import V4Backend, V4KvPlan, plan_v4_kv
from meshdeck.services.catalog import load_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

PROBE = Path(__file__).with_name("v4_kv_probe.py")
TINY = Path(__file__).parents[3] / "resources" / "vllm-models" / "tiny-deepseek-v4"
GIB = 1 << 30


def _probe(vllm_executable: str, args: list[str], stdin: str | None = None) -> dict[str, Any]:
    python = Path(vllm_executable).with_name("python")
    done = subprocess.run(
        [str(python), str(PROBE), *args], input=stdin, capture_output=True, text=True, timeout=900, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("V4KV_PROBE ")]
    assert done.returncode == 0 and lines, f"probe failed ({done.returncode}): {done.stderr[-3000:]}"
    answer: dict[str, Any] = json.loads(lines[-1].removeprefix("V4KV_PROBE "))
    return answer


def _assert_same(plan: V4KvPlan, run: dict[str, Any]) -> None:
    assert plan.num_blocks == run["num_blocks"], run
    assert plan.tokens == run["tokens"], run
    assert plan.max_concurrency == run["max_concurrency"], run
    vllm_groups = [
        (len(group["layers"]), group["spec"]["block_size"], group["spec"]["page_size_bytes"]) for group in run["groups"]
    ]
    assert [(g.layers, g.block_size, g.page_size_bytes) for g in plan.groups] == vllm_groups
    pages = [group["max_memory_usage_bytes"] // group["spec"]["page_size_bytes"] for group in run["groups"]]
    assert [g.pages_per_request for g in plan.groups] == pages


@pytest.mark.parametrize("max_model_len", [4096, 1024])
def test_cpu_tiny_v4_matches_vllms_kv_cache_configs(vllm_executable: str, max_model_len: int) -> None:
    budgets = [1 * GIB, 3 * GIB]
    args = ["model", str(TINY), "--max-model-len", str(max_model_len)]
    answer = _probe(vllm_executable, args + [f"--budget={b}" for b in budgets])
    # vLLM's CPU build without AMX: fp8_ds_mla, 256-token blocks, no chunked prefill (platforms/cpu.py).
    assert answer["cache_dtype"] == "fp8_ds_mla" and answer["block_size"] == 256
    batched = max(max_model_len, 2048)
    assert answer["max_num_batched_tokens"] == batched and answer["max_in_flight_tokens"] == batched
    card = model_card_from_config(json.loads((TINY / "config.json").read_text()), str(TINY))
    for budget, run in zip(budgets, answer["runs"], strict=True):
        plan = plan_v4_kv(
            card,
            backend=V4Backend.CPU,
            kv_cache_dtype="auto",
            kv_budget_bytes=budget,
            max_model_len=max_model_len,
            max_num_batched_tokens=batched,
            concurrent_batches=1,
            release=(0, 32),
        )
        _assert_same(plan, run)


def _cuda_layer_rows(card: ModelCard, backend: V4Backend, kv_cache_dtype: str, mtp_layers: int) -> list[dict[str, Any]]:
    """The spec kwargs each V4 cache layer passes on CUDA, in registration order, read off vLLM 0.32's source:
    DeepseekV4Indexer / DeepseekV4IndexerCache, DeepseekV4SWACache, DeepseekV4Attention.get_kv_cache_spec,
    CompressorStateCache; plus customize_attention_spec's MultipleOf(256) for the fixed-256 backends."""
    assert card.v4 is not None
    ds = backend.uses_fp8_ds_mla_layout
    cache_dtype = "fp8_ds_mla" if ds else kv_cache_dtype
    latent_dtype = "uint8" if ds else ("float8_e4m3fn" if kv_cache_dtype.startswith("fp8") else "bfloat16")
    align = 576 if ds else 512
    base = {"num_kv_heads": 1, "max_tp_shards": 1, "alignment": align}
    index_row = card.index_head_dim + card.index_head_dim // 128 * 4
    rows: list[dict[str, Any]] = []
    for i in range(card.num_hidden_layers + mtp_layers):
        ratio = max(1, card.v4.compress_ratios[i]) if i < card.num_hidden_layers else 1
        name = f"model.layers.{i}.attn"
        swa = {
            **base,
            "class": "SlidingWindowMLASpec",
            "name": f"{name}.swa_cache",
            "block_size": 64,
            "head_size": card.v4.head_dim,
            "dtype": latent_dtype,
            "sliding_window": card.v4.sliding_window,
            "cache_dtype_str": cache_dtype,
            "state_content_bytes": 584 if ds else None,
            "model_version": "deepseek_v4",
            "kv_quant_mode": cache_dtype,
        }
        coff = 2 if ratio == 4 else 1
        state = {
            **base,
            "class": "SlidingWindowMLASpec",
            "name": f"{name}.compressor.state_cache",
            "block_size": 4 if ratio == 4 else 8,
            "head_size": 2 * coff * card.v4.head_dim,
            "dtype": "float32",
            "sliding_window": coff * ratio,
        }
        latent = {
            **base,
            "class": "MLAAttentionSpec",
            "name": name,
            "block_size": 256,
            "head_size": card.v4.head_dim,
            "dtype": latent_dtype,
            "tokens_per_state": ratio,
            "cache_dtype_str": cache_dtype,
            "model_version": "deepseek_v4",
            "kv_quant_mode": cache_dtype,
            "state_content_bytes": 584 if ds else None,
            "block_stride_alignment_multiple_of": 256,
        }
        if ratio == 4:
            rows.append(
                {
                    **base,
                    "class": "MLAAttentionSpec",
                    "name": f"{name}.indexer.k_cache",
                    "block_size": 256,
                    "head_size": index_row,
                    "dtype": "uint8",
                    "tokens_per_state": 4,
                    "block_stride_alignment_multiple_of": 256,
                }
            )
            rows.append(
                {**state, "name": f"{name}.indexer.compressor.state_cache", "head_size": 4 * card.index_head_dim}
            )
        rows.append(swa)
        if ratio > 1:
            rows += [latent, state]
    return rows


CUDA_CASES = [
    ("deepseek-v4-flash", V4Backend.CUDA_FLASHMLA, "auto", 131072, False),
    ("deepseek-v4-flash", V4Backend.CUDA_FLASHMLA, "fp8", 1048576, True),
    ("deepseek-v4-pro", V4Backend.CUDA_FLASHMLA, "auto", 131072, False),
    ("deepseek-v4-pro", V4Backend.CUDA_FLASHINFER, "bfloat16", 65536, True),
    ("deepseek-v4-flash", V4Backend.CUDA_FLASHINFER, "fp8", 262144, False),
]


@pytest.mark.parametrize(("model", "backend", "kv_cache_dtype", "max_model_len", "mtp"), CUDA_CASES)
def test_cuda_v4_specs_through_vllms_grouping_match(
    vllm_executable: str, model: str, backend: V4Backend, kv_cache_dtype: str, max_model_len: int, mtp: bool
) -> None:
    card = load_model(model)
    batched = 8192
    budgets = [1 * GIB, 20 * GIB, 61 * GIB + 12345]
    rows = _cuda_layer_rows(card, backend, kv_cache_dtype, card.num_nextn_predict_layers if mtp else 0)
    args = ["specs", "--max-model-len", str(max_model_len), f"--max-num-batched-tokens={batched}"]
    answer = _probe(
        vllm_executable, args + [f"--budget={b}" for b in budgets], json.dumps({"model_dir": str(TINY), "layers": rows})
    )
    assert answer["max_in_flight_tokens"] == batched
    for budget, run in zip(budgets, answer["runs"], strict=True):
        kwargs: dict[str, Any] = {
            "backend": backend,
            "kv_cache_dtype": kv_cache_dtype,
            "kv_budget_bytes": budget,
            "max_model_len": max_model_len,
            "max_num_batched_tokens": batched,
            "concurrent_batches": 1,
            "release": (0, 32),
            "mtp": mtp,
        }
        if "error" in run:  # vLLM refuses a budget that cannot hold one request; meshdeck must too
            with pytest.raises(InputError, match="kv_budget_bytes"):
                plan_v4_kv(card, **kwargs)
            continue
        _assert_same(plan_v4_kv(card, **kwargs), run)
    assert any("error" not in run for run in answer["runs"])
