"""Evaluate one (TP, PP, DP, EP) layout on a cluster: memory, KV, traffic, decode estimate, warnings.

This is the per-layout half of the planner; `planner.py` enumerates layouts and ranks them.
Only what ranking needs is computed when a layout is evaluated (memory per stage, KV blocks, the
decode estimate of layouts that fit); its warnings, `vllm serve` flags and per-component weights are
built when someone looks at it (a 64-node cluster has hundreds of layouts; a table shows a handful).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

from meshdeck.core.kv_cache import KvCapacity, kv_capacity_from_blocks
from meshdeck.core.layout_details import layout_details
from meshdeck.core.layout_parts import (
    LayoutCandidate,
    PipelineMemory,
    PipelineStages,
    Sharding,
    StageKind,
    StageMemory,
    pipeline_stages,
    process_groups,
)
from meshdeck.core.layout_plan import LayoutPlan
from meshdeck.core.placement import GroupLinks, group_links, pipeline_inside_nvlink_node
from meshdeck.core.plan_request import PlanRequest, ResolvedSettings
from meshdeck.core.reserve import ProcessMemory, ReserveInputs, layout_reserve, process_memory_for_groups
from meshdeck.core.roofline_speed import RooflineInputs, RooflineSpeed
from meshdeck.core.rules import practice_tier
from meshdeck.core.serving import Deployment, EngineShape, ServingEstimate, SpeedModel, aggregated_estimate
from meshdeck.core.throughput import DecodeModel
from meshdeck.core.traffic import TrafficItem, decode_traffic
from meshdeck.core.units import GIB
from meshdeck.core.v4_layout import (
    V4StageKv,
    concurrent_batches,
    v4_backend,
    v4_shard_problem,
    v4_shard_totals,
    v4_stage_bytes,
    v4_stage_kv,
)
from meshdeck.core.vllm_releases import accounting_for
from meshdeck.core.weights import (
    ShardShape,
    StageWeights,
    invalid_shard_reason,
    shard_totals,
    stage_total,
    stage_weights,
)


@dataclass(frozen=True)
class LayoutEstimate:
    """A layout's decode estimate (layouts that fit) and the warnings it raises."""

    tokens_per_s: float  # whole cluster: every instance, every DP rank
    tokens_per_s_per_request: float
    bound: str
    batch_per_replica: int
    traffic: tuple[TrafficItem, ...]  # per token through the busiest stage
    warnings: tuple[str, ...]  # CUDA graphs that do not fit the headroom (vLLM < 0.20)
    roofline: RooflineInputs | None = None  # what the roofline speed model needs of this layout


NOT_ESTIMATED = LayoutEstimate(0.0, 0.0, "", 0, (), ())

MTP_PP_REASON = (
    "MTP speculative decoding does not run with pipeline parallelism in vLLM "
    "(vllm-project/vllm #14089, #49355: PP > 1 with MTP fails)"
)


def refused(candidate: LayoutCandidate, reason: str) -> LayoutPlan:
    """A layout vLLM would refuse, kept with its reason (shown with --all)."""
    return LayoutPlan(
        tensor_parallel=candidate.tensor_parallel,
        pipeline_parallel=candidate.pipeline_parallel,
        data_parallel=candidate.data_parallel,
        expert_parallel=candidate.expert_parallel,
        placement=candidate.placement,
        valid=False,
        invalid_reason=reason,
        supported=False,
        reason=f"invalid: {reason}",
    )


class LayoutEvaluator:
    """Evaluates the layouts of one request (one plan)."""

    def __init__(
        self,
        request: PlanRequest,
        settings: ResolvedSettings,
        supported: bool = True,
        speed: SpeedModel | None = None,
        roofline_reason: str = "",
    ) -> None:
        """`speed` answers TTFT / TPOT (measured kernels); None: the roofline alone, saying `roofline_reason`."""
        self.request, self.settings, self.supported = request, settings, supported
        self.mtp_layers = request.model.num_nextn_predict_layers if request.mtp else 0
        self.speculative_tokens = request.mtp_speculative_tokens if request.mtp else 0
        self.decode = DecodeModel(
            request.model,
            settings.kv,
            request.cluster,
            context_tokens=settings.context_tokens,
            weights_fp8=settings.weights_dtype == "fp8",
            speculative_tokens=self.speculative_tokens,
        )
        self.roofline = RooflineSpeed(self.decode, request.model, roofline_reason)
        self.speed: SpeedModel = speed if speed is not None else self.roofline
        self.accounting = accounting_for(request.vllm_version)
        self.blocks_per_request = -(-settings.max_model_len // settings.kv.block_size)
        self.kv_block_bytes_per_layer = settings.kv.block_size * settings.kv.bytes_per_token_per_layer
        self._shardings: dict[tuple[int, int, bool], Sharding | str] = {}

    def sharding(self, tensor_parallel: int, data_parallel: int, expert_parallel: bool) -> Sharding | str:
        """What every layout of this sharding shares, or why vLLM refuses it.

        Kept for the plan: a plan has a few dozen shardings and hundreds of layouts.
        """
        key = (tensor_parallel, data_parallel, expert_parallel)
        found = self._shardings.get(key)
        if found is None:
            shape = ShardShape(
                tensor_parallel,
                tensor_parallel * data_parallel,
                expert_parallel,
                self.settings.weights_dtype,
                rocm_row_padding=self.request.cluster.gpu.vendor == "amd",
                vision_whole=self.request.mm_encoder_tp_mode == "data",
            )
            card = self.request.model
            reason = v4_shard_problem(card, shape) if card.is_v4 else invalid_shard_reason(card, shape)
            found = self._shardings[key] = self._new_sharding(shape) if reason is None else reason
        return found

    def _new_sharding(self, shape: ShardShape) -> Sharding:
        request, settings, card = self.request, self.settings, self.request.model
        mtp = bool(self.mtp_layers)
        reserve_inputs = ReserveInputs(
            tensor_parallel=shape.tensor_parallel,
            data_parallel=shape.moe_ranks // shape.tensor_parallel,
            expert_parallel=shape.expert_parallel,
            moe_ranks=shape.moe_ranks,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            max_num_seqs=settings.max_num_seqs,
            cudagraph_capture_sizes=settings.cudagraph_capture_sizes,
            mtp=mtp,
            vllm_version=request.vllm_version,
            deep_gemm_moe=settings.deep_gemm_moe,
            speculative_tokens=self.speculative_tokens,
            sorting_sampler=self.accounting.sorting_sampler
            and not (self.accounting.flashinfer_sampler and request.cluster.gpu.vendor == "nvidia"),
            cudagraph_in_budget=request.cudagraph_memory_estimate,
            rocm=request.cluster.gpu.vendor == "amd",
            gpu_arch=request.cluster.gpu.arch,
        )
        totals = partial(v4_shard_totals, release=request.vllm_version) if card.is_v4 else shard_totals
        return Sharding(
            card=card,
            shape=shape,
            totals=totals(card, shape, mtp, settings.max_num_batched_tokens),
            reserve=layout_reserve(card, reserve_inputs),
            parameter_totals=totals(card, replace(shape, weights_dtype="bf16"), mtp, settings.max_num_batched_tokens),
        )

    def v4_stage_kv(self, stage: StageKind, pipeline_parallel: int) -> V4StageKv:
        """A V4 stage's KV groups (core.v4_layout): bytes per block and blocks per request at max_model_len."""
        request, settings = self.request, self.settings
        assert stage.layer_range is not None
        return v4_stage_kv(
            request.model,
            v4_backend(request.cluster.gpu),
            request.kv_cache_dtype,
            settings.max_model_len,
            settings.max_num_batched_tokens,
            concurrent_batches(request.vllm_version, pipeline_parallel, request.cluster.gpu),
            stage.layer_range,
            bool(self.mtp_layers),
            self.speculative_tokens,
            request.vllm_version,
        )

    def v4_stage_weights(self, sharding: Sharding, stage: StageKind, pipeline_parallel: int) -> StageWeights:
        """What one GPU of a V4 stage loads, by component (exact per stage: V4's layers differ)."""
        assert stage.layer_range is not None
        held = v4_stage_bytes(
            self.request.model,
            sharding.shape,
            stage.layer_range,
            first_stage=stage.first_stage,
            last_stage=stage.last_stage,
            mtp=bool(self.mtp_layers),
            pipeline_parallel=pipeline_parallel,
            max_num_batched_tokens=self.settings.max_num_batched_tokens,
            release=self.request.vllm_version,
        )
        return StageWeights(held.components, held.total)

    def stage_memory(
        self, sharding: Sharding, stage: StageKind, process: ProcessMemory, pipeline_parallel: int = 1
    ) -> StageMemory:
        """One GPU of a stage: its weights, its reserve, what is left for the KV cache and what a block costs."""
        if stage.layer_range is not None:  # DeepSeek-V4: exact per stage, KV blocks from its grouped caches
            weights = self.v4_stage_weights(sharding, stage, pipeline_parallel).total_bytes
            reserve = sharding.reserve.for_stage(stage.last_stage, stage.layers, process)
            kv_layers = stage.layers + (self.mtp_layers if stage.last_stage else 0)
            return StageMemory(
                weights_bytes=weights,
                reserve=reserve,
                kv_budget_bytes=self.settings.usable_bytes_per_gpu - weights - reserve.in_budget_bytes,
                kv_layers=kv_layers,
                kv_block_bytes=self.v4_stage_kv(stage, pipeline_parallel).bytes_per_block,
            )
        weights = stage_total(
            sharding.totals,
            stage.dense_layers,
            stage.moe_layers,
            stage.first_stage,
            stage.last_stage,
            stage.bf16_dense_layers,
            stage.bf16_moe_layers,
        )
        layers = stage.layers
        reserve = sharding.reserve.for_stage(stage.last_stage, layers, process)
        kv_layers = layers + self.mtp_layers if stage.last_stage else layers
        return StageMemory(
            weights_bytes=weights,
            reserve=reserve,
            kv_budget_bytes=self.settings.usable_bytes_per_gpu - weights - reserve.in_budget_bytes,
            kv_layers=kv_layers,
            kv_block_bytes=self.kv_block_bytes_per_layer * kv_layers,
        )

    def evaluate(self, candidate: LayoutCandidate) -> LayoutPlan:
        """All numbers of one layout."""
        request, settings = self.request, self.settings
        card, cluster = request.model, request.cluster
        tp, pp, dp = candidate.tensor_parallel, candidate.pipeline_parallel, candidate.data_parallel
        ep, placement = candidate.expert_parallel, candidate.placement
        sharding = self.sharding(tp, dp, ep)
        if isinstance(sharding, str):
            return refused(candidate, sharding)
        if pp > card.num_hidden_layers:
            return refused(candidate, f"PP={pp} exceeds the {card.num_hidden_layers} layers")
        if request.mtp and pp > 1:
            return refused(candidate, MTP_PP_REASON)

        links = group_links(cluster, placement, tp, pp, dp)
        pipeline_in_node = pp > 1 and pipeline_inside_nvlink_node(cluster, placement, tp, pp)
        process = process_memory_for_groups(process_groups(settings, cluster.gpus_per_node, tp, pp, dp, ep, links), tp)
        pipeline = pipeline_stages(card, pp)
        # stages of one kind hold the same bytes: each kind is computed once
        by_kind = tuple(self.stage_memory(sharding, kind, process, pp) for kind in pipeline.kinds)
        memory = PipelineMemory(pipeline, by_kind, kv_blocks=min(stage.kv_blocks for stage in by_kind))
        v4_kv = self.v4_stage_kv(pipeline.kinds[0], pp) if card.is_v4 else None
        if v4_kv is not None:
            # get_kv_cache_configs: every worker cut to the smallest's blocks; the scheduler's config is the first
            # worker's, whose pages per request give the concurrency and the logged tokens
            blocks_per_request = v4_kv.blocks_per_request
            concurrency = memory.kv_blocks / blocks_per_request
            logged = int(concurrency * settings.max_model_len)
            kv = KvCapacity(memory.kv_blocks, settings.kv.block_size, logged, concurrency, logged)
            fits = v4_kv.holds_one_request(memory.kv_blocks)
        else:
            blocks_per_request = self.blocks_per_request
            kv = kv_capacity_from_blocks(
                memory.kv_blocks, settings.kv.block_size, settings.max_model_len, self.accounting.tokens_logged
            )
            fits = kv.num_blocks >= self.blocks_per_request and kv.num_blocks > 0
        # per-GPU figures are those of the busiest stage
        busiest = memory.busiest_stage
        busiest_memory, kv_cache_bytes = memory.of(busiest), memory.kv_cache_bytes(busiest)
        serving: ServingEstimate | str | None = None
        if fits:
            shortfall = 0
            estimate_tokens, serving_tokens = kv.tokens, kv.tokens
            if card.is_v4:
                # V4's windowed and state pages are a fixed cost per request: what the pool holds for requests of
                # the estimate's context and of the workload's isl + osl, not the max_model_len amortisation
                workload = request.workload.input_tokens + request.workload.output_tokens
                estimate_tokens = self.v4_tokens_at(pipeline, pp, memory.kv_blocks, settings.context_tokens)
                serving_tokens = self.v4_tokens_at(pipeline, pp, memory.kv_blocks, workload)
            estimate = self.estimate(candidate, sharding, busiest.kind, busiest_memory, links, estimate_tokens)
            serving = self.serving(candidate, serving_tokens, estimate.roofline)
            reason = (
                f"fits with {kv_cache_bytes / GIB:.1f} GiB KV per GPU; "
                f"est. {estimate.tokens_per_s:,.0f} tok/s ({estimate.bound} bound)"
            )
        else:
            # per GPU of the tightest stage, to hold one max_model_len request
            need = max(
                (v4_kv.required_bytes if v4_kv else blocks_per_request * stage.kv_block_bytes) - stage.kv_budget_bytes
                for stage in by_kind
            )
            shortfall = max(0, need)
            estimate = NOT_ESTIMATED
            reason = (
                f"does not fit: short by {shortfall / GIB:.1f} GiB per GPU for one "
                f"{settings.max_model_len}-token request"
            )
        return LayoutPlan(
            tensor_parallel=tp,
            pipeline_parallel=pp,
            data_parallel=dp,
            expert_parallel=ep,
            placement=placement,
            valid=True,
            invalid_reason=None,
            supported=self.supported,
            fits=fits,
            shortfall_bytes=shortfall,
            usable_bytes_per_gpu=settings.usable_bytes_per_gpu,
            weights_bytes_per_gpu=busiest_memory.weights_bytes,
            reserve=busiest_memory.reserve,
            kv_budget_bytes_per_gpu=busiest_memory.kv_budget_bytes,
            kv_cache_bytes_per_gpu=kv_cache_bytes,
            # the stage with the most KV layers: depends on PP (and MTP), never on TP
            kv_bytes_per_token_per_gpu=self.v4_kv_bytes_per_token(pipeline, pp)
            if card.is_v4
            else max(stage.kv_layers for stage in by_kind) * settings.kv.bytes_per_token_per_layer,
            kv_bytes_per_token_by_part=self.v4_kv_parts(pipeline, pp) if card.is_v4 else (),
            kv_block_size=kv.block_size,
            kv_tokens_per_replica=kv.tokens,
            kv_tokens_logged_per_replica=kv.logged_tokens,
            max_concurrency=kv.max_concurrency,
            est_decode_tokens_per_s=estimate.tokens_per_s,
            est_decode_tokens_per_s_per_request=estimate.tokens_per_s_per_request,
            est_bound=estimate.bound,
            est_batch_per_replica=estimate.batch_per_replica,
            traffic=estimate.traffic,
            pipeline_memory=memory,
            practice_tier=practice_tier(pp, dp, pipeline_in_node),
            reason=reason,
            serving=serving if isinstance(serving, ServingEstimate) else None,
            speed_inputs=estimate.roofline,
            serving_problem=serving if isinstance(serving, str) else "",
            details_factory=partial(
                layout_details,
                request,
                settings,
                candidate,
                links,
                pipeline_in_node,
                # a layout that does not fit runs no batch: the rules see one request
                expected_concurrency=max(1, estimate.batch_per_replica),
                extra_warnings=estimate.warnings,
            ),
            weights_factory=partial(self.v4_stage_weights, sharding, busiest.kind, pp)
            if card.is_v4
            else partial(
                stage_weights,
                card,
                sharding.shape,
                busiest.first_layer,
                busiest.end_layer,
                first_stage=busiest.kind.first_stage,
                last_stage=busiest.kind.last_stage,
                mtp=bool(self.mtp_layers),
                max_num_batched_tokens=settings.max_num_batched_tokens,
            ),
        )

    def _v4_busiest_kv(self, pipeline: PipelineStages, pipeline_parallel: int) -> V4StageKv:
        plans = [self.v4_stage_kv(kind, pipeline_parallel) for kind in pipeline.kinds]
        return max(plans, key=lambda plan: plan.shape.kv_bytes_per_token_per_gpu)

    def v4_tokens_at(self, pipeline: PipelineStages, pipeline_parallel: int, blocks: int, length: int) -> int:
        """Tokens of requests `length` long that `blocks` hold: blocks / the pages one such request takes (its
        compressed pages grow with it, its window and state pages do not), × length."""
        request, settings = self.request, self.settings
        kind = pipeline.kinds[0]
        assert kind.layer_range is not None
        short = v4_stage_kv(
            request.model,
            v4_backend(request.cluster.gpu),
            request.kv_cache_dtype,
            min(length, settings.max_model_len),
            settings.max_num_batched_tokens,
            concurrent_batches(request.vllm_version, pipeline_parallel, request.cluster.gpu),
            kind.layer_range,
            bool(self.mtp_layers),
            self.speculative_tokens,
            request.vllm_version,
        )
        return int(blocks / short.blocks_per_request * min(length, settings.max_model_len))

    def v4_kv_bytes_per_token(self, pipeline: PipelineStages, pipeline_parallel: int) -> int:
        """A V4 GPU's KV bytes per token of capacity at max_model_len, on the stage that holds the most (v4_kv)."""
        return round(self._v4_busiest_kv(pipeline, pipeline_parallel).shape.kv_bytes_per_token_per_gpu)

    def v4_kv_parts(self, pipeline: PipelineStages, pipeline_parallel: int) -> tuple[tuple[str, float], ...]:
        """That stage's bytes per token by part: sliding window, C4 / C128 latents, indexer, compressor states."""
        return self._v4_busiest_kv(pipeline, pipeline_parallel).shape.bytes_per_token

    def serving(
        self, candidate: LayoutCandidate, kv_tokens_per_replica: int, roofline: RooflineInputs | None
    ) -> ServingEstimate | str:
        """The layout's TTFT, TPOT and tokens/s at the plan's workload, or why it cannot serve it."""
        settings = self.settings
        deployment = Deployment(
            shape=EngineShape(
                candidate.tensor_parallel,
                candidate.pipeline_parallel,
                candidate.data_parallel,
                candidate.expert_parallel,
                self.request.cluster.gpus_per_node,
            ),
            instances=candidate.placement.instances,
            kv_tokens_per_replica=kv_tokens_per_replica,
            max_num_seqs=settings.max_num_seqs,
            chunk_tokens=settings.max_num_batched_tokens,
            speculative_tokens=self.speculative_tokens,
            roofline=roofline,
        )
        fallback = None if self.speed is self.roofline else self.roofline
        return aggregated_estimate(deployment, self.request.workload, self.speed, fallback=fallback)

    def estimate(
        self,
        candidate: LayoutCandidate,
        sharding: Sharding,
        stage: StageKind,
        memory: StageMemory,
        links: GroupLinks,
        kv_tokens_per_replica: int,
    ) -> LayoutEstimate:
        """The decode estimate of a layout that fits, from its busiest stage (`stage`, holding `memory`)."""
        settings = self.settings
        pipeline_parallel = candidate.pipeline_parallel
        traffic = decode_traffic(
            self.request.model,
            tensor_parallel=candidate.tensor_parallel,
            data_parallel=candidate.data_parallel,
            pipeline_parallel=pipeline_parallel,
            stage_layers=stage.layers,
            stage_moe_layers=stage.moe_layers,
            tensor_link=links.tensor,
            expert_link=links.expert,
            pipeline_link=links.pipeline,
        )
        step = sharding.step_inputs(memory.weights_bytes, stage, memory.kv_layers)
        batch = max(1, min(settings.max_num_seqs, kv_tokens_per_replica // max(1, settings.context_tokens)))
        link_costs = self.decode.links(traffic)
        busy, single = self.decode.estimates(step, link_costs, batches=(batch, 1), pipeline_parallel=pipeline_parallel)
        warnings: tuple[str, ...] = ()
        outside = memory.reserve.outside_budget_bytes
        headroom = self.request.cluster.gpu.torch_visible_bytes - settings.usable_bytes_per_gpu
        if outside > headroom:
            warnings = (
                f"NCCL buffers and CUDA graphs outside the KV budget (~{outside / GIB:.1f} GiB) exceed the "
                f"{headroom / GIB:.1f} GiB left by --gpu-memory-utilization: lower it (or run --enforce-eager "
                "where the graphs are outside the budget)",
            )
        return LayoutEstimate(
            tokens_per_s=busy.tokens_per_s * candidate.data_parallel * candidate.placement.instances,
            tokens_per_s_per_request=single.tokens_per_s_per_request,
            bound=busy.bound,
            batch_per_replica=batch,
            traffic=traffic,
            warnings=warnings,
            roofline=RooflineInputs(step, link_costs, pipeline_parallel),
        )
