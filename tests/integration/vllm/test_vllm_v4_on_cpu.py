"""DeepSeek-V4's architecture (DeepseekV4ForCausalLM: compressed and windowed KV, the C4A indexer, hyper-connections)
launched by meshdeck through an agent on vLLM 0.32's CPU build, as V3 is.

What this build does with it depends on the CPU: without AVX-512 its V4 attention cannot pack `wo_a` for the
CPU GEMM (`torch.ops._C.convert_weight_packed` is only in the AVX-512 kernels) and the launch fails while loading
the model; with AVX-512 the engine starts, sizes its KV cache (compared with the planner's here) and the first
completion fails on a Triton kernel with no CPU backend. Either way the deployment says why in vLLM's own words on
its first line. The day a CPU build serves V4 this test fails, and README's "what is real" must be updated."""

from __future__ import annotations

from pathlib import Path

import pytest
from meshdeck.services.deployments.registry import LaunchFailed
from meshdeck.services.vllm_bench import LocalVllmDeployment, measured_numbers
from meshdeck.services.vllm_local import tiny_model_dir
from vllm_processes import processes_naming, still_running

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

# What vLLM 0.32.0 raises, in its words (tests/fixtures/agent/SOURCES.md has the recorded runs).
NO_AVX512_PACKING = "AttributeError: '_OpNamespace' '_C' object has no attribute 'convert_weight_packed'"
NO_TRITON_CPU = "TypeError: 'function' object is not subscriptable"


def _has_avx512() -> bool:
    flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    return " avx512f" in flags


def test_v4_on_vllms_cpu_build_fails_in_vllms_own_words_and_sizes_its_kv_as_planned(vllm_executable: str) -> None:
    with LocalVllmDeployment(
        vllm_executable, nodes=1, tensor_parallel=1, model=str(tiny_model_dir("tiny-deepseek-v4"))
    ) as run:
        planned = run.plan.planned
        assert planned is not None, run.planned_note  # the planner sizes V4's grouped KV cache on CPU
        deployment_id = run.deployment_id
        if not _has_avx512():
            with pytest.raises(LaunchFailed) as failed:
                run.launch()
            first = failed.value.snapshot.reason.splitlines()[0]
            assert f" while starting; vLLM: {NO_AVX512_PACKING}" in first, first
        else:
            # not reachable on the machines CI runs on (no AVX-512): the recorded behaviour, kept checkable
            snapshot = run.launch()
            assert measured_numbers(snapshot)["kv_cache_tokens"] == planned.kv_tokens
            load = run.send_load(1, concurrency=1, max_tokens=4)
            assert load.ok == 0, "a CPU build completed a V4 request: update README's 'what is real'"
            said = " ".join(load.errors) + (run.current().reason or "")
            assert NO_TRITON_CPU in said or load.failed == 1, said
            run.stop()
    assert not still_running(processes_naming(deployment_id), within_s=60), "the V4 launch left processes"
