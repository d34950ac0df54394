"""Prefill/decode-disaggregated plans: a prefill pool and a decode pool on one cluster, rate-matched.

DeepSeek is served at scale with separate pools (DeepSeek's own EP32 prefill / EP144 decode, SGLang's 96×H100
run, vLLM + llm-d wide EP): prefill workers compute prompts and hand their KV cache over the network (vLLM's
NixlConnector) to decode workers that only generate. This module finds, for the plan's cluster and workload,
the best split:
- worker shapes are the plan's own aggregated layouts without pipeline stages (TP inside a node, attention DP,
  expert parallel), so each worker's memory and KV capacity are meshdeck's (the evaluator's, per release);
- a prefill worker's rate is its batch of prompts over their prefill latency, a decode worker's its sequences
  over one request's decode time (osl × TPOT), both from the plan's speed model (measured kernels or roofline);
- the pools are rate-matched as aiconfigurator's disaggregated model does (its `picking.py`): prefill throughput
  × 0.9 (pipeline bubbles between batches) and decode × 0.92 (slots not always full); the deployment completes
  min(prefill, decode) requests a second; TTFT is the prefill latency × 1.8 (its correction for prompts queueing
  at a busy prefill worker) plus the KV transfer over the network;
- every split of the cluster's GPUs between the pools is tried (whole nodes for workers of a node or more,
  sub-node workers packed into nodes), and the best per pair of shapes is kept.
The result is compared with the plan's best aggregated layout on the same GPUs and workload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from meshdeck.core.layout_plan import LayoutPlan
from meshdeck.core.serving import (
    EngineShape,
    ServingEstimate,
    SpeedQuery,
    SpeedSource,
    StepTimes,
    serving_rank_key,
    sla_check,
)

if TYPE_CHECKING:
    from meshdeck.core.evaluate import LayoutEvaluator

# aiconfigurator's rate-matching factors (aiconfigurator/sdk/picking.py, 0.12.0): prefill throughput lost to
# bubbles between batches, decode throughput lost to slots not always full, and TTFT's queueing correction.
PREFILL_DEGRADATION = 0.9
DECODE_DEGRADATION = 0.92
TTFT_QUEUEING_CORRECTION = 1.8
PREFILL_BATCHES = (1, 2, 4, 8, 16, 32, 64)
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
KEEP = 12  # plans returned, best first
# A prefill batch this much slower per request than the pool's best is not worth its latency.
PREFILL_THROUGHPUT_TOLERANCE = 0.05
KV_CONNECTOR = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
# vLLM 0.12 added `--all2all-backend` (engine/arg_utils.py); 0.11 reads the VLLM_ALL2ALL_BACKEND environment variable.
ALL2ALL_FLAG_FROM = (0, 12)
ALL2ALL_ENV = "VLLM_ALL2ALL_BACKEND"


@dataclass(frozen=True)
class Pool:
    """One pool: `workers` engines of one shape, each at `batch_per_rank` requests per DP rank."""

    role: str  # "prefill" | "decode"
    layout: LayoutPlan  # one worker's memory (the plan's aggregated layout of this shape)
    shape: EngineShape
    workers: int
    batch_per_rank: int
    requests_per_s: float  # the pool's, before the rate-matching degradation
    vllm_args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    @property
    def gpus(self) -> int:
        return self.workers * self.shape.gpus

    def as_dict(self) -> dict[str, Any]:
        shape = self.shape
        return {
            "tensor_parallel": shape.tensor_parallel,
            "data_parallel": shape.data_parallel,
            "expert_parallel": shape.expert_parallel,
            "expert_parallel_size": shape.expert_parallel_size,
            "pipeline_parallel": shape.pipeline_parallel,
            "workers": self.workers,
            "gpus": self.gpus,
            "gpus_per_worker": shape.gpus,
            "nodes_per_worker": shape.gpus / shape.gpus_per_node,
            "batch_per_rank": self.batch_per_rank,
            "kv_tokens_per_replica": self.layout.kv_tokens_per_replica,
            "requests_per_s": round(self.requests_per_s, 3),
            "vllm_args": list(self.vllm_args),
            "env": dict(self.env),
        }


@dataclass(frozen=True)
class DisaggregatedPlan:
    prefill: Pool
    decode: Pool
    serving: ServingEstimate
    kv_transfer_ms: float
    warnings: tuple[str, ...]
    versus_aggregated: float | None  # output tokens/s over the best aggregated layout's (1.3: 30 % more)

    def label(self) -> str:
        return (
            f"{self.prefill.workers}× {self.prefill.shape.label()} prefill + "
            f"{self.decode.workers}× {self.decode.shape.label()} decode"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label(),
            "prefill": self.prefill.as_dict(),
            "decode": self.decode.as_dict(),
            "gpus": self.prefill.gpus + self.decode.gpus,
            "kv_transfer_ms": round(self.kv_transfer_ms, 2),
            "serving": self.serving.as_dict(),
            "versus_aggregated": None if self.versus_aggregated is None else round(self.versus_aggregated, 3),
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class _WorkerOption:
    """A pool worker at one batch: its rate and latency."""

    layout: LayoutPlan
    shape: EngineShape
    batch_per_rank: int
    requests_per_s: float  # one worker
    times: StepTimes
    source: SpeedSource


def redundant_experts(experts: int, expert_parallel_size: int) -> int:
    """Fewest redundant experts EPLB needs so every EP rank holds as many: (experts + r) % EP == 0."""
    return -experts % expert_parallel_size


@dataclass(frozen=True)
class WideExpertParallel:
    """How a pool worker whose expert parallel crosses nodes runs it: DeepEP's kernels for its role, EPLB with
    `redundant_experts`, dual-batch overlap (always both: what the speed model prices)."""

    all2all_backend: str
    redundant_experts: int
    eplb: bool = True
    dbo: bool = True


def pool_wide_ep(shape: EngineShape, role: str, experts: int) -> WideExpertParallel | None:
    """A pool worker's wide-EP settings, None unless its expert parallel crosses nodes (see pool_vllm_args)."""
    if not shape.expert_parallel_crosses_nodes:
        return None
    backend = "deepep_high_throughput" if role == "prefill" else "deepep_low_latency"
    return WideExpertParallel(backend, redundant_experts(experts, shape.expert_parallel_size))


def pool_vllm_args(
    layout: LayoutPlan, shape: EngineShape, role: str, experts: int, release: tuple[int, int]
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The `vllm serve` flags and environment of a pool worker: the layout's own, the KV connector, wide EP.

    Expert parallel across nodes runs DeepEP (what the speed model prices it as): its high-throughput kernels in
    prefill, its low-latency kernels in decode (--all2all-backend from vLLM 0.12, VLLM_ALL2ALL_BACKEND before),
    with dual-batch overlap, and EPLB with the fewest redundant experts that spread evenly over the EP ranks.
    """
    args = [*layout.vllm_args, "--kv-transfer-config", KV_CONNECTOR]
    env: list[tuple[str, str]] = []
    wide = pool_wide_ep(shape, role, experts)
    if wide is not None:
        if release >= ALL2ALL_FLAG_FROM:
            args += ["--all2all-backend", wide.all2all_backend]
        else:
            env.append((ALL2ALL_ENV, wide.all2all_backend))
        redundant = wide.redundant_experts
        args += ["--enable-dbo", "--enable-eplb", "--eplb-config", f'{{"num_redundant_experts":{redundant}}}']
    return tuple(args), tuple(env)


def _shape(layout: LayoutPlan, gpus_per_node: int) -> EngineShape:
    return EngineShape(
        layout.tensor_parallel, layout.pipeline_parallel, layout.data_parallel, layout.expert_parallel, gpus_per_node
    )


def _batches(limit: int, choices: tuple[int, ...]) -> list[int]:
    return [b for b in choices if b <= limit] or ([1] if limit >= 1 else [])


def _packs(sizes: list[tuple[int, int]], nodes: int, gpus_per_node: int) -> bool:
    """Whether `count` workers of each size fit the nodes: workers of a node or more take whole nodes, the rest
    (sizes dividing a node) pack into the nodes left, largest first — exact for the two sizes of two pools."""
    whole = sum(size // gpus_per_node * count for size, count in sizes if size >= gpus_per_node)
    if whole > nodes:
        return False
    empty, partial = nodes - whole, 0  # nodes untouched; free GPUs of the one node the last size left part-full
    for size, count in sorted(((s, c) for s, c in sizes if s < gpus_per_node and c > 0), reverse=True):
        into_partial = min(count, partial // size)
        count -= into_partial
        partial -= into_partial * size
        per_node = gpus_per_node // size
        needed = -(-count // per_node)
        if needed > empty:
            return False
        empty -= needed
        left = count % per_node
        partial += (per_node - left) * size if left else 0
    return True


class _Planner:
    def __init__(self, evaluator: LayoutEvaluator, layouts: list[LayoutPlan]) -> None:
        self.evaluator = evaluator
        request = evaluator.request
        self.request, self.workload = request, request.workload
        self.cluster = request.cluster
        self.card = request.model
        self.settings = evaluator.settings
        self.speed = evaluator.speed
        self.fallback = None if evaluator.speed is evaluator.roofline else evaluator.roofline
        gpus_per_node = self.cluster.gpus_per_node
        # worker shapes: one instance of a layout that fits, no PP, TP inside a node, one per shape
        shapes: dict[EngineShape, LayoutPlan] = {}
        for layout in layouts:
            if not (layout.valid and layout.fits and layout.supported) or layout.pipeline_parallel > 1:
                continue
            if layout.tensor_parallel > gpus_per_node:
                continue
            shapes.setdefault(_shape(layout, gpus_per_node), layout)
        self.shapes = shapes
        self._decode_options: dict[tuple[EngineShape, int], _WorkerOption | None] = {}
        self._ladders: dict[EngineShape, list[_WorkerOption]] = {}

    def _ask(
        self, shape: EngineShape, layout: LayoutPlan, role: str, batch: int
    ) -> tuple[StepTimes, SpeedSource] | None:
        query = SpeedQuery(
            shape,
            "prefill" if role == "prefill" else "decode",
            batch,
            self.workload.input_tokens,
            self.workload.output_tokens,
            self.settings.max_num_batched_tokens,
            self.evaluator.speculative_tokens if role == "decode" else 0,
            layout.speed_inputs,
        )
        answer = self.speed.times(query)
        if answer is not None:
            return answer, self.speed.source
        if self.fallback is not None:
            answer = self.fallback.times(query)
            if answer is not None:
                return answer, self.fallback.source
        return None

    def prefill_options(self) -> list[_WorkerOption]:
        """Per shape, the prefill batch worth running: the smallest within 5 % of its best rate, meeting TTFT."""
        options = []
        isl = self.workload.input_tokens
        for shape, layout in self.shapes.items():
            limit = layout.kv_tokens_per_replica // isl
            best: list[_WorkerOption] = []
            for batch in _batches(limit, PREFILL_BATCHES):
                answered = self._ask(shape, layout, "prefill", batch)
                if answered is None or answered[0].ttft_ms <= 0:
                    continue
                times, source = answered
                if (
                    self.workload.ttft_ms is not None
                    and times.ttft_ms * TTFT_QUEUEING_CORRECTION > self.workload.ttft_ms
                ):
                    break
                rate = batch * shape.data_parallel / (times.ttft_ms / 1000.0)
                best.append(_WorkerOption(layout, shape, batch, rate, times, source))
            if not best:
                continue
            top = max(option.requests_per_s for option in best)
            options.append(next(o for o in best if o.requests_per_s >= (1 - PREFILL_THROUGHPUT_TOLERANCE) * top))
        return options

    def decode_capacity(self, layout: LayoutPlan) -> int:
        return min(self.settings.max_num_seqs, layout.kv_tokens_per_replica // self.workload.tokens_per_request)

    def decode_option(self, shape: EngineShape, layout: LayoutPlan, batch: int) -> _WorkerOption | None:
        key = (shape, batch)
        if key in self._decode_options:
            return self._decode_options[key]
        option = None
        answered = self._ask(shape, layout, "decode", batch)
        if answered is not None and answered[0].tpot_ms > 0:
            times, source = answered
            rate = batch * shape.data_parallel / (self.workload.output_tokens * times.tpot_ms / 1000.0)
            option = _WorkerOption(layout, shape, batch, rate, times, source)
        self._decode_options[key] = option
        return option

    def decode_ladder(self, shape: EngineShape, layout: LayoutPlan) -> list[_WorkerOption]:
        """The batches a decode worker of this shape may run, smallest first, up to its capacity and TPOT target."""
        if shape in self._ladders:
            return self._ladders[shape]
        capacity = self.decode_capacity(layout)
        ladder: list[_WorkerOption] = []
        for batch in sorted({*_batches(capacity, DECODE_BATCHES), capacity}) if capacity >= 1 else ():
            option = self.decode_option(shape, layout, batch)
            if option is None:
                continue
            if self.workload.tpot_ms is not None and option.times.tpot_ms > self.workload.tpot_ms and batch > 1:
                break
            ladder.append(option)
        self._ladders[shape] = ladder
        return ladder

    def decode_for(
        self, shape: EngineShape, layout: LayoutPlan, workers: int, needed_rate: float
    ) -> _WorkerOption | None:
        """How `workers` decode workers of this shape run next to a prefill pool completing `needed_rate` req/s.

        With --concurrency the batch follows from it (requests over the pool's DP ranks). Otherwise the pool
        runs the smallest batch that keeps up with the prefill pool (a bigger one would only wait for prompts
        and slow every token), within the TPOT target if one is set; if none keeps up, the largest allowed.
        """
        capacity = self.decode_capacity(layout)
        if capacity < 1:
            return None
        requested = self.workload.concurrency
        if requested is not None:
            return self.decode_option(shape, layout, min(capacity, -(-requested // (workers * shape.data_parallel))))
        ladder = self.decode_ladder(shape, layout)
        for option in ladder:
            if workers * option.requests_per_s * DECODE_DEGRADATION >= needed_rate:
                return option
        return ladder[-1] if ladder else None

    def kv_transfer_ms(self) -> float:
        """One prompt's KV cache from a prefill GPU to a decode GPU over the network (rail-per-GPU NICs)."""
        kv = self.settings.kv
        bytes_total = self.workload.input_tokens * kv.bytes_per_token_per_layer * self.card.num_hidden_layers
        per_gpu = self.cluster.inter_node_bytes_per_s / self.cluster.gpus_per_node
        return bytes_total / per_gpu * 1000.0

    def _prefill_counts(
        self, prefill: _WorkerOption, decode_shape: EngineShape, decode_layout: LayoutPlan
    ) -> list[int]:
        """Prefill worker counts worth trying: around where the pools' rates cross, and the extremes.

        The prefill pool's rate grows with its workers and the decode pool's shrinks with the GPUs left, so the
        deployment's rate, their minimum, peaks where they cross: x* = c·T / (a·g_d + c·g_p) with a and c the
        degraded rates of one prefill worker and of one decode worker at its fullest batch.
        """
        total, gp, gd = self.cluster.total_gpus, prefill.shape.gpus, decode_shape.gpus
        most = total // gp
        ladder = self.decode_ladder(decode_shape, decode_layout)
        if most < 1 or not ladder:
            return []
        if self.workload.concurrency is not None or most <= 16:
            return list(range(1, most + 1))
        a = prefill.requests_per_s * PREFILL_DEGRADATION
        c = max(option.requests_per_s for option in ladder) * DECODE_DEGRADATION
        crossing = c * total / (a * gd + c * gp)
        near = range(math.floor(crossing) - 2, math.ceil(crossing) + 3)
        return sorted({x for x in (1, most, *near) if 1 <= x <= most})

    def combine(
        self, prefill: _WorkerOption, decode_shape: EngineShape, decode_layout: LayoutPlan, transfer_ms: float
    ) -> DisaggregatedPlan | None:
        """The best split of the cluster between `prefill` workers and workers of `decode_shape`."""
        cluster, workload = self.cluster, self.workload
        total, gpn = cluster.total_gpus, cluster.gpus_per_node
        gp, gd = prefill.shape.gpus, decode_shape.gpus
        best: tuple[float, int, int, _WorkerOption] | None = None
        for x in self._prefill_counts(prefill, decode_shape, decode_layout):
            y = (total - x * gp) // gd
            while y >= 1 and not _packs([(gp, x), (gd, y)], cluster.nodes, gpn):
                y -= 1
            if y < 1:
                continue
            prefill_rate = x * prefill.requests_per_s * PREFILL_DEGRADATION
            option = self.decode_for(decode_shape, decode_layout, y, prefill_rate)
            if option is None:
                continue
            rate = min(prefill_rate, y * option.requests_per_s * DECODE_DEGRADATION)
            if best is None or (rate, -option.times.tpot_ms) > (best[0] + 1e-12, -best[3].times.tpot_ms):
                best = (rate, x, y, option)
        if best is None:
            return None
        rate, x, y, decode = best
        held = y * decode.batch_per_rank * decode.shape.data_parallel
        ttft = prefill.times.ttft_ms * TTFT_QUEUEING_CORRECTION + transfer_ms
        tpot = decode.times.tpot_ms
        notes: list[str] = []
        requested = workload.concurrency
        if requested is not None and requested > held:
            wait_ms = (requested - held) / rate * 1000.0 if rate else math.inf
            ttft += wait_ms
            notes.append(
                f"{requested - held:,} of {requested:,} requests wait for a decode slot (~{wait_ms / 1000:,.1f} s)"
            )
        source = prefill.source if not prefill.source.measured else decode.source
        serving = ServingEstimate(
            ttft_ms=ttft,
            tpot_ms=tpot,
            output_tokens_per_s=rate * workload.output_tokens,
            gpus=x * gp + y * gd,
            nodes=(x * gp + y * gd) / gpn,
            concurrency=min(held, requested) if requested is not None else held,
            concurrency_requested=requested,
            batch_per_replica=decode.batch_per_rank,
            capacity_per_replica=min(
                self.settings.max_num_seqs, decode.layout.kv_tokens_per_replica // workload.tokens_per_request
            ),
            source=source,
            sla=sla_check(workload, ttft, tpot),
            estimated_parts=tuple(dict.fromkeys(prefill.times.estimated_parts + decode.times.estimated_parts)),
            notes=tuple(notes),
        )
        experts, release = self.card.n_routed_experts, self.request.vllm_version
        prefill_pool = Pool(
            "prefill",
            prefill.layout,
            prefill.shape,
            x,
            prefill.batch_per_rank,
            x * prefill.requests_per_s,
            *pool_vllm_args(prefill.layout, prefill.shape, "prefill", experts, release),
        )
        decode_pool = Pool(
            "decode",
            decode.layout,
            decode.shape,
            y,
            decode.batch_per_rank,
            y * decode.requests_per_s,
            *pool_vllm_args(decode.layout, decode.shape, "decode", experts, release),
        )
        warnings = self.warnings(prefill_pool, decode_pool)
        return DisaggregatedPlan(prefill_pool, decode_pool, serving, transfer_ms, warnings, None)

    def warnings(self, prefill: Pool, decode: Pool) -> tuple[str, ...]:
        out = []
        missing = self.request.hosts_without_rdma
        if missing:
            out.append(
                f"{', '.join(missing)} report no InfiniBand/RoCE port: NIXL moves the KV cache over TCP there and "
                "DeepEP does not run without RDMA"
            )
        gbps = self.cluster.inter_node_bytes_per_s * 8 / 1e9
        wide = [pool.role for pool in (prefill, decode) if pool.shape.expert_parallel_crosses_nodes]
        if wide and gbps < 100 * self.cluster.gpus_per_node:
            out.append(
                f"expert parallel across nodes in the {' and '.join(wide)} pool over {gbps:,.0f} Gb/s per node "
                f"({gbps / self.cluster.gpus_per_node:,.0f} per GPU): DeepEP's all-to-all wants ~400 Gb/s per GPU"
            )
        if self.cluster.inter_node_assumed:
            out.append("inter-node bandwidth is assumed (no agent reported RDMA ports): the KV transfer time is too")
        return tuple(out)


def plan_disaggregated(evaluator: LayoutEvaluator, layouts: list[LayoutPlan]) -> tuple[DisaggregatedPlan, ...]:
    """The best prefill/decode splits of the plan's cluster, best first (by the plan's goal), at most KEEP."""
    planner = _Planner(evaluator, layouts)
    if evaluator.request.cluster.total_gpus < 2 or len(planner.shapes) == 0:
        return ()
    transfer = planner.kv_transfer_ms()
    prefills = planner.prefill_options()
    found: list[DisaggregatedPlan] = []
    for shape, layout in planner.shapes.items():
        for prefill in prefills:
            plan = planner.combine(prefill, shape, layout, transfer)
            if plan is not None:
                found.append(plan)
    goal = evaluator.request.goal
    found.sort(key=lambda p: serving_rank_key(p.serving, goal), reverse=True)
    seen: set[tuple[EngineShape, EngineShape]] = set()
    kept = []
    for plan in found:
        pair = (plan.prefill.shape, plan.decode.shape)
        if pair in seen:
            continue
        seen.add(pair)
        kept.append(plan)
        if len(kept) == KEEP:
            break
    best_aggregated = next((lay.serving for lay in layouts if lay.valid and lay.fits and lay.serving is not None), None)
    if best_aggregated is None or best_aggregated.output_tokens_per_s <= 0:
        return tuple(kept)
    return tuple(
        replace(plan, versus_aggregated=plan.serving.output_tokens_per_s / best_aggregated.output_tokens_per_s)
        for plan in kept
    )
