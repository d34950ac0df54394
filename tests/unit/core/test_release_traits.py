"""Per-release traits read from vLLM's source: which sampler the profile run warms up, and the
VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS switch a launch may set."""

from __future__ import annotations

import pytest
from meshdeck.core.errors import InputError
from meshdeck.core.planner import plan
from meshdeck.core.reserve import FLASHINFER_SAMPLER_BYTES_PER_LOGIT, SAMPLER_BYTES_PER_LOGIT
from meshdeck.core.vllm_releases import CUDAGRAPH_ESTIMATE_ENV, accounting_for, cudagraph_estimate_from_env

TP8 = {"tensor_parallel": 8, "pipeline_parallel": 1, "data_parallel": 1, "expert_parallel": False}


def _reserve(request_for, card, **settings):
    return plan(request_for(card, **{**TP8, **settings})).layouts[0].reserve


@pytest.mark.parametrize(
    ("release", "flashinfer"), [((0, 11), False), ((0, 16), False), ((0, 20), False), ((0, 21), True), ((0, 33), True)]
)
def test_the_sampler_warmed_up_is_the_releases_default(request_for, v32, release, flashinfer):
    assert accounting_for(release).flashinfer_sampler is flashinfer
    reserve = _reserve(request_for, v32, vllm_version=release, max_num_seqs=256)
    per_logit = FLASHINFER_SAMPLER_BYTES_PER_LOGIT if flashinfer else SAMPLER_BYTES_PER_LOGIT
    assert reserve.sampler_bytes == 256 * v32.vocab_size * per_logit


def test_amd_gpus_sample_natively_whatever_the_release(request_for, v32):
    reserve = _reserve(request_for, v32, gpu_name="MI300X", vllm_version=(0, 22), max_num_seqs=256)
    assert reserve.sampler_bytes == 256 * v32.vocab_size * SAMPLER_BYTES_PER_LOGIT


def test_the_launch_env_decides_whether_graphs_are_paid_from_the_kv_budget(request_for, v32):
    default = plan(request_for(v32, **TP8, vllm_version=(0, 22))).layouts[0]
    off = plan(request_for(v32, **TP8, vllm_version=(0, 22), cudagraph_memory_estimate=False)).layouts[0]
    assert default.reserve.cudagraph_in_budget and not off.reserve.cudagraph_in_budget
    assert off.kv_budget_bytes_per_gpu - default.kv_budget_bytes_per_gpu == default.reserve.cudagraph_bytes
    on_019 = plan(request_for(v32, **TP8, vllm_version=(0, 19), cudagraph_memory_estimate=True)).layouts[0]
    assert on_019.reserve.cudagraph_in_budget


def test_the_switch_is_refused_for_a_release_that_has_none(request_for, v32):
    with pytest.raises(InputError) as err:
        request_for(v32, **TP8, vllm_version=(0, 16), cudagraph_memory_estimate=False)
    assert err.value.field == CUDAGRAPH_ESTIMATE_ENV
    assert "0.18" in err.value.problem


def test_the_env_value_is_read_as_vllm_reads_it():
    assert cudagraph_estimate_from_env({}) is None
    assert cudagraph_estimate_from_env({CUDAGRAPH_ESTIMATE_ENV: "0"}) is False
    assert cudagraph_estimate_from_env({CUDAGRAPH_ESTIMATE_ENV: "1"}) is True
    with pytest.raises(InputError) as err:
        cudagraph_estimate_from_env({CUDAGRAPH_ESTIMATE_ENV: "off"})
    assert err.value.field == CUDAGRAPH_ESTIMATE_ENV
