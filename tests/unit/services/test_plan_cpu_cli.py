"""`meshdeck plan --cpu`: one engine on vLLM's CPU build, its KV cache from VLLM_CPU_KVCACHE_SPACE — the numbers
vLLM 0.32.0's CPU build logged for resources/vllm-models/tiny-deepseek-v3 (tests/fixtures/agent/SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from meshdeck.cli import main

TINY_V3 = str(Path(__file__).resolve().parents[3] / "resources" / "vllm-models" / "tiny-deepseek-v3")


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["plan", "--model", TINY_V3, "--cpu", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("args", "tokens", "concurrency"), [
    (["--tensor-parallel", "2"], 233_008, 113.77),  # "CPU KV cache size: 233,008 tokens ... 113.77x" (TP=2)
    (["--pipeline-parallel", "2"], 466_032, 227.55),  # "CPU KV cache size: 466,032 tokens ... 227.55x" (PP=2)
])  # fmt: skip
def test_the_contract_prints_what_vllms_cpu_build_logged(capsys, args, tokens, concurrency) -> None:
    payload = _plan(capsys, "--kv-cache-space-gib", "1", "--max-model-len", "2048", *args)
    layout = payload["layouts"][0]
    assert layout["kv_tokens_per_replica"] == tokens
    assert round(layout["max_concurrency"], 2) == concurrency
    layers = 4 // layout["pipeline_parallel"]
    assert layout["kv_bytes_per_token_per_gpu"] == layers * (512 + 64) * 2  # one bf16 latent per layer
    assert payload["engine"] == "vllm-cpu" and payload["settings"]["kv_cache_space_gib"] == 1


def test_a_max_model_len_off_the_block_logs_concurrency_times_length(capsys) -> None:
    """vLLM 0.32 logs int(max_concurrency × max_model_len): with 2,001 tokens a request takes 126 blocks of 16."""
    layout = _plan(capsys, "--kv-cache-space-gib", "1", "--max-model-len", "2001")["layouts"][0]
    blocks = (1 << 30) // (16 * 4 * 1152)
    assert layout["kv_num_blocks"] == blocks
    assert layout["kv_tokens_per_replica"] == int(blocks / 126 * 2001) < blocks * 16


def test_two_budgets_scale_the_blocks(capsys) -> None:
    one = _plan(capsys, "--kv-cache-space-gib", "1", "--max-model-len", "2048")["layouts"][0]
    three = _plan(capsys, "--kv-cache-space-gib", "3", "--max-model-len", "2048")["layouts"][0]
    assert three["kv_num_blocks"] == (3 << 30) // (16 * 4 * 1152) and three["kv_num_blocks"] > 2 * one["kv_num_blocks"]


@pytest.mark.parametrize(("args", "flag"), [
    ([], "--kv-cache-space-gib"),  # the budget is what the plan is about
    (["--kv-cache-space-gib", "1", "--gpu", "H200-SXM-141GB"], "--gpu"),
    (["--kv-cache-space-gib", "1", "--disaggregated"], "--disaggregated"),
    (["--kv-cache-space-gib", "0"], "--kv-cache-space-gib"),
    (["--kv-cache-space-gib", "1", "--tensor-parallel", "3"], "--tensor-parallel"),  # 4 heads
    (["--kv-cache-space-gib", "1", "--max-model-len", "999999"], "--max-model-len"),
    (["--kv-cache-space-gib", "1", "--kv-cache-dtype", "fp8"], "--kv-cache-dtype"),
])  # fmt: skip
def test_what_the_cpu_plan_cannot_answer_is_refused_naming_the_flag(capsys, args, flag) -> None:
    assert main(["plan", "--model", TINY_V3, "--cpu", *args]) == 2
    assert f"meshdeck: error: {flag}:" in capsys.readouterr().err


def test_the_budget_flag_without_cpu_is_refused(capsys) -> None:
    assert main(["plan", "--kv-cache-space-gib", "1"]) == 2
    assert "--kv-cache-space-gib: is the CPU build's KV budget" in capsys.readouterr().err


def test_the_text_form_says_it_as_vllm_logs_it(capsys) -> None:
    assert main(["plan", "--model", TINY_V3, "--cpu", "--kv-cache-space-gib", "1", "--max-model-len", "2048"]) == 0
    assert "CPU KV cache size: 233,008 tokens" in capsys.readouterr().out


TINY_V4 = str(Path(__file__).resolve().parents[3] / "resources" / "vllm-models" / "tiny-deepseek-v4")


@pytest.mark.parametrize(("gib", "tokens", "blocks"), [(1, 27_815, 11_436), (3, 83_449, 34_309)])
def test_the_contract_prints_v4s_grouped_kv_as_vllm_sizes_it(capsys, gib, tokens, blocks) -> None:
    """vLLM 0.32's own get_kv_cache_configs on the tiny V4 it builds on CPU gave these (tests/integration/vllm/
    test_v4_kv_matches_vllm.py runs it): 4,096 tokens per request, fp8_ds_mla pages in blocks of 256 tokens."""
    assert main(["plan", "--model", TINY_V4, "--cpu", "--json", "--kv-cache-space-gib", str(gib),
                 "--max-model-len", "4096", "--tensor-parallel", "1"]) == 0  # fmt: skip
    layout = json.loads(capsys.readouterr().out)["layouts"][0]
    assert (layout["kv_tokens_per_replica"], layout["kv_num_blocks"]) == (tokens, blocks)
    assert layout["kv_cache_dtype"] == "fp8_ds_mla"
    parts = layout["kv_bytes_per_token_by_part"]
    assert set(parts) >= {"swa", "c4_latent", "c128_latent", "indexer", "compressor_state"}
    assert sum(parts.values()) == pytest.approx(layout["kv_bytes_per_token_per_gpu"], abs=1)
    assert layout["kv_tokens_per_replica"] * layout["kv_bytes_per_token_per_gpu"] <= gib << 30
