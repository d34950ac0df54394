"""DeepSeek-V4 is served from vLLM 0.20 on: an older `--vllm-version` is refused for a V4 card, naming the flag and
the first release that serves it (core/v4_releases.py; read from the 0.19.1 and 0.20.0 wheels' registry.py)."""

from __future__ import annotations

import pytest
from core_planner_inputs import make_cluster
from meshdeck.core.errors import InputError
from meshdeck.core.gpu_spec import resolve_gpu
from meshdeck.core.plan_request import PlanRequest
from meshdeck.core.v4_releases import (
    V4_ARCHITECTURE,
    V4_FIRST_SERVING,
    check_release_serves,
    first_serving_release,
)
from meshdeck.core.vllm_releases import NEWEST_MODELLED, VLLM_ACCOUNTINGS
from meshdeck.services.catalog import load_gpu_catalog, load_model

V4_MODELS = ("deepseek-v4-pro", "deepseek-v4-flash")


def test_the_first_release_serving_v4_is_0_20_and_cites_its_registry():
    assert V4_FIRST_SERVING.architecture == V4_ARCHITECTURE == "DeepseekV4ForCausalLM"
    assert V4_FIRST_SERVING.first == (0, 20) and V4_FIRST_SERVING.last_without == (0, 19)
    assert "registry.py" in V4_FIRST_SERVING.source and "0.20.0" in V4_FIRST_SERVING.source
    # the planner models releases on both sides of it, so the refusal is reachable and the newest is allowed
    assert any(a.holds((0, 19)) for a in VLLM_ACCOUNTINGS) and V4_FIRST_SERVING.first <= NEWEST_MODELLED


@pytest.mark.parametrize("model", V4_MODELS)
@pytest.mark.parametrize("version", [(0, 11), (0, 17), (0, 19)])
def test_a_release_older_than_0_20_is_refused_for_a_v4_card(model, version):
    card = load_model(model)
    with pytest.raises(InputError) as err:
        check_release_serves(card, version)
    assert err.value.field == "--vllm-version"
    assert f"{version[0]}.{version[1]} cannot serve" in err.value.problem
    assert "DeepseekV4ForCausalLM" in err.value.problem
    # what to pick instead is what the planner can size V4's KV cache for (0.20–0.22 serve V4 but are not read)
    assert "--vllm-version from the modelled ranges 0.23–0.25" in err.value.problem


@pytest.mark.parametrize("model", V4_MODELS)
@pytest.mark.parametrize("version", [(0, 20), (0, 24), (0, 32), NEWEST_MODELLED])
def test_0_20_and_later_serve_v4(model, version):
    assert first_serving_release(load_model(model)) is V4_FIRST_SERVING
    check_release_serves(load_model(model), version)


@pytest.mark.parametrize("model", ["deepseek-v3.2", "deepseek-v3"])
def test_earlier_deepseek_models_are_not_gated(model):
    card = load_model(model)
    assert first_serving_release(card) is None
    check_release_serves(card, (0, 11))


def test_the_planner_request_refuses_an_old_release_for_v4():
    gpu = resolve_gpu("H200-SXM-141GB", load_gpu_catalog())
    with pytest.raises(InputError) as err:
        PlanRequest(load_model("deepseek-v4-flash"), make_cluster(gpu), vllm_version=(0, 19))
    assert err.value.field == "--vllm-version" and "0.20" in err.value.problem
    # 0.20-0.22 serve V4 but their KV sizing was not read (core/v4_kv.py V4_KV_RULES): refused, naming what is modelled
    with pytest.raises(InputError) as err:
        PlanRequest(load_model("deepseek-v4-flash"), make_cluster(gpu), vllm_version=(0, 20))
    assert err.value.field == "--vllm-version" and "0.23–0.25" in err.value.problem
    assert PlanRequest(load_model("deepseek-v4-flash"), make_cluster(gpu), vllm_version=(0, 23)).vllm_version == (0, 23)
