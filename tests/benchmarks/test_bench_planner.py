"""Benchmark: rank every layout of DeepSeek-V3.2 for clusters of 1 to 64 nodes × 8 H200.

Target (issue #2): under 20 ms per cluster on the 2-core development machine. Printed: the median
of several runs per cluster, and its ratio to a fixed pure-Python workload timed in the same run
(sorting 200,000 floats), so numbers from different machines can be compared. Run with
`make bench` or `pytest tests/benchmarks -s`; it never asserts a wall time.
"""

from __future__ import annotations

import random
import statistics
import time

from meshdeck.core.cluster import ClusterSpec, default_inter_node_bytes_per_s
from meshdeck.core.gpu_spec import resolve_gpu
from meshdeck.core.planner import PlanRequest, plan
from meshdeck.services.catalog import load_gpu_catalog, load_model

NODE_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 61, 64)
REPEATS = 7


def _median_seconds(work, repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def test_bench_rank_all_layouts_per_cluster():
    card = load_model("deepseek-v3.2")
    h200 = resolve_gpu("H200-SXM-141GB", load_gpu_catalog())
    numbers = [random.random() for _ in range(200_000)]
    baseline = _median_seconds(lambda: sorted(numbers))
    print(f"\nbaseline (sort 200k floats): {baseline * 1e3:.2f} ms")
    print(f"{'nodes':>5} {'layouts':>8} {'fitting':>8} {'median ms':>10} {'x baseline':>11}  top pick")
    medians = []
    for nodes in NODE_COUNTS:
        cluster = ClusterSpec(nodes, 8, h200, "nvlink", default_inter_node_bytes_per_s(8, "nvlink"))
        request = PlanRequest(card, cluster)
        result = plan(request)
        seconds = _median_seconds(lambda request=request: plan(request))
        medians.append(seconds)
        print(
            f"{nodes:>5} {len(result.layouts):>8} {len(result.fitting):>8} {seconds * 1e3:>10.2f} "
            f"{seconds / baseline:>11.2f}  {result.layouts[0].label()}"
        )
        assert result.fitting, f"{nodes}×8 H200 must fit DeepSeek-V3.2"
    print(f"median over clusters: {statistics.median(medians) * 1e3:.2f} ms; worst: {max(medians) * 1e3:.2f} ms")
