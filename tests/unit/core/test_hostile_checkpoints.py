"""A checkpoint's config.json may come from anyone: exclusion patterns, list sizes and model sizes are bounded
before the planner matches or counts anything, and every refusal is one line naming the file and field."""

from __future__ import annotations

import copy
import json
from fnmatch import fnmatchcase
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck.core.config_limits import FIELD_LIMITS, GROUP_LIMIT, V4_ONLY_FIELDS
from meshdeck.core.errors import InputError
from meshdeck.core.model_card import model_card_from_config
from meshdeck.core.module_match import MAX_LIST_ENTRIES, modelopt_matcher
from meshdeck.core.regex_cost import CostlyPattern, NameShape, parse_pattern, pattern_work
from meshdeck.services.catalog import load_model

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "checkpoints"
MXFP4 = {
    "quant_method": "quark",
    "global_quant_config": {
        "weight": {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0"}
    },
    "layer_quant_config": {},
}


def _r1_with(quant: dict | None, **fields: object) -> dict:
    config = json.loads((FIXTURES / "deepseek-r1-fp4" / "config.json").read_text())
    config["quantization_config"] = copy.deepcopy(quant)
    config.update(fields)
    return config


def _gptq(dynamic: dict) -> dict:
    return {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "dynamic": dynamic}


def _refusal(config: dict) -> InputError:
    with pytest.raises(InputError) as refused:
        model_card_from_config(config, "ckpt/config.json")
    assert "\n" not in str(refused.value)
    return refused.value


# ------------------------------------------------------------------ exclusion regexes (ReDoS)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("pattern", ["(.*.*)*x$", "(a|ab)+$", "(?:[a-z_]+\\.)*x", "(?:\\b)*x"])
def test_a_quark_exclude_regex_that_backtracks_exponentially_is_refused_naming_its_index(pattern):
    """`(.*.*)*x$` took 27.5 s on a 16-character name (x10 per 2 more characters) inside one re call."""
    refused = _refusal(_r1_with({**MXFP4, "exclude": ["lm_head", f"re:{pattern}"]}))
    assert refused.field == "ckpt/config.json: quantization_config.exclude[1]"
    assert "repeats without bound" in refused.problem


@pytest.mark.timeout(60)
def test_a_gptq_dynamic_key_that_backtracks_exponentially_is_refused_naming_the_key():
    refused = _refusal(_r1_with(_gptq({"-:(.*.*)*x$": {}})))
    assert refused.field == "ckpt/config.json: quantization_config.dynamic['-:(.*.*)*x$']"
    assert "exponential" in refused.problem


@pytest.mark.timeout(60)
def test_a_regex_with_too_many_wildcards_for_the_model_is_refused_before_matching():
    """Polynomial backtracking: four `.*` in a row cost up to ~10^7 steps per name, over the per-call bound."""
    refused = _refusal(_r1_with(_gptq({"-:.*.*.*.*x": {}})))
    assert refused.field == "ckpt/config.json: quantization_config.dynamic['-:.*.*.*.*x']"
    assert "steps on one module name" in refused.problem


def test_a_gptq_key_that_is_not_a_regex_is_refused_naming_the_key():
    refused = _refusal(_r1_with(_gptq({"-:(": {}})))
    assert refused.field == "ckpt/config.json: quantization_config.dynamic['-:(']"
    assert "not a regular expression" in refused.problem


@pytest.mark.parametrize(
    "pattern",
    [
        r"language_model\.model\.layers\.\d+\.self_attn\..*",  # amd/Kimi-K2.5-MXFP4
        r"model\.layers\.\d+\.mlp\.gate$",
        r".*\.18\..*gate.*",  # GPTQModel's README examples
        r".*\.layers\.\d+\.mlp\.experts\.\d+\..*",
        r"(?:model\.)?layers\.(?:[0-9]|[1-5][0-9])\..*",
    ],
)
def test_the_exclusion_regexes_real_checkpoints_use_cost_little(pattern):
    names = [f"language_model.model.layers.{i}.mlp.shared_experts.gate_proj" for i in range(62)]
    assert pattern_work(parse_pattern(pattern), NameShape.of(names)) < 10_000


def test_gptq_rules_apply_in_order_and_the_first_that_matches_decides():
    """vLLM get_dynamic_override: a `+:` rule listed before a matching `-:` rule keeps the module quantized."""
    card = model_card_from_config(
        _r1_with(_gptq({r"+:.*self_attn\.o_proj": {"bits": 4}, r"-:.*self_attn.*": {}})), "ckpt"
    )
    assert "o_proj" in card.quantized_families
    assert not {"fused_qkv_a", "q_b_proj", "kv_b_proj"} & set(card.quantized_families)


def test_a_repeat_over_a_part_that_can_match_nothing_is_bounded_by_its_count():
    """`(?:\\b){10^8}` matches one position 10^8 times (32 s): a bounded repeat is costed by its count."""
    pattern = parse_pattern("(?:\\b){100000000}x")
    assert pattern_work(pattern, NameShape.of(["model.layers.0.mlp.experts"])) > 10**8


def test_a_pattern_re_cannot_compile_is_a_costly_pattern_not_a_crash():
    for text in ["a{4294967296}", "(" * 300 + ")" * 300, "[z-a]"]:
        with pytest.raises(CostlyPattern):
            parse_pattern(text)


# ------------------------------------------------------------------ exclusion lists (ModelOpt and the others)


def test_an_exclusion_list_past_its_bound_is_refused_naming_the_field():
    """20,000 ModelOpt entries ran > 200 s (fnmatch recompiled each past its 32k cache); the bound refuses first."""
    quant = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
    quant["ignore"] = [f"model.layers.{i % 61}.mlp.experts.{i}.gate_proj*" for i in range(MAX_LIST_ENTRIES + 1)]
    refused = _refusal(_r1_with(quant))
    assert refused.field == "ckpt/config.json: quantization_config.exclude_modules"
    assert str(MAX_LIST_ENTRIES) in refused.problem


@pytest.mark.timeout(120)
def test_a_modelopt_list_at_its_bound_is_matched_once_compiled():
    quant = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
    quant["ignore"] = [f"model.layers.{i}.self_attn*" for i in range(61)] + [
        f"model.layers.{i % 61}.mlp.experts.{i}.g?te_proj*" for i in range(MAX_LIST_ENTRIES - 61)
    ]
    card = model_card_from_config(_r1_with(quant), "ckpt")
    assert not {"fused_qkv_a", "q_b_proj", "kv_b_proj", "o_proj"} & set(card.quantized_families)


_glob_text = st.text(alphabet="model.layers.01*?[]!_xp", max_size=12)
_names = st.lists(st.text(alphabet="model.layers.01_xp", max_size=14), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(patterns=st.lists(_glob_text, max_size=6), names=_names)
def test_the_compiled_modelopt_matcher_agrees_with_vllms_fnmatch_test(patterns, names):
    """vLLM: after `path*` -> `path`, `path.*`, a module is excluded when an entry equals it, is inside it or
    matches it as an fnmatch glob (case-sensitive on Linux). The compiled matcher answers the same."""
    expanded = []
    for p in patterns:
        expanded += [p[:-1], p[:-1] + ".*"] if len(p) >= 2 and p[-1] == "*" and p[-2] != "." else [p]
    matcher = modelopt_matcher(patterns, "f")
    for name in names:
        expected = any(p == name or p in name or fnmatchcase(name, p) for p in expanded)
        assert matcher(name) == expected, (patterns, name)


# ------------------------------------------------------------------ sizes


@pytest.mark.parametrize("field", sorted(set(FIELD_LIMITS) - set(V4_ONLY_FIELDS)))
def test_a_size_past_its_physical_bound_is_refused_naming_the_field(field):
    config = _r1_with(None, index_topk=2048, index_n_heads=64, index_head_dim=128)  # V3.2's indexer
    config[field] = FIELD_LIMITS[field] + 1
    refused = _refusal(config)
    assert refused.field == f"ckpt/config.json: {field}"
    assert f"{FIELD_LIMITS[field]:,}" in refused.problem


def _v4_with(**fields: object) -> dict:
    config = json.loads((Path(__file__).parents[3] / "resources" / "models" / "deepseek-v4-flash.json").read_text())
    config.update(fields)
    return config


@pytest.mark.parametrize("field", sorted(V4_ONLY_FIELDS))
def test_a_v4_size_past_its_physical_bound_is_refused_naming_the_field(field):
    limit = FIELD_LIMITS[field]
    value: object = [4] * (limit + 1) if field == "compress_ratios" else limit + 1
    refused = _refusal(_v4_with(**{field: value}))
    assert refused.field == f"ckpt/config.json: {field}"
    assert f"{limit:,}" in refused.problem


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"compress_ratios": [4, 128]}, "compress_ratios"),  # fewer ratios than layers
        ({"compress_ratios": [3] * 44}, "compress_ratios[0]"),  # vLLM's V4 attention takes 0, 1, 4 or 128
        ({"expert_dtype": "int3"}, "expert_dtype"),
        ({"o_groups": 7}, "o_groups"),  # must divide the 64 heads
        ({"qk_rope_head_dim": 512}, "qk_rope_head_dim"),  # the rope part of the one 512-wide head
        ({"num_hash_layers": 44}, "num_hash_layers"),
        (
            {"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}},
            "quantization_config.quant_method",
        ),
    ],
)
def test_a_v4_config_vllm_would_not_build_is_refused_naming_the_field(fields, field):
    refused = _refusal(_v4_with(**fields))
    assert refused.field == f"ckpt/config.json: {field}"


@pytest.mark.parametrize("value", [-1, 0, "x", float("inf"), float("nan"), 1.5, True, GROUP_LIMIT + 1, [32]])
def test_a_compressed_tensors_group_size_that_is_not_a_size_is_refused_naming_it(value):
    """`group_size: -1` gave -878 GiB of weights and a plan that "fits"; "x" and Infinity were tracebacks."""
    quant = {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": {"weights": {"num_bits": 4, "group_size": value}}},
    }
    refused = _refusal(_r1_with(quant))
    assert refused.field == "ckpt/config.json: quantization_config.config_groups.group_0.weights.group_size"


def test_a_size_of_thousands_of_digits_is_refused_and_described_not_printed():
    refused = _refusal(_r1_with(None, vocab_size=int("9" * 4000)))
    assert refused.field == "ckpt/config.json: vocab_size" and "about 4,000 digits" in refused.problem
    assert len(str(refused)) < 200


@pytest.mark.parametrize("architectures", [[["DeepseekV3ForCausalLM"]], [{"a": 1}], "DeepseekV3ForCausalLM"])
def test_architectures_that_are_not_names_are_refused_naming_the_field(architectures):
    refused = _refusal(_r1_with(None, architectures=architectures))
    assert refused.field == "ckpt/config.json: architectures"


# ------------------------------------------------------------------ the file


def _write(tmp_path: Path, text: str) -> str:
    (tmp_path / "config.json").write_text(text)
    return str(tmp_path)


def test_a_config_nested_past_the_recursion_limit_is_refused_naming_the_file(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(InputError) as refused:
        load_model(_write(tmp_path, '{"architectures": ["DeepseekV3ForCausalLM"], "x": ' + deep + "}"))
    assert refused.value.field == "--model" and "nests JSON too deeply" in refused.value.problem


def test_an_integer_past_pythons_digit_limit_is_refused_naming_the_file(tmp_path):
    with pytest.raises(InputError) as refused:
        load_model(_write(tmp_path, '{"vocab_size": ' + "9" * 5000 + "}"))
    assert refused.value.field == "--model" and "cannot read" in refused.value.problem
