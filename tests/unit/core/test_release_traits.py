"""Per-release traits read from vLLM's source: which sampler the profile run warms up, where CUDA graphs and
NCCL buffers are paid from, and the VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS switch a launch may set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from meshdeck.core.errors import InputError
from meshdeck.core.planner import plan
from meshdeck.core.reserve import (
    CUDA_LIBRARIES_BYTES,
    GRAPH_PROFILE_NON_TORCH_BYTES,
    IN_PLACE_SAMPLER_BYTES_PER_LOGIT,
    SORT_SAMPLER_BYTES_PER_LOGIT,
    GroupMembership,
    process_memory_for_groups,
)
from meshdeck.core.units import GIB
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
    assert reserve.sampler_pass_bytes == 256 * v32.vocab_size * per_logit


def test_amd_gpus_never_take_flashinfer_but_sort_as_the_release_does(request_for, v32):
    old = _reserve(request_for, v32, gpu_name="MI300X", vllm_version=(0, 16), max_num_seqs=256)
    assert old.sampler_pass_bytes == 256 * v32.vocab_size * SORT_SAMPLER_BYTES_PER_LOGIT


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


H200_8K = {"max_model_len": 8192, "gpu_memory_utilization": 0.92}
M, TOP_K, HIDDEN = 8192, 8, 7168  # the profile's tokens (vLLM's default batch on H200), DeepSeek's top-k and hidden


def test_the_profile_holds_the_larger_of_its_forward_and_its_sampler_pass_not_their_sum(request_for, v3):
    """profile_run runs the forward, then the sampler on what the forward keeps (0.13: its hidden states)."""
    reserve = _reserve(request_for, v3, vllm_version=(0, 13), **H200_8K)
    hidden_states = M * HIDDEN * 2
    assert reserve.kept_bytes == hidden_states
    assert reserve.sampler_pass_bytes == 1024 * v3.vocab_size * SORT_SAMPLER_BYTES_PER_LOGIT
    torch_peak = max(reserve.activation_peak_bytes, reserve.kept_bytes + reserve.sampler_pass_bytes)
    assert reserve.in_budget_bytes == torch_peak + CUDA_LIBRARIES_BYTES
    assert reserve.sampler_bytes == reserve.kept_bytes + reserve.sampler_pass_bytes - reserve.activation_peak_bytes


@pytest.mark.parametrize(
    ("release", "kept_workspace"),
    [
        ((0, 13), 0),  # Fp8MoEMethod.apply calls fused_experts: its caches go with the call
        ((0, 14), 2 * M * TOP_K * HIDDEN * 2),  # TritonExperts' two workspaces in the WorkspaceManager
        ((0, 16), M * HIDDEN * 2),  # FlashInferExperts' (M, K)
        ((0, 18), 2 * M * TOP_K * HIDDEN * 2),  # Triton first again for TP on Hopper
    ],
)
def test_the_fp8_moe_workspace_kept_into_the_sampler_follows_the_releases_kernel(
    request_for, v3, release, kept_workspace
):
    reserve = _reserve(request_for, v3, vllm_version=release, **H200_8K)
    assert reserve.kept_bytes - M * HIDDEN * 2 == kept_workspace


def test_no_kept_moe_workspace_where_the_kernel_choice_was_not_read(request_for, v3):
    """Blackwell picks other FP8 kernels, EP other all2all paths: nothing is assumed kept there."""
    b200 = _reserve(request_for, v3, gpu_name="B200", vllm_version=(0, 18), **H200_8K)
    ep = _reserve(request_for, v3, vllm_version=(0, 18), **{**H200_8K, "expert_parallel": True})
    assert b200.kept_bytes == ep.kept_bytes == M * HIDDEN * 2


@pytest.mark.parametrize(
    ("release", "settings", "charged"),
    [
        ((0, 17), {}, False),  # no graph profile before 0.18
        ((0, 18), {}, True),
        ((0, 20), {}, True),
        ((0, 19), {"tensor_parallel": 1, "data_parallel": 8, "expert_parallel": True}, False),  # TP1
        ((0, 19), {"gpu_name": "MI300X"}, False),  # ROCm skips the graph profile before 0.26
    ],
)
def test_the_graph_profile_leaves_its_non_torch_memory_in_the_window_from_0_18_with_tp(
    request_for, v3, release, settings, charged
):
    reserve = _reserve(request_for, v3, vllm_version=release, **{**H200_8K, **settings})
    extra = reserve.non_torch_bytes - CUDA_LIBRARIES_BYTES
    assert extra == (GRAPH_PROFILE_NON_TORCH_BYTES if charged else 0)


def test_the_graph_profile_term_is_what_the_llama_logs_hold_beyond_every_modelled_term():
    """GRAPH_PROFILE_NON_TORCH_BYTES is measured on RedHat's Llama-3.3-70B TP4 logs (a dense model: no MoE
    workspace), not on the DeepSeek rows it then holds: 0.18/0.19 leave 1.57-1.60 GiB over, 0.16 nothing."""
    fixture = "vllm_records_redhat-psap_h200-b200_deepseek-llama_validation-db_excerpt.json"
    records = json.loads((Path(__file__).resolve().parents[2] / "fixtures" / "calibration" / fixture).read_text())
    torch_visible = {"H200": 139.80939287040383, "B200": 178.36516669858247}  # gpus.json, GpuSpec.torch_visible_bytes
    left_over: dict[str, list[float]] = {"v0.16.0": [], "new": []}
    for record in records.values():
        if not record["log_config"]["model"].startswith("meta-llama/Llama-3.3-70B"):
            continue
        memory, version = record["log_memory"], record["log_config"]["vllm_version"]
        per_logit = SORT_SAMPLER_BYTES_PER_LOGIT if version == "v0.16.0" else IN_PLACE_SAMPLER_BYTES_PER_LOGIT
        modelled = (CUDA_LIBRARIES_BYTES + 1024 * 128256 * per_logit + 8192 * 8192 * 2) / GIB
        non_kv = 0.92 * torch_visible[record["csv_metadata"]["accelerator"]] - memory["model_load_gib"]
        non_kv -= memory["available_kv_cache_gib"]
        left_over["v0.16.0" if version == "v0.16.0" else "new"].append(non_kv - modelled)
    assert left_over["v0.16.0"] and all(abs(x) < 0.15 for x in left_over["v0.16.0"])
    assert len(left_over["new"]) == 3
    assert all(abs(x - GRAPH_PROFILE_NON_TORCH_BYTES / GIB) < 0.05 for x in left_over["new"])
