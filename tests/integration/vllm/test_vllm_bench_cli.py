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
