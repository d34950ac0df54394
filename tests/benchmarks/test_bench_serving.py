"""Benchmark: planning DeepSeek-V3.2 on 1 to 64 nodes × 8 H200 with the measured-kernel serving model.

Targets (issue #24): 2 nodes under 2 s, 64 nodes under 10 s on the 2-core development machine. Printed per
cluster, each a median:
- `process`: a fresh `meshdeck plan … --json --top 10` process end to end (interpreter, imports, the library's
  table load on its first question, the plan, the JSON) — what one CLI call costs;
- `tables warm`: `services.planning.plan_with_speed` in a process whose tables are loaded but whose answer
  cache is emptied first (the console's re-plan after the workload changed);
- `cached`: the same plan again (the console's re-plan of an unchanged question);
- `roofline`: the same request planned with the roofline only, in the same run: the ratio says what the
  measured kernels cost on top of the planner itself;
- `--disaggregated` adds the prefill/decode pools to the warm plan.
Run with `make bench` or `pytest tests/benchmarks/test_bench_serving.py -s`; it never asserts a wall time.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from meshdeck.core.cluster import ClusterSpec, default_inter_node_bytes_per_s
from meshdeck.core.gpu_spec import resolve_gpu
from meshdeck.core.planner import PlanRequest, plan
from meshdeck.core.serving import Workload
from meshdeck.services.catalog import load_gpu_catalog, load_model
from meshdeck.services.planning import plan_with_speed
from meshdeck.speed import kernels

NODE_COUNTS = (1, 2, 4, 8, 16, 32, 64)
REPEATS = 5
PROCESS_REPEATS = 3
MESHDECK = Path(sys.executable).with_name("meshdeck")


def _median(work, repeats: int = REPEATS, before=None) -> float:
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _forget_answers() -> None:
    kernels._ANSWERS.clear()


def _process(nodes: int, *extra: str) -> float:
    argv = [str(MESHDECK), "plan", "--gpu", "H200-SXM-141GB", "--nodes", str(nodes), "--json", "--top", "10", *extra]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return _median(lambda: subprocess.run(argv, check=True, capture_output=True, env=env), PROCESS_REPEATS)


def test_bench_plan_with_measured_kernels_per_cluster() -> None:
    card = load_model("deepseek-v3.2")
    h200 = resolve_gpu("H200-SXM-141GB", load_gpu_catalog())
    print(
        f"\n{'nodes':>5} {'layouts':>8} {'process s':>10} {'tables warm s':>14} {'cached s':>9} {'roofline s':>11} "
        f"{'kernels/roofline':>17} {'+disagg s':>10}  top layout (source)"
    )
    for nodes in NODE_COUNTS:
        cluster = ClusterSpec(nodes, 8, h200, "nvlink", default_inter_node_bytes_per_s(8, "nvlink"))
        request = PlanRequest(card, cluster, workload=Workload(1024, 1024, stated=True))
        result = plan_with_speed(request)  # loads the tables once for this process
        assert result.speed_source is not None and result.speed_source.measured
        warm = _median(lambda request=request: plan_with_speed(request), before=_forget_answers)
        cached = _median(lambda request=request: plan_with_speed(request))
        roofline = _median(lambda request=request: plan(request))
        disaggregated_request = replace(request, disaggregated=nodes > 1)
        disagg = (
            _median(lambda r=disaggregated_request: plan_with_speed(r), repeats=3, before=_forget_answers)
            if nodes > 1
            else 0.0
        )
        process = _process(nodes) if nodes in (1, 2, 8, 64) else float("nan")
        top = result.layouts[0]
        print(
            f"{nodes:>5} {len(result.layouts):>8} {process:>10.2f} {warm:>14.3f} {cached:>9.3f} {roofline:>11.3f} "
            f"{warm / roofline:>17.1f} {disagg:>10.3f}  {top.label()} "
            f"({'measured' if top.serving and top.serving.source.measured else 'roofline'})"
        )
