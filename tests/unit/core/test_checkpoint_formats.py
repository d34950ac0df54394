"""Weight formats as quantized checkpoints declare them: NVFP4 (ModelOpt), AWQ int4, with the layers each keeps BF16.

The configs are tests/fixtures/checkpoints (see SOURCES.md there); byte counts are worked by hand from
vLLM 0.33's create_weights (modelopt.py, auto_awq.py) in each test's docstring.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from meshdeck.core.errors import InputError
from meshdeck.core.model_card import CHECKPOINT_INT4, CHECKPOINT_MXFP4, CHECKPOINT_NVFP4, model_card_from_config
from meshdeck.core.weights import ShardShape, layer_bytes, shard_totals, stage_total, stage_weights
from meshdeck.services.catalog import load_model

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "checkpoints"
TP8 = ShardShape(tensor_parallel=8, moe_ranks=8, expert_parallel=False, weights_dtype="nvfp4")


@pytest.fixture(scope="module")
def r1_fp4():
    return load_model(str(FIXTURES / "deepseek-r1-fp4"))


@pytest.fixture(scope="module")
def v32_awq():
    return load_model(str(FIXTURES / "deepseek-v3.2-exp-awq"))


def test_nvfp4_checkpoint_keeps_attention_and_the_mtp_layer_bf16(r1_fp4):
    """hf_quant_config.json beside config.json is read (as vLLM does): NVFP4, group 16; every layer's
    self_attn* excluded -> the four MLA families BF16; `model.layers.61*` -> the MTP layer BF16 whole."""
    assert r1_fp4.checkpoint_dtype == CHECKPOINT_NVFP4 and r1_fp4.quant_group_size == 16
    assert set(r1_fp4.quantized_families) >= {"dense_mlp", "shared_experts", "routed_experts"}
    assert not {"fused_qkv_a", "q_b_proj", "kv_b_proj", "o_proj"} & set(r1_fp4.quantized_families)
    assert r1_fp4.unquantized_layers == (61,)


def test_nvfp4_moe_layer_bytes_at_tp8(r1_fp4):
    """One MoE layer per GPU at TP=8 (no EP): local intermediate 2048/8 = 256, H = 7168.

    Routed expert: w13 weight 512·7168/2 = 1,835,008 + fp8 scales 512·7168/16 = 229,376 + 2+2 fp32 = 16;
    w2 weight 7168·256/2 = 917,504 + scales 7168·256/16 = 114,688 + 1+1 fp32 = 8 -> 3,096,600 per expert,
    × 256 experts = 792,729,600. Shared expert (gate_up 512×7168, down 7168×256): the same 3,096,600.
    MLA in BF16: fused_qkv_a (1536+576)·7168·2 = 30,277,632, q_b 16·192·1536·2 = 9,437,184,
    kv_b 16·256·512·2 = 4,194,304, o_proj 7168·2048·2 = 29,360,128 -> 73,269,248; no FP8 block scales.
    """
    parts = layer_bytes(r1_fp4, TP8, True).as_dict()
    assert parts["routed_experts"] == 792_729_600
    assert parts["shared_experts"] == 3_096_600
    assert parts["mla_projections"] == 73_269_248
    assert "fp8_block_scales" not in parts


def test_awq_checkpoint_reads_group_zero_points_and_bf16_layers(v32_awq):
    """modules_to_not_convert as substrings: "indexer" -> the indexer's wq_b BF16 in every layer;
    "model.layers.0." … "2." (the dense layers), "60." and "61." (the MTP layer) -> BF16 whole;
    "model.layers.1." does not catch layers 10-19 (the trailing dot)."""
    assert v32_awq.checkpoint_dtype == CHECKPOINT_INT4 and v32_awq.quant_method == "awq"
    assert (v32_awq.int4_group_size, v32_awq.int4_zero_points) == (128, True)
    assert "indexer" not in v32_awq.quantized_families and "o_proj" in v32_awq.quantized_families
    assert v32_awq.unquantized_layers == (0, 1, 2, 60, 61)


def test_awq_routed_experts_at_tp8(v32_awq):
    """w13 512×7168: weight 1,835,008, groups 512·56 = 28,672 -> BF16 scales 57,344 + packed zeros 14,336;
    w2 7168×256: weight 917,504, groups 7168·2 = 14,336 -> scales 28,672 + zeros 7,168.
    Per expert 2,860,032, × 256 = 732,168,192 (BF16 would be 2,818,572,288)."""
    shape = ShardShape(8, 8, False, "int4")
    assert layer_bytes(v32_awq, shape, True).as_dict()["routed_experts"] == 732_168_192
    assert layer_bytes(v32_awq, shape, True, True).as_dict()["routed_experts"] == 2_818_572_288


def test_bf16_layers_are_priced_bf16_in_stage_totals_and_breakdown(v32_awq):
    """PP=2 split [0, 31) + [31, 61): the first stage holds dense layers 0-2 (BF16), the last layer 60 (BF16)
    and the MTP layer 61 (BF16); the fast totals and the component breakdown agree on both stages."""
    shape = ShardShape(8, 8, False, "int4")
    totals = shard_totals(v32_awq, shape, True, 8192)
    for first, end, bf16_dense, bf16_moe in ((0, 31, 3, 0), (31, 61, 0, 1)):
        moe = v32_awq.moe_layers_between(first, end)
        full = stage_weights(
            v32_awq, shape, first, end, first_stage=first == 0, last_stage=end == 61, mtp=True,
            max_num_batched_tokens=8192,
        )  # fmt: skip
        fast = stage_total(totals, end - first - moe, moe, first == 0, end == 61, bf16_dense, bf16_moe)
        assert fast == full.total_bytes
    layer_60 = layer_bytes(v32_awq, shape, True, True)
    int4_layer = layer_bytes(v32_awq, shape, True)
    assert sum(dict(layer_60.components).values()) > 3 * sum(dict(int4_layer.components).values())


def test_nvfp4_is_a_weights_dtype_and_unknown_ones_name_the_flag_and_values(v3, request_for):
    """Without a checkpoint, --weights-dtype nvfp4 prices NVIDIA's recipe: MLA BF16, MLPs and experts NVFP4."""
    request = request_for(v3, "B200", weights_dtype="nvfp4")
    assert request.weights_dtype == "nvfp4"
    shape = ShardShape(8, 8, False, "nvfp4")
    assert layer_bytes(v3, shape, True).as_dict()["routed_experts"] == 792_729_600
    with pytest.raises(InputError, match=r"--weights-dtype.*'fp4'.*fp8, bf16, int4, nvfp4"):
        request_for(v3, "B200", weights_dtype="fp4")


def _config(name: str) -> dict:
    return json.loads((FIXTURES / name / "config.json").read_text())


@pytest.mark.parametrize(
    ("change", "field", "values"),
    [
        ({"bits": 8}, "quantization_config.bits", "4"),
        ({"zero_point": "yes"}, "quantization_config.zero_point", "true or false"),
        ({"quant_method": "bitsandbytes"}, "quantization_config.quant_method", "'awq', 'gptq'"),
        ({"modules_to_not_convert": ["model.layers.5.self_attn.o_proj"]}, "quantization_config", "some layers only"),
        ({"modules_to_not_convert": ["model.layers.7.self_attn.q_a_proj"]}, "quantization_config", "fused layer"),
    ],
)
def test_quantization_configs_the_planner_cannot_price_are_refused_by_field(change, field, values):
    config = copy.deepcopy(_config("deepseek-v3.2-exp-awq"))
    config["quantization_config"].update(change)
    with pytest.raises(InputError, match=field) as refused:
        model_card_from_config(config, "ckpt")
    assert values in str(refused.value)


def test_gptq_dynamic_negative_rules_leave_modules_bf16():
    """GPTQ `dynamic` "-:" keys are regexes (re.match) of modules vLLM loads unquantized; qzeros always exist."""
    config = _config("deepseek-v3.2-exp-awq")
    config["quantization_config"] = {
        "quant_method": "gptq", "bits": 4, "group_size": 64, "sym": True, "desc_act": False,
        "dynamic": {r"-:.*self_attn.*": {}},
    }  # fmt: skip
    card = model_card_from_config(config, "ckpt")
    assert card.quant_method == "gptq" and card.int4_zero_points and card.int4_group_size == 64
    assert set(card.quantized_families) == {"dense_mlp", "shared_experts", "routed_experts"}
    assert card.unquantized_layers == ()


MXFP4_QUANT = {
    "quant_method": "quark",
    "global_quant_config": {
        "input_tensors": {"dtype": "fp4", "is_dynamic": True, "qscheme": "per_group", "group_size": 32},
        "weight": {
            "dtype": "fp4",
            "is_dynamic": False,
            "qscheme": "per_group",
            "group_size": 32,
            "scale_format": "e8m0",
        },
    },
    "layer_quant_config": {},
    "exclude": ["re:model\\.layers\\.\\d+\\.self_attn\\..*", "re:model\\.layers\\.\\d+\\.mlp\\.gate$", "lm_head"],
}


@pytest.fixture(scope="module")
def r1_mxfp4():
    config = json.loads((FIXTURES / "deepseek-r1-fp4" / "config.json").read_text())
    config["quantization_config"] = copy.deepcopy(MXFP4_QUANT)
    return model_card_from_config(config, "r1-mxfp4")


def test_quark_mxfp4_reads_its_exclude_list_as_vllm_matches_it(r1_mxfp4):
    """`re:` entries re.match the module prefix, other entries must equal it (quark/utils.py): every layer's
    self_attn.* excluded -> the MLA families BF16; the MLPs (and the MTP layer, not excluded) MXFP4."""
    assert r1_mxfp4.checkpoint_dtype == CHECKPOINT_MXFP4 and r1_mxfp4.quant_method == "quark"
    assert set(r1_mxfp4.quantized_families) >= {"dense_mlp", "shared_experts", "routed_experts"}
    assert not {"fused_qkv_a", "q_b_proj", "kv_b_proj", "o_proj"} & set(r1_mxfp4.quantized_families)
    assert r1_mxfp4.unquantized_layers == ()


def test_mxfp4_moe_layer_bytes_at_tp8(r1_mxfp4):
    """One MoE layer per GPU at TP=8: routed expert w13 512·7168/2 = 1,835,008 + e8m0 scales 512·7168/32 =
    114,688; w2 7168·256/2 = 917,504 + 7168·256/32 = 57,344 -> 2,924,544 per expert, × 256 = 748,683,264."""
    shape = ShardShape(tensor_parallel=8, moe_ranks=8, expert_parallel=False, weights_dtype="mxfp4")
    parts = layer_bytes(r1_mxfp4, shape, True).as_dict()
    assert parts["routed_experts"] == 748_683_264
    assert parts["shared_experts"] == 2_924_544


@pytest.mark.parametrize(
    ("weight", "field"),
    [
        ({"dtype": "fp8_e4m3", "qscheme": "per_tensor"}, "r1: quantization_config.global_quant_config.weight"),
        (
            {"dtype": "fp4", "qscheme": "per_group", "group_size": 16},
            "r1: quantization_config.global_quant_config.weight",
        ),
        (None, "r1: quantization_config.global_quant_config.weight"),
    ],
)
def test_a_quark_scheme_other_than_mxfp4_is_refused_naming_the_field(weight, field):
    config = json.loads((FIXTURES / "deepseek-r1-fp4" / "config.json").read_text())
    quant = copy.deepcopy(MXFP4_QUANT)
    quant["global_quant_config"]["weight"] = weight
    config["quantization_config"] = quant
    with pytest.raises(InputError) as err:
        model_card_from_config(config, "r1")
    assert err.value.field == field
    if weight is not None:
        assert "OCP MXFP4" in err.value.problem


def test_an_exclude_pattern_that_is_not_a_regex_is_refused_naming_its_index():
    config = json.loads((FIXTURES / "deepseek-r1-fp4" / "config.json").read_text())
    quant = copy.deepcopy(MXFP4_QUANT)
    quant["exclude"] = ["lm_head", "re:model\\.layers\\.(\\d+"]
    config["quantization_config"] = quant
    with pytest.raises(InputError) as err:
        model_card_from_config(config, "r1")
    assert err.value.field == "r1: quantization_config.exclude[1]"
    assert "not a regular expression" in err.value.problem
