"""The built-in workloads under real torchrun (gloo on CPU), started by hand — no meshdeck launch path.

The launch path (agents, staging) is tested in tests/integration/launch; these prove the workloads
themselves: the collective groups of a layout, and tiny-deepseek's sharded logits against a separate
single-process run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from meshdeck.workloads import tiny_deepseek_model as model

WORKLOADS = Path(model.__file__).resolve().parent
# real torchrun on 2 shared cores: slow when other suites run at the same time, so a generous limit
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def torchrun(script: str, nproc: int, layout: dict[str, str], *args: str) -> tuple[int, str]:
    env = {**os.environ, **layout, "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
    done = subprocess.run([*argv, str(WORKLOADS / script), *args], env=env, capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout + done.stderr


def result_of(output: str) -> dict[str, Any]:
    lines = [line for line in output.splitlines() if line.startswith("MESHDECK_RESULT ")]
    assert len(lines) == 1, output[-3000:]
    return json.loads(lines[0].split(" ", 1)[1])


def test_collectives_measure_every_group_of_tp2_dp2_with_expert_parallel() -> None:
    layout = {"MESHDECK_TENSOR_PARALLEL": "2", "MESHDECK_DATA_PARALLEL": "2", "MESHDECK_EXPERT_PARALLEL": "1"}
    code, output = torchrun("collectives.py", 4, layout, "--max-bytes", "8192", "--iters", "2", "--warmup", "1")
    assert code == 0, output[-3000:]
    result = result_of(output)
    assert result["backend"] == "gloo" and result["world_size"] == 4
    groups = {(row["group"], tuple(row["ranks"])) for row in result["results"]}
    # (dp, pp, tp) row-major: TP = consecutive ranks, DP = ranks tp apart, EP = dp × tp of the stage
    assert groups == {("tp", (0, 1)), ("tp", (2, 3)), ("dp", (0, 2)), ("dp", (1, 3)), ("ep", (0, 1, 2, 3))}
    sizes = sorted({row["bytes"] for row in result["results"] if row["group"] == "tp"})
    assert sizes == [1024, 2048, 4096, 8192]
    for row in result["results"]:
        assert row["time_us"] > 0
        n = len(row["ranks"])
        factor = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "all_to_all": (n - 1) / n}[row["op"]]
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * factor)
        assert row["algbw_gbps"] == pytest.approx(row["bytes"] / (row["time_us"] / 1e6) / 1e9)
    assert "meshdeck-workload: rank 3/4 running" in output


def test_tiny_deepseek_sharded_logits_match_a_separate_single_process_run(tmp_path: Path) -> None:
    saved = tmp_path / "logits.pt"
    layout = {"MESHDECK_DATA_PARALLEL": "2", "MESHDECK_EXPERT_PARALLEL": "1"}
    code, output = torchrun("tiny_deepseek.py", 2, layout, "--save-logits", str(saved), "--seed", "5")
    assert code == 0, output[-3000:]
    result = result_of(output)
    assert result["matches_reference"] and result["max_abs_diff"] < 1e-4
    assert result["bytes_per_forward"]["ep"] > 0 and result["bytes_per_forward"]["tp"] == 0
    assert result["tokens_per_s"] > 0
    cfg = model.TinyConfig()
    sharded = torch.load(saved)
    single = model.reference_forward(
        model.make_tokens(cfg, result["batch"], result["seq_len"], 5), model.make_weights(cfg, 5), cfg
    )
    assert sharded.shape == single.shape == (8, 16, cfg.vocab_size)
    assert (sharded - single).abs().max().item() < 1e-4
