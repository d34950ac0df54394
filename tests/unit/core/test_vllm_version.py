"""`--vllm-version` names a release whose memory accounting the planner reproduces, or it is refused.

What the planner models (read from vLLM's own source):
- 0.11.0 is the first release without the V0 engine: vllm/engine/llm_engine.py:4-6 is only
  `LLMEngine = V1LLMEngine`, and vllm/worker/model_runner.py is gone (0.10.2 still ships it and
  VLLM_USE_V1=0 selects it, vllm/envs.py:745-746). V0 pads MLA entries and takes the smallest block
  count over ranks: not modelled, so 0.6–0.10 are refused.
- 0.11.0 vllm/v1/worker/gpu_worker.py:279-280: KV = requested − non_kv_cache_memory (weights, torch
  peak, non-torch); CUDA graphs are captured afterwards, outside the budget.
- 0.33.0 vllm/v1/worker/gpu_worker.py:753-757: the CUDA-graph estimate is subtracted as well
  (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, on by default: vllm/envs.py:2219-2220); the planner
  switches at 0.21. 0.33 is the newest release whose source the planner was checked against.
"""

from __future__ import annotations

import pytest
from meshdeck.cli import main
from meshdeck.core.errors import InputError
from meshdeck.core.plan_request import MODELLED_VLLM_RELEASES, parse_vllm_version
from meshdeck.core.planner import plan


@pytest.mark.parametrize("text", ["0.6", "0.7.3", "0.8", "0.10.2", "0.34", "1.0", "v2.1"])
def test_releases_the_planner_does_not_model_are_refused_with_the_modelled_ones(text):
    with pytest.raises(InputError) as err:
        parse_vllm_version(text)
    assert err.value.field == "--vllm-version"
    message = str(err.value)
    assert "0.11–0.20" in message and "0.21–0.33" in message


def test_v0_engine_releases_are_refused_because_the_v0_engine_is_not_modelled():
    with pytest.raises(InputError, match="V0 engine"):
        parse_vllm_version("0.7")


@pytest.mark.parametrize(
    ("text", "version"), [("0.11", (0, 11)), ("0.16.0", (0, 16)), ("v0.21.1", (0, 21)), ("0.33", (0, 33))]
)
def test_modelled_releases_parse_to_major_minor(text, version):
    assert parse_vllm_version(text) == version


def test_modelled_releases_are_the_two_accountings_the_reserve_reproduces():
    assert MODELLED_VLLM_RELEASES == (((0, 11), (0, 20)), ((0, 21), (0, 33)))


def test_a_request_built_without_the_cli_is_refused_too(v32, request_for):
    with pytest.raises(InputError) as err:
        request_for(v32, vllm_version=(0, 7))
    assert err.value.field == "--vllm-version"


@pytest.mark.parametrize(
    ("version", "note"),
    [
        (
            (0, 11),
            "memory accounting follows vLLM 0.11 (CUDA graphs captured after sizing, outside the KV budget; "
            "pass --vllm-version 0.21 for newer)",
        ),
        ((0, 33), "memory accounting follows vLLM 0.33 (CUDA graphs subtracted from the KV budget)"),
    ],
)
def test_the_accounting_note_names_the_release_and_where_cuda_graphs_go(v32, request_for, version, note):
    assert note in plan(request_for(v32, vllm_version=version, max_model_len=16384)).notes


def test_cli_refuses_vllm_0_7_in_one_line_naming_the_flag(capsys):
    code = main(["plan", "--gpu", "H200-SXM-141GB", "--vllm-version", "0.7"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert "--vllm-version" in err and "0.11–0.20" in err
    assert len(err.strip().splitlines()) == 1
