"""Kimi-K2.5 (KimiK25ForConditionalGeneration): the Kimi-K2 text model read from text_config, the MoonViT tower
and projector counted as vLLM 0.22 builds them, and the checkpoint's exclusion list matched against vLLM's
`language_model.` module names."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from core_planner_inputs import KIMI_K2_THINKING, make_cluster
from meshdeck.core.errors import InputError
from meshdeck.core.model_card import model_card_from_config
from meshdeck.core.planner import PlanRequest, plan
from meshdeck.core.vision_tower import vision_tower_params
from meshdeck.core.weights import ShardShape, shard_totals, stage_total, stage_weights

CONFIG = Path(__file__).resolve().parents[2] / "fixtures" / "calibration" / "kimi-k2.5-nvfp4_config.json"


@pytest.fixture(scope="module")
def k25_config() -> dict[str, Any]:
    return json.loads(CONFIG.read_text())


def test_the_tower_and_projector_count_what_their_shapes_hold():
    # One block: wqkv 3h²+3h, wo h²+h, fc0 mh+m, fc1 hm+h, two LayerNorms 4h (h 1152, m 4304) = 15,239,504;
    # 27 blocks + final norm, patch conv 3·14²·h + h, position table 64·64·h, projector 2h + 4608² + 4608
    # + 7168·4608 + 7168: 471,143,920 (counted independently from the checkpoint's tensor list).
    tower = vision_tower_params({}, 7168, "vision_config")
    assert tower.total == 471_143_920
    assert tower.split_over_tp == 27 * (3 * 1152**2 + 3 * 1152 + 1152**2 + 2 * 4304 * 1152 + 4304)


def test_a_vision_config_field_of_the_wrong_type_is_named():
    with pytest.raises(InputError) as err:
        vision_tower_params({"hidden_size": "1152"}, 7168, "cfg: vision_config")
    assert err.value.field == "cfg: vision_config.hidden_size"
    with pytest.raises(InputError) as err:
        vision_tower_params({"merge_kernel_size": [2]}, 7168, "cfg: vision_config")
    assert err.value.field == "cfg: vision_config.merge_kernel_size"


def test_the_k25_card_is_the_kimi_k2_text_model_with_its_tower(k25_config):
    card = model_card_from_config(k25_config, "k25")
    text = model_card_from_config(KIMI_K2_THINKING, "k2")
    assert card.architecture == "KimiK25ForConditionalGeneration"
    for field in ("hidden_size", "num_hidden_layers", "n_routed_experts", "vocab_size", "kv_lora_rank"):
        assert getattr(card, field) == getattr(text, field)
    assert card.vision_params_tp + card.vision_params_replicated == 471_143_920
    # NVFP4 with `language_model.model.layers.<i>.self_attn*` ignored: attention stays BF16, the MLPs are FP4
    assert card.checkpoint_dtype == "nvfp4"
    assert set(card.quantized_families) == {"dense_mlp", "shared_experts", "routed_experts", "indexer"}


def test_without_the_language_model_prefix_the_ignore_list_would_match_nothing(k25_config):
    stripped = copy.deepcopy(k25_config)
    stripped["architectures"] = ["DeepseekV3ForCausalLM"]
    stripped.update(stripped.pop("text_config"))
    card = model_card_from_config(stripped, "flat")
    assert "o_proj" in card.quantized_families  # the prefix is what makes attention BF16 above


def test_a_wrapper_without_text_config_is_refused_naming_it(k25_config):
    broken = {k: v for k, v in k25_config.items() if k != "text_config"}
    with pytest.raises(InputError) as err:
        model_card_from_config(broken, "k25")
    assert err.value.field == "k25: text_config"


def test_every_gpu_of_every_stage_holds_the_tower_in_bf16(k25_config):
    card = model_card_from_config(k25_config, "k25")
    for tp in (4, 8):
        shape = ShardShape(tp, tp, False, "nvfp4")
        weights = stage_weights(
            card, shape, 0, 61, first_stage=True, last_stage=True, mtp=False, max_num_batched_tokens=8192
        )
        tower = weights.as_dict()["vision_tower"]
        assert tower == (-(-card.vision_params_tp // tp) + card.vision_params_replicated) * 2
        totals = shard_totals(card, shape, False, 8192)
        assert stage_total(totals, 1, 60, True, True) == weights.total_bytes
        middle = stage_weights(
            card, shape, 20, 40, first_stage=False, last_stage=False, mtp=False, max_num_batched_tokens=8192
        )
        assert middle.as_dict()["vision_tower"] == tower


def test_the_encoder_cache_is_part_of_the_profile_peak(k25_config, gpu):
    k25 = model_card_from_config(k25_config, "k25")
    text = model_card_from_config(
        {**k25_config["text_config"], "quantization_config": k25_config["quantization_config"]}, "t"
    )

    def reserve(card: Any) -> Any:
        request = PlanRequest(
            card,
            make_cluster(gpu("B200"), 1, 8),
            tensor_parallel=8,
            pipeline_parallel=1,
            data_parallel=1,
            expert_parallel=False,
            vllm_version=(0, 22),
            max_num_seqs=4,
        )
        return plan(request).layouts[0].reserve

    assert reserve(k25).activation_peak_bytes - reserve(text).activation_peak_bytes == 8192 * 7168 * 2


def _k25_request(k25_config, gpu, gpu_name="B200", tp=8, **settings):
    card = model_card_from_config(k25_config, "k25")
    cluster = make_cluster(gpu(gpu_name), 1, tp)
    layout = {"tensor_parallel": tp, "pipeline_parallel": 1, "data_parallel": 1, "expert_parallel": False}
    return PlanRequest(card, cluster, **layout, vllm_version=(0, 22), max_num_seqs=4, **settings)


def _k25_layout(k25_config, gpu, **settings):
    return plan(_k25_request(k25_config, gpu, **settings)).layouts[0]


def test_data_mode_puts_the_whole_tower_on_every_gpu_and_says_so_in_the_flags(k25_config, gpu):
    split = _k25_layout(k25_config, gpu)
    whole = _k25_layout(k25_config, gpu, mm_encoder_tp_mode="data")
    tower = vision_tower_params({}, 7168, "vision_config").split_over_tp
    assert whole.weights_bytes_per_gpu - split.weights_bytes_per_gpu == (tower - tower // 8) * 2
    assert "--mm-encoder-tp-mode" not in split.details.vllm_args
    flag = whole.details.vllm_args.index("--mm-encoder-tp-mode")
    assert whole.details.vllm_args[flag + 1] == "data"


def test_the_encoder_mode_is_refused_for_a_model_without_a_tower_and_for_an_unknown_value(request_for, v32, k25_config):
    with pytest.raises(InputError) as err:
        request_for(v32, mm_encoder_tp_mode="data")
    assert err.value.field == "--mm-encoder-tp-mode" and "no vision tower" in err.value.problem
    with pytest.raises(InputError) as err:
        request_for(model_card_from_config(k25_config, "k25"), mm_encoder_tp_mode="tensor")
    assert err.value.field == "--mm-encoder-tp-mode" and "weights, data" in err.value.problem


@pytest.mark.parametrize(("gpu_name", "warned"), [("MI355X", False), ("MI300X", True), ("B200", True)])
def test_mxfp4_is_native_on_gfx950_only(request_for, v3, gpu_name, warned):
    tp8 = {"tensor_parallel": 8, "pipeline_parallel": 1, "data_parallel": 1, "expert_parallel": False}
    layout = plan(request_for(v3, gpu_name, weights_dtype="mxfp4", max_model_len=16384, **tp8)).layouts[0]
    assert ("mxfp4_emulated" in layout.details.warning_codes) is warned


def test_a_profile_saved_from_a_data_mode_plan_launches_with_the_flag(k25_config, gpu):
    from meshdeck.services.plan_profiles import profiles_from_layout

    result = plan(_k25_request(k25_config, gpu, mm_encoder_tp_mode="data"))
    (profile,) = profiles_from_layout(result.layouts[0], result, ["gpu-a"], "k25", "nvidia/Kimi-K2.5-NVFP4")
    assert profile.vllm.extra_args == ["--mm-encoder-tp-mode", "data"]
