"""meshdeck's tiny DeepSeek-shaped vLLM models: the tokenizer files are exactly what the generator writes, cover
every token id the config can emit, and the configs keep the head sizes vLLM's MLA needs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from meshdeck.core.model_card import model_card_from_config

REPO = Path(__file__).resolve().parents[2]
MODELS = sorted((REPO / "resources" / "vllm-models").iterdir())


def generator():
    spec = importlib.util.spec_from_file_location(
        "tiny_tokenizer", REPO / "packaging" / "vllm_cpu" / "tiny_tokenizer.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.name)
def test_the_tokenizer_files_are_the_generators_output(model: Path, tmp_path: Path) -> None:
    written = generator().write(tmp_path)
    for path in written:
        assert (model / path.name).read_bytes() == path.read_bytes(), f"regenerate {model / path.name}"


@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.name)
def test_every_token_id_the_model_can_emit_has_a_token(model: Path) -> None:
    config = json.loads((model / "config.json").read_text())
    vocab = json.loads((model / "tokenizer.json").read_text())["model"]["vocab"]
    assert sorted(vocab.values()) == list(range(config["vocab_size"]))
    assert (config["bos_token_id"], config["eos_token_id"]) == (0, 1)


@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.name)
def test_the_configs_keep_deepseeks_mla_head_sizes(model: Path) -> None:
    # smaller ones fail the first request in vLLM's CPU MLA ("Head dimension 96 is not supported by MLA")
    card = model_card_from_config(json.loads((model / "config.json").read_text()), str(model))
    if card.v4 is not None:
        # V4's one latent head as DeepSeek ships it (the CPU V4 attention is written for 512 = 448 NoPE + 64 RoPE),
        # every compress ratio V4 has (0, 4, 128) and a hash-routed layer
        assert (card.v4.head_dim, card.qk_rope_head_dim, card.v4.sliding_window) == (512, 64, 128)
        assert {0, 4, 128} <= set(card.v4.compress_ratios) and card.v4.num_hash_layers >= 1
        assert card.n_shared_experts == 1 and card.checkpoint_dtype == "bf16"
        return
    assert (card.kv_lora_rank, card.qk_rope_head_dim, card.qk_nope_head_dim, card.v_head_dim) == (512, 64, 128, 128)
    assert card.moe_layer_count > 0 and card.dense_layer_count > 0 and card.n_shared_experts == 1
