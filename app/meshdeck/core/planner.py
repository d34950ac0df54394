"""The planner: every valid TP × PP × DP (× EP) layout of a DeepSeek model on a cluster, ranked by goal.

Layouts are enumerated per vLLM *instance* (one `vllm serve`): an instance uses a slice of one
node (1, 2, 4 … GPUs) or whole nodes (powers of two, small divisors of the cluster, the whole
cluster; at most as many GPUs as routed experts), and the cluster runs as many identical instances
as fit — so "fewer GPUs" layouts appear whenever an instance size does not divide the cluster.
Within an instance TP is tried over the divisors of the head count, PP over the divisors of what
is left (stages step across nodes; up to 16 stages), DP takes the rest; expert parallel on and off. Layouts vLLM
would refuse are kept with their reason (shown with --all); layouts that fit are ranked first by practice
(documented layouts before PP inside an NVLink node, before DP × PP — see `rank_layouts`), then by the
serving estimate at the operator's workload (serving.py: measured kernels where the tables reach, else the
roofline; a layout the kernel tables could not answer ranks after those they could):
- throughput: output tokens/s of the whole deployment (with SLA targets: of the layouts that meet them);
- latency: tokens/s one request sees (1 / TPOT);
- context: KV tokens per replica (how long or how many contexts one replica holds).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from meshdeck.core.errors import InputError
from meshdeck.core.evaluate import LayoutEvaluator
from meshdeck.core.layout_parts import LayoutCandidate
from meshdeck.core.layout_plan import LayoutPlan
from meshdeck.core.parameters import ParameterCounts, parameter_counts
from meshdeck.core.placement import placement_for
from meshdeck.core.plan_request import (
    DEFAULT_VLLM_VERSION,
    PlanRequest,
    ResolvedSettings,
    TrainingSettings,
    resolve,
)
from meshdeck.core.rocm import rocm_note
from meshdeck.core.rules import (
    EP_TIE_TOLERANCE,
    PRACTICE_DOCUMENTED,
    PRACTICE_NOTES,
    PRACTICE_PP_INSIDE_NVLINK_NODE,
    gpu_supported,
)
from meshdeck.core.serving import (
    SOURCE_ROOFLINE,
    PlanProgress,
    SpeedModel,
    SpeedSource,
    no_progress,
    serving_rank_key,
)
from meshdeck.core.throughput import MTP_ACCEPTANCE, expected_accepted_tokens
from meshdeck.core.units import GIB
from meshdeck.core.v4_kv import InFlight, v4_kv_rules
from meshdeck.core.v4_layout import concurrent_batches
from meshdeck.core.vllm_releases import NEWEST_MODELLED, accounting_for, release_text
from meshdeck.core.weights import WEIGHTS_CONVENTIONS

__all__ = [
    "DEFAULT_VLLM_VERSION",
    "LayoutPlan",
    "PlanRequest",
    "PlanResult",
    "Ranking",
    "TrainingSettings",
    "candidate_layouts",
    "plan",
    "rank_layouts",
]


# Deeper pipelines are never a good DeepSeek layout (a handful of layers per stage, bubbles everywhere);
# they are still evaluated when asked for with --pipeline-parallel.
MAX_ENUMERATED_PIPELINE_STAGES = 16
PP_MAKES_IT_FIT_NOTE = (
    "ranked by its KV tokens despite PP inside an NVLink node: no layout without it holds a max_model_len "
    "request (--goal context)"
)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def instance_sizes(gpus_per_node: int, nodes: int, max_gpus: int) -> list[int]:
    """GPUs per vLLM instance worth planning.

    Slices of one node (the divisors of its GPU count), then whole nodes: powers of two, the small
    divisors of a small cluster (3 of 6 nodes …) and the whole cluster — up to `max_gpus` (the routed
    expert count: beyond it an instance can only grow by pipeline stages; more instances serve better).
    """
    sizes = set(_divisors(gpus_per_node))
    node_counts = {d for d in _divisors(nodes) if d <= 4} if nodes < 8 else set()
    node_counts.add(nodes)
    power = 1
    while power <= nodes:
        node_counts.add(power)
        power *= 2
    sizes.update(k * gpus_per_node for k in node_counts if k * gpus_per_node <= max(max_gpus, gpus_per_node))
    return sorted(sizes)


def candidate_layouts(request: PlanRequest) -> Iterator[LayoutCandidate]:
    """Every layout worth evaluating, honouring the layout filters."""
    cluster, card = request.cluster, request.model
    fixed = (request.tensor_parallel, request.pipeline_parallel, request.data_parallel)
    if all(v is not None for v in fixed):
        tp, pp, dp = (int(v) for v in fixed)  # type: ignore[arg-type]
        size = tp * pp * dp
        placement = placement_for(cluster, size)
        if placement is None:
            raise InputError(
                "--tensor-parallel",
                f"TP×PP×DP = {tp}×{pp}×{dp} = {size} GPUs is neither a divisor of a {cluster.gpus_per_node}-GPU "
                f"node nor a whole number of nodes (at most {cluster.nodes})",
            )
        for ep in _ep_options(request, tp * dp):
            yield LayoutCandidate(tp, pp, dp, ep, placement)
        return
    tp_options = _divisors(card.num_attention_heads)
    for size in instance_sizes(cluster.gpus_per_node, cluster.nodes, card.n_routed_experts):
        placement = placement_for(cluster, size)
        if placement is None:
            continue
        for tp in tp_options:
            if size % tp or (request.tensor_parallel is not None and tp != request.tensor_parallel):
                continue
            for pp in _divisors(size // tp):
                if pp > min(card.num_hidden_layers, MAX_ENUMERATED_PIPELINE_STAGES):
                    break
                if request.pipeline_parallel is not None and pp != request.pipeline_parallel:
                    continue
                dp = size // tp // pp
                if request.data_parallel is not None and dp != request.data_parallel:
                    continue
                for ep in _ep_options(request, tp * dp):
                    yield LayoutCandidate(tp, pp, dp, ep, placement)


def _ep_options(request: PlanRequest, moe_ranks: int) -> tuple[bool, ...]:
    if request.expert_parallel is not None:
        return (request.expert_parallel,)
    return (False, True) if moe_ranks > 1 else (False,)


def _metric(layout: LayoutPlan, goal: str) -> tuple[float, float]:
    """What the goal ranks fitting layouts by (primary, tie-break): the serving estimate where there is one."""
    serving = layout.serving
    if goal == "context":
        return (float(layout.kv_tokens_per_replica), serving.output_tokens_per_s if serving else 0.0)
    return serving_rank_key(serving, goal)


ROOFLINE_AMONG_KERNELS_NOTE = (
    "its speed is the roofline's (the kernel tables had no answer for this shape): ranked after the layouts "
    "with measured-kernel estimates"
)


def _speed_tier(layout: LayoutPlan, measured_plan: bool) -> float:
    """0 for a layout whose estimate is of the plan's own source; 1 for a roofline stand-in in a measured plan."""
    serving = layout.serving
    return float(measured_plan and serving is not None and serving.source.kind == SOURCE_ROOFLINE)


def _ep_preference_note(layout: LayoutPlan, twin: LayoutPlan, shortfall: float) -> str:
    ranks = layout.tensor_parallel * layout.data_parallel
    return (
        f"ranked ahead of {twin.label()} (its estimate is {shortfall:.1%} lower, inside the estimate's "
        f"{EP_TIE_TOLERANCE:.0%} resolution): with --enable-expert-parallel each of the {ranks} GPUs holds whole "
        "experts (full-width grouped GEMMs) and vLLM can use DeepEP all2all and EPLB — the DP + EP layout of "
        "vLLM's DeepSeek recipes"
    )


class Ranking(NamedTuple):
    """Layouts in rank order and, per position, why it is there when the estimate alone does not say."""

    layouts: list[LayoutPlan]
    notes: tuple[str, ...]


def rank_layouts(layouts: list[LayoutPlan], goal: str, *, measured_plan: bool = False) -> Ranking:
    """Layouts in rank order: runnable and fitting first, then practice, then the goal's estimate.

    - A layout vLLM does not document (DP × PP) or that puts pipeline stages inside an NVLink node
      ranks below every documented layout that fits, whatever its estimate; for --goal context,
      in-node PP keeps its place when no documented layout fits (then PP is what makes it fit).
    - With DP > 1, the EP variant of a layout ranks ahead of the same layout without EP unless its
      estimate is more than EP_TIE_TOLERANCE worse (the two differ only by a few hundred MiB of reserve).
    - In a plan with measured-kernel speed (`measured_plan`), a layout the tables could not answer (its speed
      is the roofline's) ranks after those they could: the two sources are not comparable.
    A layout whose place is not the estimate's alone gets a note saying why (the note belongs to the
    ranking, not to the layout: the same layout ranks differently for another goal).
    """
    fitting = [layout for layout in layouts if layout.valid and layout.fits]
    pp_makes_it_fit = goal == "context" and not any(layout.practice_tier == PRACTICE_DOCUMENTED for layout in fitting)
    metrics = {id(layout): _metric(layout, goal) for layout in fitting}
    without_ep = {
        (lay.tensor_parallel, lay.pipeline_parallel, lay.data_parallel, lay.gpus_per_instance): lay
        for lay in fitting
        if lay.data_parallel > 1 and not lay.expert_parallel
    }
    notes: dict[int, str] = {}
    for layout in fitting:
        if not layout.expert_parallel or layout.data_parallel == 1:
            continue
        twin = without_ep.get(
            (layout.tensor_parallel, layout.pipeline_parallel, layout.data_parallel, layout.gpus_per_instance)
        )
        if twin is None:
            continue
        own, other = metrics[id(layout)], metrics[id(twin)]
        if own < other and own[0] > 0 and own[0] >= (1 - EP_TIE_TOLERANCE) * other[0]:
            metrics[id(layout)] = other
            notes[id(layout)] = _ep_preference_note(layout, twin, 1 - own[0] / other[0] if other[0] else 0.0)

    def tier_of(layout: LayoutPlan) -> int:
        if pp_makes_it_fit and layout.practice_tier == PRACTICE_PP_INSIDE_NVLINK_NODE:
            return PRACTICE_DOCUMENTED
        return layout.practice_tier

    best_tier = min((tier_of(layout) for layout in fitting), default=PRACTICE_DOCUMENTED)
    for layout in fitting:
        if pp_makes_it_fit and layout.practice_tier == PRACTICE_PP_INSIDE_NVLINK_NODE:
            notes[id(layout)] = PP_MAKES_IT_FIT_NOTE
        elif tier_of(layout) > best_tier:  # demoted below a layout that fits: say why (first)
            notes[id(layout)] = "; ".join(filter(None, (PRACTICE_NOTES[layout.practice_tier], notes.get(id(layout)))))
        if _speed_tier(layout, measured_plan):
            notes[id(layout)] = "; ".join(filter(None, (notes.get(id(layout)), ROOFLINE_AMONG_KERNELS_NOTE)))

    def key(layout: LayoutPlan) -> tuple[float, ...]:
        head = (float(layout.valid), float(layout.supported), float(layout.fits))
        if not layout.fits:
            return (*head, 0.0, 0.0, -float(layout.shortfall_bytes), 0.0, 0.0, 0.0)
        ep_with_dp = float(layout.expert_parallel and layout.data_parallel > 1)
        speed_tier = -_speed_tier(layout, measured_plan)
        return (*head, -float(tier_of(layout)), speed_tier, *metrics[id(layout)], ep_with_dp, -float(layout.gpus))

    ranked = sorted(layouts, key=key, reverse=True)
    return Ranking(ranked, tuple(notes.get(id(layout), "") for layout in ranked))


@dataclass(frozen=True)
class PlanResult:
    request: PlanRequest
    settings: ResolvedSettings
    parameters: ParameterCounts
    layouts: list[LayoutPlan] = field(default_factory=list)
    top_reason: str = ""
    notes: tuple[str, ...] = ()
    training: Any = None  # a TrainingPlan for --mode train
    rank_notes: tuple[str, ...] = ()  # per layout, in rank order: why it sits there (see rank_layouts)
    speed_source: SpeedSource | None = None  # where the serving estimates come from (None: --mode train)
    disaggregated: tuple[Any, ...] = ()  # DisaggregatedPlan, best first (--disaggregated)

    @cached_property
    def _note_by_layout(self) -> dict[int, str]:
        return {id(layout): note for layout, note in zip(self.layouts, self.rank_notes, strict=False) if note}

    def rank_note(self, layout: LayoutPlan) -> str:
        """Why this plan ranked `layout` where it did, when its estimate alone does not say ("" otherwise)."""
        return self._note_by_layout.get(id(layout), "")

    @property
    def fitting(self) -> list[LayoutPlan]:
        return [layout for layout in self.layouts if layout.fits and layout.valid]

    @property
    def aggregated_best(self) -> LayoutPlan | None:
        """The best-ranked aggregated layout with a serving estimate (what disaggregated plans are held against)."""
        return next((layout for layout in self.fitting if layout.serving is not None), None)

    def as_dict(
        self, *, include_all: bool = False, top: int | None = None, include_rank_map: bool = True
    ) -> dict[str, Any]:
        chosen = self.layouts if include_all else self.fitting
        if top is not None:
            chosen = chosen[:top]
        request, settings, card = self.request, self.settings, self.request.model
        return {
            "model": {
                "name": card.name,
                "source": card.source,
                "architecture": card.architecture,
                "parameters": self.parameters.as_dict(),
            },
            "cluster": {
                "nodes": request.cluster.nodes,
                "gpus_per_node": request.cluster.gpus_per_node,
                "gpu": request.cluster.gpu.name,
                "gpu_memory_gib": round(request.cluster.gpu.memory_bytes / GIB, 2),
                "torch_visible_gib": round(request.cluster.gpu.torch_visible_bytes / GIB, 2),
                "intra_node_link": "topology" if request.cluster.topology else request.cluster.intra_node_link,
                "gpu_vendor": request.cluster.gpu.vendor,
                "gpu_arch": request.cluster.gpu.arch,
                "fp8_dtype": request.cluster.gpu.fp8_dtype or None,
                "inter_node_gbps": round(request.cluster.inter_node_bytes_per_s * 8 / 1e9, 1),
            },
            "settings": {
                "engine": request.engine,
                "mode": request.mode,
                "goal": request.goal,
                "weights_dtype": settings.weights_dtype,
                "weights_convention": WEIGHTS_CONVENTIONS[settings.weights_dtype],
                "kv_cache_dtype": settings.kv.kv_cache_dtype,
                "vllm_kv_cache_dtype": settings.kv.vllm_kv_cache_dtype,
                "attention_backend": settings.kv.attention_backend,
                "kv_block_size": settings.kv.block_size,
                "max_model_len": settings.max_model_len,
                "gpu_memory_utilization": request.gpu_memory_utilization,
                "max_num_seqs": settings.max_num_seqs,
                "max_num_batched_tokens": settings.max_num_batched_tokens,
                "mtp": request.mtp,
                "est_context_tokens": settings.context_tokens,
                "vllm_accounting": ".".join(str(v) for v in request.vllm_version),
                "vllm_accounting_range": accounting_for(request.vllm_version).label,
                "vllm_accounting_why": accounting_why(request),
            },
            "workload": request.workload.as_dict(),
            "speed_source": self.speed_source.as_dict() if self.speed_source else None,
            "top_reason": self.top_reason,
            "notes": list(self.notes),
            "layouts_total": len(self.layouts),
            "layouts_fitting": len(self.fitting),
            "layouts": [
                layout.as_dict(include_rank_map=include_rank_map, rank_note=self.rank_note(layout)) for layout in chosen
            ],
            **self._disaggregated_dict(),
        }

    def _disaggregated_dict(self) -> dict[str, Any]:
        if not self.request.disaggregated:
            return {}
        best = self.aggregated_best
        return {
            "disaggregated": [option.as_dict() for option in self.disaggregated],
            "aggregated_best": None
            if best is None or best.serving is None
            else {"layout": best.label(), "gpus": best.gpus, "serving": best.serving.as_dict()},
        }


V4_WEIGHTS_NOTE = (
    "DeepSeek-V4 as shipped: FP8 e4m3 linears with a UE8M0 scale per 128x128 block, routed experts MXFP4 (2 e2m1 "
    "values a byte, a UE8M0 scale per 32); embeddings, lm_head, norms, gate and compressors BF16; hyper-connections "
    "and attention sinks fp32 (core.v4_weights, checked tensor by tensor against the model vLLM 0.32 builds)"
)


def v4_note(request: PlanRequest) -> str:
    """What the V4 numbers stand on, and what has not been checked against a V4 startup log."""
    rules = v4_kv_rules(request.vllm_version)
    if rules.in_flight is InFlight.ONE_BATCH:
        in_flight = "window and compressor-state pages for one batch of max_num_batched_tokens"
    else:
        batches = concurrent_batches(request.vllm_version, 1, request.cluster.gpu)
        in_flight = f"{batches} batches in flight at PP=1 (async scheduling)"
    return (
        f"DeepSeek-V4: KV cache grouped and sized as vLLM {rules.label} does ({rules.grouping.value}: sliding-window "
        "rows, C4/C128 latents, indexer keys and fp32 compressor states in one block pool; equal to that range's own "
        f"sizing code), {in_flight}; requests in flight per replica are vLLM's own concurrency bound at isl + osl "
        "tokens (window and compressor-state pages for every token; they recycle at run time, so real concurrency can "
        "be higher); the activation and sampler reserve uses V3's terms at V4's widths and is not yet calibrated"
    )


def accounting_why(request: PlanRequest) -> str:
    """Why the plan follows its vLLM release: what the request says, else from the version itself."""
    if request.vllm_version_why:
        return request.vllm_version_why
    return "the newest modelled" if request.vllm_version == NEWEST_MODELLED else "as asked"


def accounting_note(request: PlanRequest) -> str:
    """Which release's accounting the numbers follow, why that one, how that release's range sizes the KV cache
    and what picks another — the one sentence the CLI's notes and the console's summary both show."""
    version = request.vllm_version
    accounting = accounting_for(version)
    return (
        f"memory accounting follows vLLM {release_text(version)}, {accounting_why(request)} "
        f"(releases {accounting.label}: {accounting.summary}; {request.vllm_version_picker} picks another)"
    )


def _top_reason(layouts: list[LayoutPlan], goal: str, settings: ResolvedSettings, top_note: str = "") -> str:
    if not layouts:
        return "no layout matches the filters"
    top = layouts[0]
    if not top.valid:
        return f"no valid layout: {top.invalid_reason}"
    if not top.fits:
        room = (
            f"it holds {top.kv_tokens_per_replica:,} KV tokens, so --max-model-len {top.kv_tokens_per_replica} would fit"
            if top.kv_tokens_per_replica
            else "its weights and reserve alone exceed --gpu-memory-utilization"
        )
        prefix = "" if top.supported else "vLLM cannot run this model on this GPU at all (see the warnings); "
        return prefix + (
            f"nothing fits: the closest, {top.label()}, is short by {top.shortfall_bytes / GIB:.1f} GiB per GPU for one "
            f"{settings.max_model_len}-token request ({room}) — add GPUs, lower --max-model-len, raise "
            "--gpu-memory-utilization or use --kv-cache-dtype fp8"
        )
    kv = f"{top.kv_tokens_per_replica:,} KV tokens per replica ({top.max_concurrency:.1f}× max_model_len)"
    serving = top.serving
    speed = (
        f"{serving.output_tokens_per_s:,.0f} output tok/s ({serving.output_tokens_per_s_per_gpu:,.0f} per GPU), "
        f"TPOT {serving.tpot_ms:,.1f} ms, TTFT {serving.ttft_ms:,.0f} ms at {serving.concurrency:,} in flight "
        f"({'measured kernels' if serving.source.measured else 'roofline'})"
        if serving is not None
        else f"no serving estimate: {top.serving_problem}"
    )
    if goal == "latency":
        why = "fastest for one request" + (f", {serving.tokens_per_s_per_user:.1f} tok/s per user" if serving else "")
        why += f": {speed}"
    elif goal == "context":
        why = f"most KV per replica: {kv}"
        kv = speed
    else:
        why = f"highest output throughput: {speed}"
    if serving is not None and serving.sla is not None and not serving.sla.meets:
        why += f"; no layout meets the SLA targets — this one misses by {serving.sla.worst_miss:.0%}"
    caveat = "" if top.supported else " — but see its warnings: vLLM cannot run it on this GPU"
    note = f"; {top_note}" if top_note else ""
    return f"{top.label()} on {top.gpus} GPUs: {why}; {kv}{note}{caveat}"


def plan(
    request: PlanRequest,
    speed: SpeedModel | None = None,
    *,
    roofline_reason: str = "",
    progress: PlanProgress = no_progress,
) -> PlanResult:
    """Evaluate and rank every candidate layout (or, for --mode train, the training layouts).

    `speed` answers TTFT / TPOT from measured kernels (meshdeck.speed builds one where its tables reach);
    without it the roofline answers and `roofline_reason` says why. `progress(done, total, what)` is called
    as layouts are estimated; it may raise serving.Cancelled to stop the plan.
    """
    settings = resolve(request)
    counts = parameter_counts(request.model)
    if request.mode == "train":
        from meshdeck.core.training import plan_training  # training imports the serving evaluator

        training = plan_training(request, settings, counts)
        return PlanResult(request, settings, counts, [], training.top_reason, training.notes, training)
    supported = gpu_supported(request.model, request.cluster.gpu, settings.weights_dtype, request.vllm_version)
    evaluator = LayoutEvaluator(request, settings, supported, speed, roofline_reason)
    candidates = list(candidate_layouts(request))
    steps = len(candidates) + (1 if request.disaggregated else 0)
    layouts = []
    for done, candidate in enumerate(candidates):
        if done % 16 == 0:
            progress(done, steps, "layouts")
        layouts.append(evaluator.evaluate(candidate))
    if not layouts and any(
        v is not None for v in (request.tensor_parallel, request.pipeline_parallel, request.data_parallel)
    ):
        raise InputError(
            "--tensor-parallel",
            f"no layout on {request.cluster.nodes}×{request.cluster.gpus_per_node} GPUs matches the TP/PP/DP filters",
        )
    speed_source = evaluator.speed.source
    ranking = rank_layouts(layouts, request.goal, measured_plan=speed_source.measured)
    scored = ranking.layouts
    notes: tuple[str, ...] = (
        f"serving: {speed_source.text()}; workload {request.workload.text()}"
        + ("" if request.workload.stated else " (the default: --isl, --osl, --concurrency, --ttft-ms, --tpot-ms)"),
        *_fallback_note(scored, speed_source),
        "est_decode_* numbers are the roofline's decode estimate (bandwidth and FLOP models), not measurements",
        f"weights: {V4_WEIGHTS_NOTE if request.model.is_v4 and settings.weights_dtype != 'bf16' else WEIGHTS_CONVENTIONS[settings.weights_dtype]}",
        accounting_note(request),
        *((v4_note(request),) if request.model.is_v4 else ()),
    )
    if request.cluster.gpu.vendor == "amd":
        notes += (rocm_note(request.cluster.gpu.arch, request.cluster.gpu.name),)
    if request.mtp:
        notes += (
            f"MTP: est_* assume each of the {request.mtp_speculative_tokens} draft tokens is accepted with probability "
            f"{MTP_ACCEPTANCE:g} (≈{expected_accepted_tokens(request.mtp_speculative_tokens):.2f} tokens per step)",
        )
    top_reason = _top_reason(scored, request.goal, settings, ranking.notes[0] if scored else "")
    disaggregated: tuple[Any, ...] = ()
    if request.disaggregated:
        from meshdeck.core.disaggregated import plan_disaggregated  # only --disaggregated pays for it

        progress(len(candidates), steps, "prefill/decode pools")
        disaggregated = plan_disaggregated(evaluator, scored)
    progress(steps, steps, "done")
    return PlanResult(
        request,
        settings,
        counts,
        scored,
        top_reason,
        notes,
        rank_notes=ranking.notes,
        speed_source=speed_source,
        disaggregated=disaggregated,
    )


def _fallback_note(layouts: list[LayoutPlan], source: SpeedSource) -> tuple[str, ...]:
    """Where a measured plan's tables had no answer and the roofline stood in, said once for the plan."""
    if not source.measured:
        return ()
    stand_ins = [lay for lay in layouts if lay.serving is not None and lay.serving.source.kind == SOURCE_ROOFLINE]
    if not stand_ins:
        return ()
    names = ", ".join(layout.label() for layout in stand_ins[:4]) + (" …" if len(stand_ins) > 4 else "")
    return (
        f"{len(stand_ins)} layout(s) ({names}) have no measured-kernel answer: their speed is the roofline's, "
        "labelled so, and they rank after the measured ones",
    )
