"""Benchmark: rank every layout of DeepSeek-V3.2 for clusters of 1 to 64 nodes × 8 H200, and a 278-node fleet.

Targets: under 20 ms per cluster of 1-64 nodes (issue #2), under 200 ms for 278 nodes (issue #14), on the 2-core
development machine. Printed per cluster:
the median of several runs with the planner's caches cleared first (cold: what one `meshdeck plan`
pays) and without (warm: what the console pays when it re-plans), each with its ratio to a fixed
pure-Python workload timed in the same run (sorting 200,000 floats), so numbers from different or
busy machines can be compared. Run with `make bench` or `pytest tests/benchmarks -s`; it never
asserts a wall time.
"""

from __future__ import annotations

import random
import statistics
import time

from meshdeck.core import layout_parts, model_card, weights
from meshdeck.core.cluster import ClusterSpec, default_inter_node_bytes_per_s
from meshdeck.core.gpu_spec import resolve_gpu
from meshdeck.core.planner import PlanRequest, plan
from meshdeck.services.catalog import load_gpu_catalog, load_model

NODE_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 61, 64)
FLEET_NODES = 278  # DeepSeek's own inference fleet (issue #14)
REPEATS = 7


def _clear_caches() -> None:
    for cached in (
        weights.layer_bytes,
        weights._tensor_parallel_parts,
        weights.shard_totals,
        weights.stage_weights,
        layout_parts.pipeline_stages,
        model_card._moe_prefix,
    ):
        cached.cache_clear()


def _timed(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def _paired_medians(work, baseline_work, *, cold: bool) -> tuple[float, float]:
    """Median of the work and of the baseline, run alternately so both see the same machine load."""
    times, baselines = [], []
    for _ in range(REPEATS):
        baselines.append(_timed(baseline_work))
        if cold:
            _clear_caches()
        times.append(_timed(work))
    return statistics.median(times), statistics.median(baselines)


def _row(card, gpu, nodes: int, baseline_work) -> tuple[float, float]:
    """Print one cluster's cold and warm medians; return them."""
    cluster = ClusterSpec(nodes, 8, gpu, "nvlink", default_inter_node_bytes_per_s(8, "nvlink"))
    request = PlanRequest(card, cluster)
    result = plan(request)
    cold, cold_base = _paired_medians(lambda: plan(request), baseline_work, cold=True)
    warm, warm_base = _paired_medians(lambda: plan(request), baseline_work, cold=False)
    print(
        f"{nodes:>5} {len(result.layouts):>8} {len(result.fitting):>8} {cold * 1e3:>8.2f} {cold / cold_base:>7.2f} "
        f"{warm * 1e3:>8.2f} {warm / warm_base:>7.2f}  {result.layouts[0].label()}"
    )
    assert result.fitting, f"{nodes}×8 H200 must fit DeepSeek-V3.2"
    return cold, warm


def test_bench_rank_all_layouts_per_cluster():
    card = load_model("deepseek-v3.2")
    h200 = resolve_gpu("H200-SXM-141GB", load_gpu_catalog())
    numbers = [random.random() for _ in range(200_000)]

    def baseline_work() -> None:
        sorted(numbers)

    print("\nbaseline: sorting 200k floats, timed alternately with each plan (x base = plan / baseline)")
    print(
        f"{'nodes':>5} {'layouts':>8} {'fitting':>8} {'cold ms':>8} {'x base':>7} {'warm ms':>8} {'x base':>7}  top pick"
    )
    colds, warms = [], []
    for nodes in NODE_COUNTS:
        cold, warm = _row(card, h200, nodes, baseline_work)
        colds.append(cold)
        warms.append(warm)
    print(
        f"1-64 nodes: cold median {statistics.median(colds) * 1e3:.2f} ms, worst {max(colds) * 1e3:.2f} ms; "
        f"warm median {statistics.median(warms) * 1e3:.2f} ms, worst {max(warms) * 1e3:.2f} ms (target < 20 ms)"
    )
    cold, warm = _row(card, h200, FLEET_NODES, baseline_work)
    print(f"{FLEET_NODES} nodes: cold {cold * 1e3:.2f} ms, warm {warm * 1e3:.2f} ms (target < 200 ms)")
