"""The CLI contract a check depends on: `meshdeck bench vllm --local --json [--requests N]` launches the real
TP=2 two-node deployment on two local agents, sends N completions, stops it and prints exactly these keys;
without vLLM's CPU build it exits 2 and says how to make it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
KEYS = {
    "nodes",
    "tensor_parallel",
    "ready_s",
    "requests_ok",
    "requests_failed",
    "kv_bytes_per_token_planned",
    "kv_bytes_per_token_logged",
    "kv_tokens_planned",
    "kv_tokens_logged",
    "kv_usage_max",
    "metric_rows_stored",
}


def bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "meshdeck", "bench", "vllm", "--local", *args],
        capture_output=True,
        text=True,
        timeout=1500,
        env={**os.environ, **(env or {})},
    )


def test_bench_vllm_local_json_runs_the_real_two_node_deployment(vllm_executable: str) -> None:
    ran = bench("--json", "--requests", "8")
    assert ran.returncode == 0, ran.stderr[-4000:]
    document = json.loads(ran.stdout)
    assert set(document) == KEYS
    assert (document["nodes"], document["tensor_parallel"]) == (2, 2)
    assert (document["requests_ok"], document["requests_failed"]) == (8, 0)
    assert document["ready_s"] > 0
    assert document["kv_tokens_logged"] == pytest.approx(document["kv_tokens_planned"], rel=0.01)
    assert document["kv_bytes_per_token_logged"] == pytest.approx(document["kv_bytes_per_token_planned"], rel=0.01)
    assert document["kv_usage_max"] > 0 and document["metric_rows_stored"] > 0
    assert "stopped" in ran.stderr  # the deployment was stopped before the command returned


def test_without_vllms_cpu_build_it_exits_2_and_says_how_to_make_it(tmp_path) -> None:
    ran = bench("--json", env={"MESHDECK_VLLM": str(tmp_path / "no-vllm")})
    assert ran.returncode == 2 and ran.stdout == ""
    assert "make vllm-venv" in ran.stderr and str(tmp_path / "no-vllm") in ran.stderr


PD_KEYS = {
    "prefill_engines",
    "decode_engines",
    "router",
    "ready_s",
    "requests_ok",
    "requests_failed",
    "kv_connector",
    "kv_transfer_observed",
    "decode_prompt_tokens_computed",
    "prompt_tokens_sent",
    "outputs_match_aggregated",
    "metric_rows_stored",
    "leftover_processes",
}


def test_bench_vllm_local_disaggregated_json_hands_the_kv_over_and_answers_as_aggregated(vllm_executable: str) -> None:
    ran = bench("--disaggregated", "--json", "--requests", "6")
    assert ran.returncode == 0, ran.stderr[-4000:]
    document = json.loads(ran.stdout)
    assert set(document) == PD_KEYS, document
    assert (document["prefill_engines"], document["decode_engines"], document["router"]) == (1, 1, "vllm-router")
    assert (document["requests_ok"], document["requests_failed"], document["kv_connector"]) == (6, 0, "NixlConnector")
    assert document["kv_transfer_observed"] is True and document["decode_prompt_tokens_computed"] == 0
    assert document["prompt_tokens_sent"] > 0 and document["outputs_match_aggregated"] is True
    assert document["metric_rows_stored"] > 0 and document["leftover_processes"] == 0
    assert document["ready_s"] > 0 and "stopped" in ran.stderr
