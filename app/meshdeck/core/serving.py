"""Serving speed at the operator's workload: the records, the speed-model interface, one layout's estimate.

Memory and speed have one owner each (DESIGN §5). The memory model is meshdeck's (KV capacity per replica,
exact per vLLM release); the speed of an engine — how long a prefill, a decode step, a mixed continuous-
batching step takes — comes from a `SpeedModel`: measured kernel tables (NVIDIA's aiconfigurator-core,
adapted outside `core` in `meshdeck.speed`) or, where those tables do not reach, the roofline of
`roofline_speed.py`. Every estimate names its source; the two are never mixed silently.

What this module adds on top of a speed model is the serving arithmetic, the same for both sources:
- the workload (`--isl`, `--osl`, and `--concurrency` or SLA targets `--ttft-ms` / `--tpot-ms`);
- the concurrency a layout holds: requests in flight across the whole deployment, split over its replicas
  (instances × DP ranks), each replica capped by meshdeck's KV capacity (a request holds isl + osl tokens by
  its end) and by `max_num_seqs` — what is asked beyond that waits in vLLM's queue;
- throughput by Little's law: a replica holding b requests, each taking TTFT + (osl − 1) × TPOT, completes
  b / latency requests a second; requests that wait add their queueing time to TTFT;
- with SLA targets: the most concurrency a layout holds while meeting both, or by how much it misses.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from meshdeck.core.errors import InputError

Role = Literal["aggregated", "prefill", "decode"]
SOURCE_ROOFLINE = "roofline"
SOURCE_KERNELS = "measured-kernels"
# Workload defaults when the operator states none: 1k in / 1k out, the first of InferenceMAX's standard
# workloads; concurrency then is what each layout holds (its KV capacity or max_num_seqs).
DEFAULT_INPUT_TOKENS = 1024
DEFAULT_OUTPUT_TOKENS = 1024
MAX_WORKLOAD_TOKENS = 10_000_000
MAX_CONCURRENCY = 10_000_000
# SLA search: how many times the binary search may ask the speed model per layout (1 … capacity).
_SLA_SEARCH_STEPS = 24


def _bounded_int(value: object, flag: str, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(flag, f"must be a positive integer, got {value!r}")
    if value > maximum:
        raise InputError(flag, f"must be at most {maximum:,}, got {value:,}")
    return value


def _positive_ms(value: object, flag: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise InputError(flag, f"must be a positive number of milliseconds, got {value!r}")
    if value > 86_400_000:
        raise InputError(flag, f"must be at most one day (86400000 ms), got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Workload:
    """What the operator serves: tokens in and out per request, and either a concurrency or SLA targets."""

    input_tokens: int = DEFAULT_INPUT_TOKENS  # --isl
    output_tokens: int = DEFAULT_OUTPUT_TOKENS  # --osl
    concurrency: int | None = None  # --concurrency: requests in flight across the whole deployment
    ttft_ms: float | None = None  # --ttft-ms: time-to-first-token target
    tpot_ms: float | None = None  # --tpot-ms: time-per-output-token target
    stated: bool = False  # False: the defaults above, said so in the plan's notes

    def __post_init__(self) -> None:
        _bounded_int(self.input_tokens, "--isl", MAX_WORKLOAD_TOKENS)
        _bounded_int(self.output_tokens, "--osl", MAX_WORKLOAD_TOKENS)
        if self.concurrency is not None:
            _bounded_int(self.concurrency, "--concurrency", MAX_CONCURRENCY)
        if self.ttft_ms is not None:
            object.__setattr__(self, "ttft_ms", _positive_ms(self.ttft_ms, "--ttft-ms"))
        if self.tpot_ms is not None:
            object.__setattr__(self, "tpot_ms", _positive_ms(self.tpot_ms, "--tpot-ms"))

    @property
    def has_sla(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None

    @property
    def tokens_per_request(self) -> int:
        """KV tokens one request holds by its end."""
        return self.input_tokens + self.output_tokens

    def text(self) -> str:
        parts = [f"{self.input_tokens:,} in / {self.output_tokens:,} out tokens"]
        if self.concurrency is not None:
            parts.append(f"{self.concurrency:,} requests in flight")
        if self.ttft_ms is not None:
            parts.append(f"TTFT ≤ {self.ttft_ms:g} ms")
        if self.tpot_ms is not None:
            parts.append(f"TPOT ≤ {self.tpot_ms:g} ms")
        if self.concurrency is None and not self.has_sla:
            parts.append("each layout at the concurrency it holds")
        return ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "isl": self.input_tokens,
            "osl": self.output_tokens,
            "concurrency": self.concurrency,
            "ttft_ms": self.ttft_ms,
            "tpot_ms": self.tpot_ms,
            "stated": self.stated,
        }


def parallel_label(tensor_parallel: int, pipeline_parallel: int, data_parallel: int, expert: str = "") -> str:
    """ "TP2·PP2·DP4·EP": the degrees above one (TP always), then `expert` ("EP", "EP8" or "" without EP)."""
    parts = [f"TP{tensor_parallel}"]
    if pipeline_parallel > 1:
        parts.append(f"PP{pipeline_parallel}")
    if data_parallel > 1:
        parts.append(f"DP{data_parallel}")
    if expert:
        parts.append(expert)
    return "·".join(parts)


@dataclass(frozen=True)
class EngineShape:
    """One engine (one `vllm serve`, or one worker of a prefill or decode pool) as a speed model sees it."""

    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int  # attention DP ranks inside the engine
    expert_parallel: bool
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel

    @property
    def nodes(self) -> int:
        return max(1, -(-self.gpus // self.gpus_per_node))

    @property
    def expert_parallel_size(self) -> int:
        return self.tensor_parallel * self.data_parallel if self.expert_parallel else 1

    @property
    def expert_parallel_crosses_nodes(self) -> bool:
        return self.expert_parallel and self.expert_parallel_size > self.gpus_per_node

    def label(self) -> str:
        return parallel_label(
            self.tensor_parallel,
            self.pipeline_parallel,
            self.data_parallel,
            f"EP{self.expert_parallel_size}" if self.expert_parallel else "",
        )


@dataclass(frozen=True)
class SpeedQuery:
    """One question to a speed model: an engine shape in a role, at a batch per DP rank, for a workload.

    - aggregated: continuous batching of `batch_per_rank` requests per DP rank, prefill chunks of at most
      `chunk_tokens` riding along the decode steps (vLLM's chunked prefill): answers TTFT and TPOT;
    - prefill: `batch_per_rank` prompts per rank prefilled together: answers their latency (TTFT);
    - decode: `batch_per_rank` sequences per rank decoding at context ≈ isl + osl/2: answers TPOT.
    `roofline` carries what the roofline needs of the layout (the evaluator's per-stage inputs); the
    kernel model ignores it.
    """

    shape: EngineShape
    role: Role
    batch_per_rank: int
    input_tokens: int
    output_tokens: int
    chunk_tokens: int
    speculative_tokens: int = 0  # MTP draft tokens (0: off)
    roofline: Any = field(default=None, compare=False, hash=False, repr=False)


@dataclass(frozen=True)
class StepTimes:
    """A speed model's answer: milliseconds, and what in it is not measured where it applies."""

    ttft_ms: float  # aggregated: time to first token; prefill: the batch's prefill latency; decode: 0
    tpot_ms: float  # aggregated and decode: time per output token (MTP acceptance applied); prefill: 0
    estimated_parts: tuple[str, ...] = ()  # e.g. "DeepEP all-to-all measured at EP8 on one node, used at EP32"


@dataclass(frozen=True)
class SpeedSource:
    """Where a plan's speed numbers come from, said in every output."""

    kind: str  # SOURCE_KERNELS | SOURCE_ROOFLINE
    label: str  # one line: "aiconfigurator-core 0.12.0, h200_sxm vllm 0.24.0 tables" or "roofline"
    reason: str = ""  # roofline: why the kernel tables do not reach (GPU, release, platform, package)
    nearest: str = ""  # kernels: which release's tables stand in for the launch's, and what that implies
    caveats: tuple[str, ...] = ()  # kernels: what the tables fill from elsewhere (the library's fallbacks)

    @property
    def measured(self) -> bool:
        return self.kind == SOURCE_KERNELS

    def text(self) -> str:
        if self.measured:
            extra = "".join(f"; {part}" for part in (self.nearest, *self.caveats) if part)
            return f"speed from measured kernels ({self.label}){extra}"
        return (
            "speed from the ROOFLINE estimate (bandwidth and FLOP model, not measured)"
            f"{': ' + self.reason if self.reason else ''}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "label": self.label,
            "reason": self.reason,
            "nearest": self.nearest,
            "caveats": list(self.caveats),
        }


class SpeedModel(Protocol):
    """Answers TTFT / TPOT for one engine shape at one batch. Implementations: kernel tables, roofline."""

    @property
    def source(self) -> SpeedSource: ...

    def times(self, query: SpeedQuery) -> StepTimes | None:
        """The answer, or None when this model cannot answer this query (the caller says so)."""
        ...


class Cancelled(Exception):
    """A plan stopped because its owner asked it to (the console's Cancel)."""


class PlanProgress(Protocol):
    """What the planner reports while it estimates (the console's progress bar) and where it may stop."""

    def __call__(self, done: int, total: int, what: str) -> None:
        """Raise Cancelled to stop the plan."""
        ...


def no_progress(done: int, total: int, what: str) -> None:
    """The progress of a plan nobody watches."""


@dataclass(frozen=True)
class SlaCheck:
    ttft_ms: float | None
    tpot_ms: float | None
    meets: bool
    ttft_miss: float  # fraction over the target (0.25: 25 % slower than asked); 0 when met or not asked
    tpot_miss: float

    @property
    def worst_miss(self) -> float:
        return max(self.ttft_miss, self.tpot_miss)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ttft_ms_target": self.ttft_ms,
            "tpot_ms_target": self.tpot_ms,
            "meets": self.meets,
            "ttft_miss_pct": round(self.ttft_miss * 100, 1),
            "tpot_miss_pct": round(self.tpot_miss * 100, 1),
        }


def sla_check(workload: Workload, ttft_ms: float, tpot_ms: float) -> SlaCheck | None:
    if not workload.has_sla:
        return None
    ttft_miss = max(0.0, ttft_ms / workload.ttft_ms - 1) if workload.ttft_ms else 0.0
    tpot_miss = max(0.0, tpot_ms / workload.tpot_ms - 1) if workload.tpot_ms else 0.0
    return SlaCheck(workload.ttft_ms, workload.tpot_ms, ttft_miss == 0 and tpot_miss == 0, ttft_miss, tpot_miss)


@dataclass(frozen=True)
class ServingEstimate:
    """What a deployment serves at the workload: latency, throughput and the concurrency it holds."""

    ttft_ms: float  # including the wait of requests beyond what the deployment holds
    tpot_ms: float
    output_tokens_per_s: float  # the whole deployment
    gpus: int
    nodes: float  # GPUs / GPUs per node
    concurrency: int  # requests in flight the deployment holds (over every replica)
    concurrency_requested: int | None
    batch_per_replica: int
    capacity_per_replica: int  # KV- and max_num_seqs-bound requests one replica holds
    source: SpeedSource
    sla: SlaCheck | None = None
    estimated_parts: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def output_tokens_per_s_per_gpu(self) -> float:
        return self.output_tokens_per_s / self.gpus if self.gpus else 0.0

    @property
    def output_tokens_per_s_per_node(self) -> float:
        return self.output_tokens_per_s / self.nodes if self.nodes else 0.0

    @property
    def tokens_per_s_per_user(self) -> float:
        return 1000.0 / self.tpot_ms if self.tpot_ms > 0 else 0.0

    @property
    def queued(self) -> int:
        return max(0, (self.concurrency_requested or 0) - self.concurrency)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ttft_ms": round(self.ttft_ms, 1),
            "tpot_ms": round(self.tpot_ms, 2),
            "output_tokens_per_s": round(self.output_tokens_per_s, 1),
            "output_tokens_per_s_per_gpu": round(self.output_tokens_per_s_per_gpu, 1),
            "output_tokens_per_s_per_node": round(self.output_tokens_per_s_per_node, 1),
            "tokens_per_s_per_user": round(self.tokens_per_s_per_user, 2),
            "concurrency": self.concurrency,
            "concurrency_requested": self.concurrency_requested,
            "queued": self.queued,
            "batch_per_replica": self.batch_per_replica,
            "capacity_per_replica": self.capacity_per_replica,
            "sla": self.sla.as_dict() if self.sla else None,
            "source": "roofline" if not self.source.measured else self.source.label,
            "source_detail": self.source.as_dict(),
            "estimated_parts": list(self.estimated_parts),
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Deployment:
    """An aggregated layout as the serving arithmetic needs it: one engine shape, repeated, with its KV capacity."""

    shape: EngineShape
    instances: int
    kv_tokens_per_replica: int
    max_num_seqs: int
    chunk_tokens: int  # max_num_batched_tokens
    speculative_tokens: int = 0
    roofline: Any = field(default=None, compare=False, hash=False, repr=False)

    @property
    def replicas(self) -> int:
        return self.instances * self.shape.data_parallel

    @property
    def gpus(self) -> int:
        return self.instances * self.shape.gpus


def capacity_per_replica(deployment: Deployment, workload: Workload) -> int:
    """Requests one replica holds to their end without preemption: KV tokens / (isl + osl), and max_num_seqs."""
    return min(deployment.max_num_seqs, deployment.kv_tokens_per_replica // workload.tokens_per_request)


def _query(deployment: Deployment, workload: Workload, batch: int) -> SpeedQuery:
    return SpeedQuery(
        deployment.shape,
        "aggregated",
        batch,
        workload.input_tokens,
        workload.output_tokens,
        deployment.chunk_tokens,
        deployment.speculative_tokens,
        deployment.roofline,
    )


def request_latency_ms(ttft_ms: float, tpot_ms: float, output_tokens: int) -> float:
    return ttft_ms + (output_tokens - 1) * tpot_ms


def aggregated_estimate(
    deployment: Deployment, workload: Workload, speed: SpeedModel, *, fallback: SpeedModel | None = None
) -> ServingEstimate | str:
    """The deployment's serving estimate at the workload, or why it cannot serve it.

    `fallback` answers where `speed` cannot (a shape outside its tables); the estimate then names the
    fallback's source, so a row never shows measured-kernel numbers that were not.
    """
    capacity = capacity_per_replica(deployment, workload)
    if capacity < 1:
        return (
            f"one request of {workload.tokens_per_request:,} tokens (--isl + --osl) does not fit a replica's "
            f"{deployment.kv_tokens_per_replica:,} KV tokens"
        )
    replicas = deployment.replicas

    def ask(batch: int) -> tuple[StepTimes, SpeedSource] | None:
        query = _query(deployment, workload, batch)
        answer = speed.times(query)
        if answer is not None:
            return answer, speed.source
        if fallback is not None:
            answer = fallback.times(query)
            if answer is not None:
                return answer, fallback.source
        return None

    requested = workload.concurrency
    if requested is not None:
        batch = min(capacity, -(-requested // replicas))
    elif workload.has_sla:
        found = _largest_batch_meeting_sla(capacity, workload, ask)
        if isinstance(found, str):
            return found
        batch = found
    else:
        batch = capacity
    answered = ask(batch)
    if answered is None:
        return f"no speed estimate for {deployment.shape.label()} at {batch} requests per replica"
    times, source = answered
    held = min(requested, batch * replicas) if requested is not None else batch * replicas
    latency_ms = request_latency_ms(times.ttft_ms, times.tpot_ms, workload.output_tokens)
    requests_per_s = held / (latency_ms / 1000.0) if latency_ms > 0 else 0.0
    ttft = times.ttft_ms
    notes: list[str] = []
    if requested is not None and requested > held:
        # Little's law for a closed loop of `requested` clients: each waits (requested − held) / rate first
        wait_ms = (requested - held) / requests_per_s * 1000.0 if requests_per_s else math.inf
        ttft += wait_ms
        notes.append(
            f"{requested - held:,} of {requested:,} requests wait in vLLM's queue (the deployment holds {held:,}: "
            f"{capacity:,} per replica by KV cache and max_num_seqs); TTFT includes ~{wait_ms / 1000:,.1f} s of wait"
        )
    return ServingEstimate(
        ttft_ms=ttft,
        tpot_ms=times.tpot_ms,
        output_tokens_per_s=requests_per_s * workload.output_tokens,
        gpus=deployment.gpus,
        nodes=deployment.gpus / deployment.shape.gpus_per_node,
        concurrency=held,
        concurrency_requested=requested,
        batch_per_replica=batch,
        capacity_per_replica=capacity,
        source=source,
        sla=sla_check(workload, ttft, times.tpot_ms),
        estimated_parts=times.estimated_parts,
        notes=tuple(notes),
    )


def _largest_batch_meeting_sla(
    capacity: int, workload: Workload, ask: Callable[[int], tuple[StepTimes, SpeedSource] | None]
) -> int | str:
    """The largest batch per replica whose TTFT and TPOT meet the targets (1 when even one request misses).

    TTFT and TPOT grow with the batch, so a binary search over 1 … capacity finds it.
    """

    def meets(batch: int) -> bool | None:
        answered = ask(batch)
        if answered is None:
            return None
        times = answered[0]
        check = sla_check(workload, times.ttft_ms, times.tpot_ms)
        return check is None or check.meets

    first = meets(1)
    if first is None:
        return "no speed estimate at one request per replica"
    if not first:
        return 1
    low, high = 1, capacity
    for _ in range(_SLA_SEARCH_STEPS):
        if low >= high:
            break
        middle = (low + high + 1) // 2
        if meets(middle):
            low = middle
        else:
            high = middle - 1
    return low


def serving_rank_key(estimate: ServingEstimate | None, goal: str) -> tuple[float, float]:
    """What the goal ranks by (higher first): throughput → deployment output tokens/s, then tokens/s per user;
    latency → tokens/s per user, then output tokens/s.

    With SLA targets, layouts meeting them come first; the rest follow by how little they miss.
    """
    if estimate is None:
        return (-math.inf, -math.inf)
    primary = estimate.tokens_per_s_per_user if goal == "latency" else estimate.output_tokens_per_s
    secondary = estimate.output_tokens_per_s if goal == "latency" else estimate.tokens_per_s_per_user
    if estimate.sla is not None and not estimate.sla.meets:
        return (-1.0 - estimate.sla.worst_miss, primary)
    return (primary, secondary)


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both axes (x: tokens/s per user, y: tokens/s per GPU),
    in order of increasing x — the throughput–interactivity front."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1]))
    front, best_y = [], -math.inf
    for index in order:
        if points[index][1] > best_y:
            front.append(index)
            best_y = points[index][1]
    return sorted(front, key=lambda i: points[i][0])
