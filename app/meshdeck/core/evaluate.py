"""Evaluate one (TP, PP, DP, EP) layout on a cluster: memory, KV, traffic, decode estimate, warnings.

This is the per-layout half of the planner; `planner.py` enumerates layouts and ranks them.
Only what ranking needs is computed eagerly (memory per stage, KV blocks, the decode estimate of
layouts that fit); warnings and `vllm serve` flags are built when a layout is looked at. Stages
with the same shape (first/last, layers, MoE layers) share one weights/reserve computation, and
per-layer weight bytes are cached per sharding, so a 64-node cluster ranks in milliseconds.
"""

from __future__ import annotations

from functools import lru_cache, partial

from meshdeck.core.cluster import LinkClass
from meshdeck.core.kv_cache import kv_capacity_from_blocks
from meshdeck.core.layout_plan import LayoutDetails, LayoutPlan
from meshdeck.core.model_card import ModelCard
from meshdeck.core.placement import GroupLinks, Placement, group_links, pipeline_inside_nvlink_node
from meshdeck.core.plan_request import PlanRequest, ResolvedSettings
from meshdeck.core.reserve import (
    GroupMembership,
    Reserve,
    ReserveInputs,
    layout_reserve,
)
from meshdeck.core.rules import RuleInputs, layout_warnings, practice_tier
from meshdeck.core.throughput import DecodeStepInputs, decode_estimates
from meshdeck.core.traffic import decode_traffic
from meshdeck.core.units import GIB
from meshdeck.core.vllm_args import ServeSettings, vllm_serve_args
from meshdeck.core.weights import (
    ShardShape,
    ShardTotals,
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


def _groups(
    settings: ResolvedSettings, gpus_per_node: int, tp: int, pp: int, dp: int, ep: bool, links: GroupLinks
) -> tuple[GroupMembership, ...]:
    """The process groups vLLM opens for this rank (world, TP, PP, DP, EP) and what they span.

    NCCL NVLink SHARP (NVLS) needs an NVSwitch Hopper/Blackwell node and more than 2 GPUs in the group.
    """
    net = LinkClass.NETWORK
    nvls = settings.nvls_capable
    world = tp * pp * dp
    world_crosses = gpus_per_node < world
    tensor_crosses, expert_crosses = links.tensor is net, links.expert is net
    groups = [
        GroupMembership(world, world_crosses, nvls and not world_crosses and world > 2, 1),
        GroupMembership(tp, tensor_crosses, nvls and not tensor_crosses and tp > 2),
        GroupMembership(pp, links.pipeline is net, False),
        GroupMembership(dp, expert_crosses, nvls and not expert_crosses and dp > 2),
    ]
    if ep or dp > 1:
        size = tp * dp
        groups.append(GroupMembership(size, expert_crosses, nvls and not expert_crosses and size > 2))
    return tuple(groups)


class _Shape:
    __slots__ = ("data_parallel", "expert_parallel", "pipeline_parallel", "tensor_parallel")

    def __init__(self, tp: int, pp: int, dp: int, ep: bool) -> None:
        self.tensor_parallel, self.pipeline_parallel, self.data_parallel, self.expert_parallel = tp, pp, dp, ep


def _details(
    request: PlanRequest,
    settings: ResolvedSettings,
    tp: int,
    pp: int,
    dp: int,
    ep: bool,
    links: GroupLinks,
    pipeline_in_node: bool,
    batch: int,
    extra: tuple[str, ...],
) -> LayoutDetails:
    card = request.model
    warnings = layout_warnings(
        RuleInputs(
            card=card,
            cluster=request.cluster,
            tensor_parallel=tp,
            pipeline_parallel=pp,
            data_parallel=dp,
            expert_parallel=ep,
            tensor_link=links.tensor,
            expert_link=links.expert,
            pipeline_link=links.pipeline,
            tensor_crosses_socket=links.tensor_crosses_socket,
            pipeline_inside_nvlink_node=pipeline_in_node,
            weights_dtype=settings.weights_dtype,
            max_num_seqs=settings.max_num_seqs,
            max_num_seqs_from_user=settings.max_num_seqs_from_user,
            expected_concurrency=batch,
            mtp=request.mtp,
        )
    )
    args = vllm_serve_args(
        _Shape(tp, pp, dp, ep),
        ServeSettings(
            max_model_len=settings.max_model_len,
            gpu_memory_utilization=request.gpu_memory_utilization,
            kv_cache_dtype=settings.kv.vllm_kv_cache_dtype,
            max_num_seqs=settings.max_num_seqs_emitted,
            max_num_batched_tokens=request.max_num_batched_tokens,
            deepseek_v32_frontend=card.has_sparse_indexer,
            mtp_speculative_tokens=request.mtp_speculative_tokens if request.mtp else 0,
        ),
    )
    return LayoutDetails(
        tuple(w.message for w in warnings) + extra,
        tuple(w.code for w in warnings) + tuple("cudagraph_headroom" for _ in extra),
        tuple(args),
    )


def evaluate_layout(
    request: PlanRequest,
    settings: ResolvedSettings,
    tp: int,
    pp: int,
    dp: int,
    ep: bool,
    placement: Placement,
    supported: bool = True,
) -> LayoutPlan:
    """All numbers of one layout. `supported` is the GPU-level verdict (same for every layout)."""
    card, cluster, kv = request.model, request.cluster, settings.kv
    shape = ShardShape(tp, tp * dp, ep, settings.weights_dtype)
    reason = invalid_shard_reason(card, shape)
    if reason is None and pp > card.num_hidden_layers:
        reason = f"PP={pp} exceeds the {card.num_hidden_layers} layers"
    if reason is None and request.mtp and pp > 1:
        reason = MTP_PP_REASON
    if reason is not None:
        return LayoutPlan(tp, pp, dp, ep, placement, False, reason, False, reason=f"invalid: {reason}")

    links = group_links(cluster, placement, tp, pp, dp)
    pipeline_in_node = pp > 1 and pipeline_inside_nvlink_node(cluster, placement, tp, pp)
    tier = practice_tier(pp, dp, pipeline_in_node)
    mtp_layers = card.num_nextn_predict_layers if request.mtp else 0
    reserve_terms = layout_reserve(
        card,
        ReserveInputs(
            tensor_parallel=tp,
            data_parallel=dp,
            expert_parallel=ep,
            moe_ranks=tp * dp,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            max_num_seqs=settings.max_num_seqs,
            groups=_groups(settings, cluster.gpus_per_node, tp, pp, dp, ep, links),
            cudagraph_capture_sizes=settings.cudagraph_capture_sizes,
            mtp=bool(mtp_layers),
            vllm_version=request.vllm_version,
            deep_gemm_moe=settings.deep_gemm_moe,
            speculative_tokens=request.mtp_speculative_tokens if request.mtp else 0,
        ),
    )
    totals = shard_totals(card, shape, bool(mtp_layers), settings.max_num_batched_tokens)
    usable = settings.usable_bytes_per_gpu
    block_bytes_per_layer = kv.block_size * kv.bytes_per_token_per_layer
    blocks_per_request = -(-settings.max_model_len // kv.block_size)
    rows = []  # (start, end, weights, reserve, budget, kv_layers)
    reserves: dict[tuple[bool, int], Reserve] = {}
    blocks = -1
    last_index = pp - 1
    for index, (start, end, moe) in enumerate(stage_shapes(card, pp)):
        last = index == last_index
        layers = end - start
        weights = stage_total(totals, layers - moe, moe, index == 0, last)
        reserve = reserves.get((last, layers))
        if reserve is None:
            reserve = reserves[(last, layers)] = reserve_terms.for_stage(last, layers)
        kv_layers = layers + mtp_layers if last else layers
        budget = usable - weights - reserve.in_budget_bytes
        stage_blocks = budget // (block_bytes_per_layer * kv_layers) if budget > 0 else 0
        if blocks < 0 or stage_blocks < blocks:
            blocks = stage_blocks
        rows.append((start, end, weights, reserve, budget, kv_layers))

    capacity = kv_capacity_from_blocks(max(0, blocks), kv.block_size, settings.max_model_len)
    fits = capacity.num_blocks >= blocks_per_request and capacity.num_blocks > 0
    stage_rows, shortfall, worst, worst_weights = [], 0, 0, -1
    for index, (start, end, weights, reserve, budget, kv_layers) in enumerate(rows):
        per_block = block_bytes_per_layer * kv_layers
        need = blocks_per_request * per_block - budget
        if need > shortfall:
            shortfall = need
        if weights > worst_weights:
            worst, worst_weights = index, weights
        stage_rows.append((start, end, weights, reserve, budget, capacity.num_blocks * per_block))
    w_start, w_end, _, w_reserve, w_budget, w_kv_bytes = stage_rows[worst]
    w_kv_layers = rows[worst][5]
    common = {
        "usable_bytes_per_gpu": usable,
        "weights_bytes_per_gpu": worst_weights,
        "reserve": w_reserve,
        "kv_budget_bytes_per_gpu": w_budget,
        "kv_cache_bytes_per_gpu": w_kv_bytes,
        # the stage with the most KV layers: depends on PP (and MTP), never on TP
        "kv_bytes_per_token_per_gpu": max(row[5] for row in rows) * kv.bytes_per_token_per_layer,
        "kv_block_size": kv.block_size,
        "kv_tokens_per_replica": capacity.tokens,
        "max_concurrency": capacity.max_concurrency,
        "stage_rows": tuple(stage_rows),
        "weights_factory": partial(
            stage_weights,
            card,
            shape,
            w_start,
            w_end,
            first_stage=worst == 0,
            last_stage=worst == last_index,
            mtp=bool(mtp_layers),
            max_num_batched_tokens=settings.max_num_batched_tokens,
        ),
    }
    if not fits:
        line = (
            f"does not fit: short by {max(0, shortfall) / GIB:.1f} GiB per GPU for one "
            f"{settings.max_model_len}-token request"
        )
        factory = partial(_details, request, settings, tp, pp, dp, ep, links, pipeline_in_node, 1, ())
        return LayoutPlan(
            tp, pp, dp, ep, placement, True, None, supported, fits=False, shortfall_bytes=max(0, int(shortfall)),
            practice_tier=tier, reason=line, details_factory=factory, **common,
        )  # fmt: skip

    moe_in_worst = card.moe_layers_between(w_start, w_end)
    dense_in_worst = w_end - w_start - moe_in_worst
    traffic = decode_traffic(
        card,
        tensor_parallel=tp,
        data_parallel=dp,
        pipeline_parallel=pp,
        stage_layers=w_end - w_start,
        stage_moe_layers=moe_in_worst,
        tensor_link=links.tensor,
        expert_link=links.expert,
        pipeline_link=links.pipeline,
    )
    step_inputs = _decode_inputs(
        request, settings, shape, totals, worst_weights, dense_in_worst, moe_in_worst, w_kv_layers
    )
    context = settings.context_tokens
    batch = max(1, min(settings.max_num_seqs, capacity.tokens // max(1, context)))
    busy, single = decode_estimates(
        step_inputs,
        cluster,
        traffic,
        batches=(batch, 1),
        context_tokens=context,
        pipeline_parallel=pp,
        weights_fp8=settings.weights_dtype == "fp8",
        speculative_tokens=request.mtp_speculative_tokens if request.mtp else 0,
    )
    extra: tuple[str, ...] = ()
    outside = w_reserve.outside_budget_bytes
    headroom = cluster.gpu.torch_visible_bytes - settings.usable_bytes_per_gpu
    if outside > headroom:
        extra = (
            f"CUDA graphs (~{outside / GIB:.1f} GiB, captured after the KV cache in vLLM < 0.21) exceed the "
            f"{headroom / GIB:.1f} GiB left by --gpu-memory-utilization: lower it or run --enforce-eager",
        )
    cluster_rate = busy.tokens_per_s * dp * placement.instances
    line = f"fits with {w_kv_bytes / GIB:.1f} GiB KV per GPU; est. {cluster_rate:,.0f} tok/s ({busy.bound} bound)"
    return LayoutPlan(
        tp, pp, dp, ep, placement, True, None, supported, fits=True,
        est_decode_tokens_per_s=cluster_rate,
        est_decode_tokens_per_s_per_request=single.tokens_per_s_per_request,
        est_bound=busy.bound,
        est_batch_per_replica=batch,
        traffic=traffic,
        practice_tier=tier,
        reason=line,
        details_factory=partial(_details, request, settings, tp, pp, dp, ep, links, pipeline_in_node, batch, extra),
        **common,
    )  # fmt: skip


def _decode_inputs(
    request: PlanRequest,
    settings: ResolvedSettings,
    shape: ShardShape,
    totals: ShardTotals,
    stage_bytes: int,
    dense_layers: int,
    moe_layers: int,
    attention_layers: int,
) -> DecodeStepInputs:
    """What one decode step of the busiest stage reads and computes on one GPU."""
    card, kv = request.model, settings.kv
    routed = moe_layers * totals.routed_per_moe_layer
    per_expert = 0.0
    if moe_layers:
        if shape.expert_parallel:
            # whole experts: a touched expert is read by the one rank that holds it, so each GPU reads
            # (its experts / all experts) of the touched ones, each of full size
            per_expert = totals.routed_per_moe_layer / card.n_routed_experts
        else:
            per_expert = totals.routed_per_moe_layer / card.n_routed_experts  # a 1/(TP×DP) slice of each
    scales = dense_layers * totals.scales_dense_layer + moe_layers * totals.scales_moe_layer
    bytes_per_param = 1 if settings.weights_dtype == "fp8" else 2
    dense_params = (stage_bytes - routed - scales) / bytes_per_param
    expert_params = 3 * card.hidden_size * card.moe_intermediate_size
    return DecodeStepInputs(
        non_expert_bytes=stage_bytes - routed,
        expert_bytes_per_expert_layer=per_expert,
        moe_layers=moe_layers,
        attention_layers=attention_layers,
        kv_latent_bytes_per_token_per_layer=kv.latent_bytes_per_token_per_layer,
        kv_indexer_bytes_per_token_per_layer=kv.indexer_bytes_per_token_per_layer,
        index_topk=card.index_topk,
        n_routed_experts=card.n_routed_experts,
        experts_per_token=card.num_experts_per_tok,
        data_parallel=shape.moe_ranks // shape.tensor_parallel,
        flops_per_token=2 * dense_params,
        expert_flops_per_token=2 * expert_params * card.num_experts_per_tok * moe_layers,
        moe_ranks=shape.moe_ranks,
    )


@lru_cache(maxsize=512)
def stage_shapes(card: ModelCard, pipeline_parallel: int) -> tuple[tuple[int, int, int], ...]:
    """(first_layer, end_layer, MoE layers) of every stage."""
    return tuple(
        (start, end, card.moe_layers_between(start, end))
        for start, end in pp_partition(card.num_hidden_layers, pipeline_parallel)
    )
