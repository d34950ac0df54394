"""DeepSeek-V3.2's architecture (DeepseekV32ForCausalLM, the sparse-attention indexer) launched the same way as
V3: vLLM's CPU build refuses it, and the launch fails with vLLM's own reason on its first line. When a CPU
build runs it, this test fails and README's "what is real" must be updated."""

from __future__ import annotations

import pytest
from meshdeck.services.deployments.registry import LaunchFailed
from meshdeck.services.vllm_bench import LocalVllmDeployment
from meshdeck.services.vllm_local import tiny_model_dir
from vllm_processes import processes_naming, still_running

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def test_v32_on_vllms_cpu_build_fails_the_launch_with_vllms_not_implemented_error(vllm_executable: str) -> None:
    with LocalVllmDeployment(vllm_executable, model=str(tiny_model_dir("tiny-deepseek-v3.2"))) as run:
        planned = run.plan.planned
        assert planned is not None  # the planner counts the indexer's keys: 4 × (1152 + 132) bytes per token
        assert planned.kv_tokens == (1 << 30) // (16 * 4 * (1152 + 132)) * 16
        with pytest.raises(LaunchFailed) as failed:
            run.launch()
        deployment_id = run.deployment_id
    first = failed.value.snapshot.reason.splitlines()[0]
    assert " while starting; vLLM: NotImplementedError: Sparse Attention is not supported on CPU." in first, first
    assert not still_running(processes_naming(deployment_id), within_s=60), "the failed launch left processes"
