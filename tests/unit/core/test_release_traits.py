"""Per-release traits read from vLLM's source: which sampler the profile run warms up, where CUDA graphs and
NCCL buffers are paid from, and the VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS switch a launch may set."""

from __future__ import annotations

import pytest
from meshdeck.core.errors import InputError
from meshdeck.core.planner import plan
from meshdeck.core.reserve import (
    IN_PLACE_SAMPLER_BYTES_PER_LOGIT,
    SORT_SAMPLER_BYTES_PER_LOGIT,
    GroupMembership,
    process_memory_for_groups,
)
from meshdeck.core.vllm_releases import CUDAGRAPH_ESTIMATE_ENV, accounting_for, cudagraph_estimate_from_env

TP8 = {"tensor_parallel": 8, "pipeline_parallel": 1, "data_parallel": 1, "expert_parallel": False}


def _reserve(request_for, card, **settings):
    return plan(request_for(card, **{**TP8, **settings})).layouts[0].reserve


@pytest.mark.parametrize(
    ("release", "flashinfer", "sorts"),
    [((0, 11), False, True), ((0, 16), False, True), ((0, 17), False, False), ((0, 21), True, False)],
)
def test_the_sampler_warmed_up_is_the_releases_default(request_for, v32, release, flashinfer, sorts):
    accounting = accounting_for(release)
    assert (accounting.flashinfer_sampler, accounting.sorting_sampler) == (flashinfer, sorts)
    reserve = _reserve(request_for, v32, vllm_version=release, max_num_seqs=256)
    per_logit = SORT_SAMPLER_BYTES_PER_LOGIT if sorts else IN_PLACE_SAMPLER_BYTES_PER_LOGIT
    assert reserve.sampler_bytes == 256 * v32.vocab_size * per_logit


def test_amd_gpus_never_take_flashinfer_but_sort_as_the_release_does(request_for, v32):
    old = _reserve(request_for, v32, gpu_name="MI300X", vllm_version=(0, 16), max_num_seqs=256)
    assert old.sampler_bytes == 256 * v32.vocab_size * SORT_SAMPLER_BYTES_PER_LOGIT


def test_nccl_buffers_are_outside_the_budget_but_counted_beside_it(request_for, v32):
    """vLLM builds its communicators before the snapshot the non-torch increase is measured from."""
    layout = plan(request_for(v32, **TP8, vllm_version=(0, 16))).layouts[0]
    reserve = layout.reserve
    assert reserve.communicator_bytes > 0
    assert reserve.in_budget_bytes == reserve.activation_peak_bytes + reserve.sampler_bytes + reserve.non_torch_bytes
    assert reserve.outside_budget_bytes == reserve.communicator_bytes + reserve.cudagraph_bytes
    assert layout.as_dict()["reserve_gib"]["communicators_outside_budget"] > 0


@pytest.mark.parametrize(("release", "in_budget"), [((0, 22), False), ((0, 25), False), ((0, 26), True)])
def test_rocm_pays_graphs_from_the_budget_only_from_0_26(request_for, v32, release, in_budget):
    """0.20–0.25 skip the graph estimate on ROCm (gpu_worker.py 'Skip on ROCm/HIP/XPU'); 0.26 runs it on
    every CUDA-alike platform."""
    reserve = _reserve(request_for, v32, gpu_name="MI300X", vllm_version=release)
    assert reserve.cudagraph_in_budget is in_budget


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


def test_communicator_bytes_follow_the_groups_and_never_enter_the_budget():
    """Per communicator (a PyNccl and a torch one per group): 160 MiB of channel buffers inside a node, 256 MiB
    across nodes, + 288 MiB of NVLS buffers on an NVSwitch group of more than 2; TP adds custom all-reduce."""
    mib = 1 << 20
    nvswitch = process_memory_for_groups((GroupMembership(8, False, True), GroupMembership(1, False, False)), 8)
    across = process_memory_for_groups((GroupMembership(16, True, False),), 1)
    assert nvswitch.communicator_bytes == 2 * (160 + 288) * mib + 32 * mib
    assert across.communicator_bytes == 2 * 256 * mib
    assert nvswitch.non_torch_bytes == across.non_torch_bytes == 768 * mib  # CUDA libraries only
