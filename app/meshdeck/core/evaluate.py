"""Evaluate one (TP, PP, DP, EP) layout on a cluster: memory, KV, traffic, decode estimate, warnings.

This is the per-layout half of the planner; `planner.py` enumerates layouts and ranks them.
Only what ranking needs is computed eagerly (memory per stage, KV blocks, the decode estimate of
layouts that fit); warnings and `vllm serve` flags are built when a layout is looked at.

One `LayoutEvaluator` serves every layout of a plan and keeps what they share for as long as the
plan runs: per sharding (TP, DP, EP) its validity, weight totals and the reserve terms that do not
depend on the process groups; per grid (TP, PP, DP) the links its groups cross and its NCCL
memory (the EP and non-EP variants of a layout share them); per pipeline depth the stage
partition, with stages of the same kind (first/last, dense and MoE layers) computed once. Per-layer
weight bytes are cached per sharding across plans, so a 64-node cluster ranks in milliseconds.
"""

from __future__ import annotations

from functools import lru_cache, partial

from meshdeck.core.layout_details import layout_details
from meshdeck.core.layout_plan import LayoutPlan, new_layout_plan
from meshdeck.core.layout_shared import GridShared, PipelineStages, Sharding, StageKind, process_groups
from meshdeck.core.model_card import ModelCard
from meshdeck.core.placement import Placement, group_links, pipeline_inside_nvlink_node
from meshdeck.core.plan_request import PlanRequest, ResolvedSettings
from meshdeck.core.reserve import Reserve, ReserveInputs, layout_reserve, non_torch_for_groups
from meshdeck.core.rules import practice_tier
from meshdeck.core.throughput import DecodeModel
from meshdeck.core.traffic import decode_traffic
from meshdeck.core.units import GIB
from meshdeck.core.weights import (
    ShardShape,
    invalid_shard_reason,
    shard_totals,
    stage_total,
    stage_weights,
)

MTP_PP_REASON = (
    "MTP speculative decoding does not run with pipeline parallelism in vLLM "
    "(vllm-project/vllm #14089, #49355: PP > 1 with MTP fails)"
)


def pp_partition(num_layers: int, pipeline_parallel: int) -> tuple[tuple[int, int], ...]:
    """vLLM get_pp_indices: floor(L/PP) each, the remainder one by one to the stages before the last."""
    base = num_layers // pipeline_parallel
    sizes = [base] * pipeline_parallel
    for i in range(2, num_layers % pipeline_parallel + 2):
        sizes[-i] += 1
    bounds, start = [], 0
    for size in sizes:
        bounds.append((start, start + size))
        start += size
    return tuple(bounds)


class LayoutEvaluator:
    """Evaluates the layouts of one request; what layouts share is computed once per evaluator (one plan)."""

    def __init__(self, request: PlanRequest, settings: ResolvedSettings, supported: bool = True) -> None:
        self.request, self.settings, self.supported = request, settings, supported
        card, cluster, kv = request.model, request.cluster, settings.kv
        self._mtp_layers = card.num_nextn_predict_layers if request.mtp else 0
        self._speculative_tokens = request.mtp_speculative_tokens if request.mtp else 0
        self._block_bytes_per_layer = kv.block_size * kv.bytes_per_token_per_layer
        self._blocks_per_request = -(-settings.max_model_len // kv.block_size)
        self._block_size = kv.block_size
        self._kv_bytes_per_token_per_layer = kv.bytes_per_token_per_layer
        self._headroom = cluster.gpu.torch_visible_bytes - settings.usable_bytes_per_gpu
        self._estimate_context = max(1, settings.context_tokens)
        self._card_decode_terms = (
            kv.latent_bytes_per_token_per_layer,
            kv.indexer_bytes_per_token_per_layer,
            card.index_topk,
            card.n_routed_experts,
            card.num_experts_per_tok,
        )
        self._decode = DecodeModel(
            cluster,
            context_tokens=settings.context_tokens,
            weights_fp8=settings.weights_dtype == "fp8",
            speculative_tokens=self._speculative_tokens,
        )
        self._shardings: dict[tuple[int, int, bool], Sharding] = {}
        self._grids: dict[tuple[int, int, int, int, int], GridShared] = {}
        self._pipelines: dict[int, PipelineStages] = {}

    def _sharding(self, tp: int, dp: int, ep: bool) -> Sharding:
        key = (tp, dp, ep)
        found = self._shardings.get(key)
        if found is not None:
            return found
        request, settings, card = self.request, self.settings, self.request.model
        shape = ShardShape(tp, tp * dp, ep, settings.weights_dtype)
        found = self._shardings[key] = Sharding(shape, invalid_shard_reason(card, shape))
        if found.invalid_reason is None:
            mtp = bool(self._mtp_layers)
            found.totals = shard_totals(card, shape, mtp, settings.max_num_batched_tokens)
            found.reserve = layout_reserve(
                card,
                ReserveInputs(
                    tensor_parallel=tp,
                    data_parallel=dp,
                    expert_parallel=ep,
                    moe_ranks=tp * dp,
                    max_num_batched_tokens=settings.max_num_batched_tokens,
                    max_num_seqs=settings.max_num_seqs,
                    groups=(),  # only the non-torch term reads them: it is added per grid
                    cudagraph_capture_sizes=settings.cudagraph_capture_sizes,
                    mtp=mtp,
                    vllm_version=request.vllm_version,
                    deep_gemm_moe=settings.deep_gemm_moe,
                    speculative_tokens=self._speculative_tokens,
                ),
            )
            routed = found.totals.routed_per_moe_layer
            # a GPU reads 1/E of a layer's routed bytes per touched expert: with expert parallel whole experts
            # (its experts / all experts of the touched ones, each of full size), without a 1/(TP×DP) slice of each
            per_expert = routed / card.n_routed_experts
            expert_params = 3 * card.hidden_size * card.moe_intermediate_size
            found.decode_constants = (
                routed,
                per_expert,
                1 if settings.weights_dtype == "fp8" else 2,  # bytes per dense parameter
                2 * expert_params * card.num_experts_per_tok,
                self._card_decode_terms,
            )
        return found

    def _grid(self, tp: int, pp: int, dp: int, placement: Placement) -> GridShared:
        # links read only instance 0's ranks: the placement's instance size and node size decide them
        key = (tp, pp, dp, placement.gpus_per_instance, placement.gpus_per_node)
        found = self._grids.get(key)
        if found is None:
            cluster = self.request.cluster
            links = group_links(cluster, placement, tp, pp, dp)
            in_node = pp > 1 and pipeline_inside_nvlink_node(cluster, placement, tp, pp)
            found = self._grids[key] = GridShared(links, in_node, practice_tier(pp, dp, in_node))
        return found

    def _pipeline(self, pp: int) -> PipelineStages:
        found = self._pipelines.get(pp)
        if found is not None:
            return found
        kinds: dict[StageKind, int] = {}
        stages = []
        last_index = pp - 1
        for index, (start, end, moe) in enumerate(stage_shapes(self.request.model, pp)):
            last = index == last_index
            layers = end - start
            kv_layers = layers + self._mtp_layers if last else layers
            kind = StageKind(
                layers - moe, moe, index == 0, last, layers, kv_layers, self._block_bytes_per_layer * kv_layers
            )
            stages.append((start, end, kinds.setdefault(kind, len(kinds))))
        found = self._pipelines[pp] = PipelineStages(tuple(kinds), tuple(stages), max(kind.kv_layers for kind in kinds))
        return found

    def _reserve(self, sharding: Sharding, non_torch: int, last: bool, layers: int) -> tuple[Reserve, int]:
        """The stage's reserve and its in-budget bytes, shared by every stage and layout that match."""
        key = (non_torch, last, layers)
        found = sharding.stage_reserves.get(key)
        if found is None:
            reserve = sharding.reserve.for_stage(last, layers, non_torch)  # type: ignore[union-attr]
            found = sharding.stage_reserves[key] = (reserve, reserve.in_budget_bytes)
        return found

    def evaluate(self, tp: int, pp: int, dp: int, ep: bool, placement: Placement) -> LayoutPlan:
        """All numbers of one layout."""
        request, settings = self.request, self.settings
        card = request.model
        sharding = self._sharding(tp, dp, ep)
        reason = sharding.invalid_reason
        if reason is None and pp > card.num_hidden_layers:
            reason = f"PP={pp} exceeds the {card.num_hidden_layers} layers"
        if reason is None and request.mtp and pp > 1:
            reason = MTP_PP_REASON
        if reason is not None:
            return new_layout_plan(
                {
                    "tensor_parallel": tp,
                    "pipeline_parallel": pp,
                    "data_parallel": dp,
                    "expert_parallel": ep,
                    "placement": placement,
                    "valid": False,
                    "invalid_reason": reason,
                    "supported": False,
                    "reason": f"invalid: {reason}",
                }
            )

        grid = self._grid(tp, pp, dp, placement)
        links, pipeline_in_node = grid.links, grid.pipeline_in_node
        with_expert_group = ep or dp > 1
        non_torch = grid.non_torch.get(with_expert_group)
        if non_torch is None:
            groups = process_groups(settings, request.cluster.gpus_per_node, tp, pp, dp, ep, links)
            non_torch = grid.non_torch[with_expert_group] = non_torch_for_groups(groups, tp)
        totals = sharding.totals
        usable = settings.usable_bytes_per_gpu
        pipeline = self._pipeline(pp)
        reserve_for = self._reserve
        kind_rows = []  # per stage kind: (weights, reserve, budget, block bytes)
        blocks = -1
        worst_weights = -1
        for dense, moe, first, last, layers, _, block_bytes in pipeline.kinds:
            weights = stage_total(totals, dense, moe, first, last)  # type: ignore[arg-type]
            reserve, in_budget = reserve_for(sharding, non_torch, last, layers)
            budget = usable - weights - in_budget
            stage_blocks = budget // block_bytes if budget > 0 else 0
            if blocks < 0 or stage_blocks < blocks:
                blocks = stage_blocks
            if weights > worst_weights:
                worst_weights = weights
            kind_rows.append((weights, reserve, budget, block_bytes))

        # kv_capacity_from_blocks, inlined: the KV blocks of a replica are its tightest stage's
        num_blocks = max(0, blocks)
        block_size = self._block_size
        blocks_per_request = self._blocks_per_request
        fits = num_blocks >= blocks_per_request and num_blocks > 0
        by_kind = [
            (weights, reserve, budget, num_blocks * block_bytes) for weights, reserve, budget, block_bytes in kind_rows
        ]
        stage_rows = tuple([(start, end, *by_kind[kind]) for start, end, kind in pipeline.stages])
        # the first stage holding the most weights reports the per-GPU figures
        worst = 0
        for index, (_, _, kind) in enumerate(pipeline.stages):
            if by_kind[kind][0] == worst_weights:
                worst = index
                break
        w_start, w_end, _, w_reserve, w_budget, w_kv_bytes = stage_rows[worst]
        tokens = num_blocks * block_size
        values = {
            "tensor_parallel": tp,
            "pipeline_parallel": pp,
            "data_parallel": dp,
            "expert_parallel": ep,
            "placement": placement,
            "valid": True,
            "invalid_reason": None,
            "supported": self.supported,
            "fits": fits,
            "usable_bytes_per_gpu": usable,
            "weights_bytes_per_gpu": worst_weights,
            "reserve": w_reserve,
            "kv_budget_bytes_per_gpu": w_budget,
            "kv_cache_bytes_per_gpu": w_kv_bytes,
            # the stage with the most KV layers: depends on PP (and MTP), never on TP
            "kv_bytes_per_token_per_gpu": pipeline.max_kv_layers * self._kv_bytes_per_token_per_layer,
            "kv_block_size": block_size,
            "kv_tokens_per_replica": tokens,
            "max_concurrency": num_blocks / blocks_per_request if blocks_per_request else 0.0,
            "stage_rows": stage_rows,
            "practice_tier": grid.tier,
            "weights_factory": partial(
                stage_weights,
                card,
                sharding.shape,
                w_start,
                w_end,
                first_stage=worst == 0,
                last_stage=worst == pp - 1,
                mtp=bool(self._mtp_layers),
                max_num_batched_tokens=settings.max_num_batched_tokens,
            ),
        }
        if not fits:
            need = max(blocks_per_request * block_bytes - budget for _, _, budget, block_bytes in kind_rows)
            shortfall = max(0, need)
            values["shortfall_bytes"] = max(0, int(shortfall))
            values["reason"] = (
                f"does not fit: short by {shortfall / GIB:.1f} GiB per GPU for one "
                f"{settings.max_model_len}-token request"
            )
            values["details_factory"] = partial(
                layout_details, request, settings, tp, pp, dp, ep, links, pipeline_in_node, 1, ()
            )
            return new_layout_plan(values)

        w_kind = pipeline.kinds[pipeline.stages[worst][2]]
        found = grid.traffic.get((w_start, w_end))
        if found is None:
            traffic = decode_traffic(
                card,
                tensor_parallel=tp,
                data_parallel=dp,
                pipeline_parallel=pp,
                stage_layers=w_end - w_start,
                stage_moe_layers=w_kind.moe_layers,
                tensor_link=links.tensor,
                expert_link=links.expert,
                pipeline_link=links.pipeline,
            )
            found = grid.traffic[(w_start, w_end)] = (traffic, self._decode.links(traffic))
        traffic, link_costs = found
        step_inputs = sharding.step_inputs(worst_weights, w_kind.dense_layers, w_kind.moe_layers, w_kind.kv_layers)
        batch = max(1, min(settings.max_num_seqs, tokens // self._estimate_context))
        busy, single = self._decode.estimates(step_inputs, link_costs, batches=(batch, 1), pipeline_parallel=pp)
        extra: tuple[str, ...] = ()
        outside = w_reserve.outside_budget_bytes
        if outside > self._headroom:
            extra = (
                f"CUDA graphs (~{outside / GIB:.1f} GiB, captured after the KV cache in vLLM < 0.21) exceed the "
                f"{self._headroom / GIB:.1f} GiB left by --gpu-memory-utilization: lower it or run --enforce-eager",
            )
        cluster_rate = busy.tokens_per_s * dp * placement.instances
        values["est_decode_tokens_per_s"] = cluster_rate
        values["est_decode_tokens_per_s_per_request"] = single.tokens_per_s_per_request
        values["est_bound"] = busy.bound
        values["est_batch_per_replica"] = batch
        values["traffic"] = traffic
        values["reason"] = (
            f"fits with {w_kv_bytes / GIB:.1f} GiB KV per GPU; est. {cluster_rate:,.0f} tok/s ({busy.bound} bound)"
        )
        values["details_factory"] = partial(
            layout_details, request, settings, tp, pp, dp, ep, links, pipeline_in_node, batch, extra
        )
        return new_layout_plan(values)


@lru_cache(maxsize=512)
def stage_shapes(card: ModelCard, pipeline_parallel: int) -> tuple[tuple[int, int, int], ...]:
    """(first_layer, end_layer, MoE layers) of every stage."""
    return tuple(
        (start, end, card.moe_layers_between(start, end))
        for start, end in pp_partition(card.num_hidden_layers, pipeline_parallel)
    )
