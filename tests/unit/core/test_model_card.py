"""ModelCard from config.json: DeepSeek V3 / V3.2 / Kimi-K2 shapes read right, anything else refused by field."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from meshdeck.core.errors import InputError
from meshdeck.core.model_card import CHECKPOINT_BF16, CHECKPOINT_FP8_BLOCK, CHECKPOINT_INT4, model_card_from_config

RESOURCES = Path(__file__).resolve().parents[3] / "resources" / "models"


def config(name: str = "deepseek-v3.2.json") -> dict:
    return json.loads((RESOURCES / name).read_text())


def test_v32_config_reads_mla_moe_and_indexer_shape(v32):
    assert v32.architecture == "DeepseekV32ForCausalLM"
    assert (v32.num_hidden_layers, v32.dense_layer_count, v32.moe_layer_count) == (61, 3, 58)
    assert (v32.n_routed_experts, v32.n_shared_experts, v32.num_experts_per_tok) == (256, 1, 8)
    assert v32.mla_latent_dim == 576
    assert v32.has_sparse_indexer and (v32.index_n_heads, v32.index_head_dim, v32.index_topk) == (64, 128, 2048)
    assert v32.checkpoint_dtype == CHECKPOINT_FP8_BLOCK and v32.weight_block_size == (128, 128)


def test_v3_has_no_indexer(v3):
    assert v3.architecture == "DeepseekV3ForCausalLM"
    assert not v3.has_sparse_indexer


def test_moe_layer_rule_follows_first_k_dense_replace(v3):
    assert [v3.is_moe_layer(i) for i in range(5)] == [False, False, False, True, True]
    assert v3.moe_layers_between(0, 4) == 1
    assert v3.moe_layers_between(30, 61) == 31


def test_non_deepseek_architecture_is_refused_naming_architectures():
    data = config()
    data["architectures"] = ["LlamaForCausalLM"]
    with pytest.raises(InputError) as err:
        model_card_from_config(data, "cfg.json")
    assert err.value.field == "cfg.json: architectures"
    assert "DeepseekV32ForCausalLM" in err.value.problem


@pytest.mark.parametrize("field", ["hidden_size", "kv_lora_rank", "n_routed_experts", "vocab_size"])
def test_missing_or_bad_field_is_named(field):
    data = config()
    del data[field]
    with pytest.raises(InputError) as err:
        model_card_from_config(data, "cfg.json")
    assert err.value.field == f"cfg.json: {field}"
    data[field] = -3
    with pytest.raises(InputError):
        model_card_from_config(data, "cfg.json")


def test_quantization_config_decides_the_checkpoint_format():
    bf16 = config()
    del bf16["quantization_config"]
    assert model_card_from_config(bf16, "x").checkpoint_dtype == CHECKPOINT_BF16
    int4 = config("deepseek-v3.json")
    int4["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": {"weights": {"num_bits": 4, "group_size": 32}}},
    }
    card = model_card_from_config(int4, "x")
    assert card.checkpoint_dtype == CHECKPOINT_INT4 and card.int4_group_size == 32
    odd = copy.deepcopy(int4)
    odd["quantization_config"] = {"quant_method": "bitsandbytes"}
    with pytest.raises(InputError) as err:
        model_card_from_config(odd, "x")
    assert err.value.field == "x: quantization_config.quant_method"


def test_kimi_k2_shape_loads_as_deepseek_v3_architecture(kimi_k2):
    assert kimi_k2.num_attention_heads == 64 and kimi_k2.n_routed_experts == 384
    assert kimi_k2.dense_layer_count == 1 and kimi_k2.checkpoint_dtype == CHECKPOINT_INT4
