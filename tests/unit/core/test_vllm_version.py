"""`--vllm-version` names a release whose memory accounting the planner reproduces, or it is refused.

The ranges (core/vllm_releases.py) were read from the release wheels themselves (pip download
vllm==X.Y.Z, every release from 0.11.0 to 0.33.0):
- 0.11.0 is the first release without the V0 engine (0.10.2 still ships vllm/worker/model_runner.py);
  V0 pads MLA entries and takes the smallest block count over ranks: not modelled, so 0.6–0.10 are refused.
- VLLM_FUSED_MOE_CHUNK_SIZE: "32768" in 0.11.0, 16 * 1024 in 0.12.0–0.17.0, gone from 0.18.0
  (fused_moe/modular_kernel.py allocates its workspaces for the whole batch; the planner keeps 32768
  there as a bound, see vllm_releases.UNREAD_DP_GATHER_BOUND).
- profile_cudagraph_memory appears in 0.18.0's gpu_worker.py, applied only with
  VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, whose default is "0" in 0.18.0 and 0.19.0 and "1" from 0.20.0.
- From 0.21.0 the logged "GPU KV cache size" is int(max_concurrency × max_model_len).
- From 0.27.0 memory_profiling measures non-KV memory as the drop in free memory (+ transient headroom).
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck.cli import main
from meshdeck.core.errors import InputError
from meshdeck.core.plan_request import MODELLED_VLLM_RELEASES, parse_vllm_version
from meshdeck.core.planner import plan
from meshdeck.core.vllm_releases import NEWEST_MODELLED, VLLM_ACCOUNTINGS, accounting_for

TP8 = {"tensor_parallel": 8, "pipeline_parallel": 1, "data_parallel": 1, "expert_parallel": False}
RANGES = "0.11, 0.12–0.13, 0.14, 0.15–0.16, 0.17, 0.18–0.19, 0.20, 0.21–0.25, 0.26, 0.27–0.33"


@pytest.mark.parametrize("text", ["0.6", "0.7.3", "0.8", "0.10.2", "0.34", "1.0", "v2.1"])
def test_releases_the_planner_does_not_model_are_refused_with_every_modelled_range(text):
    with pytest.raises(InputError) as err:
        parse_vllm_version(text)
    assert err.value.field == "--vllm-version"
    assert f"the planner models vLLM {RANGES}" in str(err.value)


def test_v0_engine_releases_are_refused_because_the_v0_engine_is_not_modelled():
    with pytest.raises(InputError, match="V0 engine"):
        parse_vllm_version("0.7")


@pytest.mark.parametrize(
    ("text", "version"), [("0.11", (0, 11)), ("0.16.0", (0, 16)), ("v0.21.1", (0, 21)), ("0.33", (0, 33))]
)
def test_modelled_releases_parse_to_major_minor(text, version):
    assert parse_vllm_version(text) == version


def test_the_ranges_follow_each_other_without_gap_or_overlap_from_0_11_to_0_33():
    assert MODELLED_VLLM_RELEASES[0][0] == (0, 11) and MODELLED_VLLM_RELEASES[-1][1] == NEWEST_MODELLED == (0, 33)
    for (_, last), (first, _) in itertools.pairwise(MODELLED_VLLM_RELEASES):
        assert first == (last[0], last[1] + 1)
    assert all(accounting.source and accounting.summary for accounting in VLLM_ACCOUNTINGS)


@pytest.mark.parametrize(
    ("version", "in_budget", "chunk", "logged"),
    [
        ((0, 11), False, 32768, "blocks"),
        ((0, 17), False, 16384, "blocks"),
        ((0, 19), False, 32768, "blocks"),
        ((0, 20), True, 32768, "blocks"),
        ((0, 21), True, 32768, "concurrency"),
        ((0, 33), True, 32768, "concurrency"),
    ],
)
def test_each_boundary_read_from_the_source_is_where_the_table_puts_it(version, in_budget, chunk, logged):
    accounting = accounting_for(version)
    assert (accounting.cudagraph_in_budget, accounting.fused_moe_chunk_tokens, accounting.tokens_logged) == (
        in_budget,
        chunk,
        logged,
    )


def test_cuda_graphs_leave_the_kv_budget_at_0_20_and_not_before(v32, request_for):
    on_0_19 = plan(request_for(v32, vllm_version=(0, 19), **TP8)).layouts[0]
    on_0_20 = plan(request_for(v32, vllm_version=(0, 20), **TP8)).layouts[0]
    assert not on_0_19.reserve.cudagraph_in_budget and on_0_20.reserve.cudagraph_in_budget
    assert on_0_19.kv_budget_bytes_per_gpu - on_0_20.kv_budget_bytes_per_gpu == on_0_20.reserve.cudagraph_bytes


def test_the_fused_moe_chunk_of_each_release_bounds_the_profile_runs_moe_workspace(v32, request_for):
    # DP8 + EP gathers 8 × 8192 tokens into every MoE layer: above both chunks
    layout = {"tensor_parallel": 1, "pipeline_parallel": 1, "data_parallel": 8, "expert_parallel": True}
    peaks = {
        version: plan(request_for(v32, vllm_version=version, max_model_len=16384, **layout))
        .layouts[0]
        .reserve.activation_peak_bytes
        for version in ((0, 11), (0, 16), (0, 18))
    }
    # 0.18 drops the chunk; the planner keeps 0.11's bound there (vllm_releases.UNREAD_DP_GATHER_BOUND)
    assert peaks[(0, 16)] < peaks[(0, 11)] == peaks[(0, 18)]


def test_from_0_21_the_logged_tokens_are_concurrency_times_max_model_len_beside_the_whole_block_capacity(
    v32, request_for
):
    # 16400 tokens is 256.25 blocks of 64: vLLM 0.21 counts 257 blocks per request
    on_0_20 = plan(request_for(v32, vllm_version=(0, 20), max_model_len=16400, **TP8)).layouts[0]
    on_0_21 = plan(request_for(v32, vllm_version=(0, 21), max_model_len=16400, **TP8)).layouts[0]
    blocks = on_0_21.kv_cache_bytes_per_gpu // (on_0_21.kv_bytes_per_token_per_gpu * 64)
    assert on_0_20.kv_tokens_logged_per_replica == on_0_20.kv_tokens_per_replica
    assert on_0_21.kv_tokens_per_replica == blocks * 64  # the capacity itself is whole blocks in every release
    assert on_0_21.kv_tokens_logged_per_replica == int(blocks / 257 * 16400) < blocks * 64
    assert on_0_21.as_dict()["kv_tokens_logged_per_replica"] == on_0_21.kv_tokens_logged_per_replica


def test_a_request_built_without_the_cli_is_refused_too(v32, request_for):
    with pytest.raises(InputError) as err:
        request_for(v32, vllm_version=(0, 7))
    assert err.value.field == "--vllm-version"


@pytest.mark.parametrize(
    ("version", "note"),
    [
        (
            (0, 11),
            "memory accounting follows vLLM 0.11, as asked (releases 0.11: CUDA graphs captured after sizing, outside "
            "the KV budget; fused-MoE chunk 32768 tokens; --vllm-version picks another)",
        ),
        (
            (0, 33),
            "memory accounting follows vLLM 0.33, the newest modelled (releases 0.27–0.33: CUDA graphs' profiled "
            "estimate subtracted from the KV budget; non-KV memory measured as the drop in free memory; "
            "--vllm-version picks another)",
        ),
    ],
)
def test_the_accounting_note_names_the_release_its_range_and_where_cuda_graphs_go(v32, request_for, version, note):
    assert note in plan(request_for(v32, vllm_version=version, max_model_len=16384)).notes


def test_cli_refuses_vllm_0_7_in_one_line_naming_the_flag_and_the_ranges(capsys):
    code = main(["plan", "--gpu", "H200-SXM-141GB", "--vllm-version", "0.7"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert "--vllm-version" in err and RANGES in err
    assert len(err.strip().splitlines()) == 1


def test_cli_defaults_to_the_newest_modelled_release_and_says_so_in_json(capsys):
    assert main(["plan", "--gpu", "H200-SXM-141GB", "--max-model-len", "16384", "--top", "1", "--json"]) == 0
    settings = json.loads(capsys.readouterr().out)["settings"]
    assert (settings["vllm_accounting"], settings["vllm_accounting_range"]) == ("0.33", "0.27–0.33")


@settings(deadline=None, max_examples=300)
@given(major=st.integers(0, 3), minor=st.integers(0, 99))
def test_every_release_maps_to_exactly_one_range_or_is_refused_naming_them_all(major, minor):
    version = (major, minor)
    holding = [accounting for accounting in VLLM_ACCOUNTINGS if accounting.holds(version)]
    if (0, 11) <= version <= (0, 33):
        assert len(holding) == 1 and accounting_for(version) is holding[0]
    else:
        assert not holding
        with pytest.raises(InputError, match=RANGES):
            accounting_for(version)


@pytest.mark.parametrize(("version", "graphs_listed"), [((0, 19), False), ((0, 20), True)])
def test_the_printed_reserve_lists_every_term_it_adds_up_cuda_graphs_when_inside_the_budget(
    v32, request_for, version, graphs_listed
):
    import re

    from meshdeck.core.plan_text import render_plan

    text = render_plan(plan(request_for(v32, vllm_version=version, max_model_len=16384, **TP8)), top=1)
    line = next(line for line in text.splitlines() if line.startswith("  per GPU:"))
    total = float(re.search(r"reserve ([\d.]+) GiB", line).group(1))
    parts = [float(v) for v in re.findall(r"(?:activations|sampler|non-torch|CUDA graphs) ([\d.]+)", line)]
    assert ("CUDA graphs" in line) is graphs_listed
    assert sum(parts) == pytest.approx(total, abs=0.02)
