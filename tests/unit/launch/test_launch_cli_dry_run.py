"""`meshdeck launch PROFILE --dry-run [--json]` prints every node's command and runs / contacts nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from meshdeck.cli import main

PROFILE = """\
name: ds32-h200-2n
model: deepseek-ai/DeepSeek-V3.2
engine: vllm
hosts: [gpu-a, gpu-b]
gpus_per_node: 8
layout: {tensor_parallel: 8, pipeline_parallel: 2, data_parallel: 1, expert_parallel: false}
vllm: {max_model_len: 32768, gpu_memory_utilization: 0.9, kv_cache_dtype: auto, port: 8000, extra_args: []}
torch: {script: tiny-deepseek, args: []}
env: {NCCL_SOCKET_IFNAME: eth0}
"""


def test_dry_run_json_lists_each_node_with_argv_and_env(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(PROFILE)
    db = tmp_path / "never-created.db"
    assert main(["--db", str(db), "launch", str(profile), "--dry-run", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    nodes = document["nodes"]
    assert [(n["host"], n["argv"][:3]) for n in nodes] == [
        ("gpu-a", ["vllm", "serve", "deepseek-ai/DeepSeek-V3.2"]),
        ("gpu-b", ["vllm", "serve", "deepseek-ai/DeepSeek-V3.2"]),
    ]
    assert "--headless" in nodes[1]["argv"] and "--headless" not in nodes[0]["argv"]
    assert nodes[0]["env"]["NCCL_SOCKET_IFNAME"] == "eth0"
    assert not db.exists()  # a dry run does not even create the database


def test_dry_run_text_is_pasteable_shell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(
        PROFILE.replace("engine: vllm", "engine: torch").replace("tensor_parallel: 8", "tensor_parallel: 8")
    )
    assert main(["--db", str(tmp_path / "x.db"), "launch", str(profile), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "[stage 0] torchrun-node0 on gpu-a (head)" in out
    assert "MESHDECK_WORKLOAD_BUNDLE=<" in out and "tiny_deepseek.py" in out  # named, not 10 KB of base64
    assert "--rdzv-endpoint gpu-a:29500" in out


def test_a_bad_profile_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(PROFILE.replace("hosts: [gpu-a, gpu-b]", 'hosts: ["gpu-a\\nrm -rf /"]'))
    assert main(["launch", str(profile), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"meshdeck: error: {profile}: hosts[0]:") and "\n" not in err
    assert main(["launch", str(tmp_path / "missing.yaml"), "--dry-run"]) == 2


def test_bench_needs_local(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "tiny-model", "--layout", "tp=2"]) == 2
    assert "--local" in capsys.readouterr().err
    assert main(["bench", "collectives", "--layout", "tp=0", "--local"]) == 2
