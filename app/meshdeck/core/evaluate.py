"""Evaluate one (TP, PP, DP, EP) layout on a cluster: memory, KV, traffic, decode estimate, warnings.

This is the per-layout half of the planner; `planner.py` enumerates layouts and ranks them.
Heavy pieces (per-layer weight bytes, per-stage weights) are cached on their inputs, so ranking
hundreds of layouts for a 64-node cluster stays in milliseconds.
"""

from __future__ import annotations

from meshdeck.core.cluster import LinkClass
from meshdeck.core.kv_cache import kv_capacity
from meshdeck.core.layout_plan import LayoutPlan, StagePlan
from meshdeck.core.model_card import CHECKPOINT_FP8_BLOCK
from meshdeck.core.placement import GroupLinks, Placement, group_links
from meshdeck.core.plan_request import PlanRequest, ResolvedSettings
from meshdeck.core.reserve import (
    GroupMembership,
    ReserveInputs,
    cudagraph_capture_size_count,
    vllm_reserve,
)
from meshdeck.core.rules import RuleInputs, layout_warnings
from meshdeck.core.throughput import DecodeStepInputs, decode_estimate
from meshdeck.core.traffic import decode_traffic
from meshdeck.core.units import GIB
from meshdeck.core.vllm_args import ServeSettings, vllm_serve_args
from meshdeck.core.weights import ShardShape, invalid_shard_reason, layer_bytes, stage_weights

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


def _nvls(request: PlanRequest, size: int, crosses: bool) -> bool:
    gpu = request.cluster.gpu
    nvswitch = request.cluster.intra_node_link == "nvlink" and (
        request.cluster.topology is None or request.cluster.topology.fully_nvlinked
    )
    return nvswitch and not crosses and size > 2 and gpu.arch in ("hopper", "blackwell")


def _groups(
    request: PlanRequest, tp: int, pp: int, dp: int, ep: bool, links: GroupLinks
) -> tuple[GroupMembership, ...]:
    net = LinkClass.NETWORK
    world = tp * pp * dp
    world_crosses = request.cluster.gpus_per_node < world
    groups = [
        GroupMembership(world, world_crosses, _nvls(request, world, world_crosses), communicators=1),
        GroupMembership(tp, links.tensor is net, _nvls(request, tp, links.tensor is net)),
        GroupMembership(pp, links.pipeline is net, False),
        GroupMembership(dp, links.expert is net, _nvls(request, dp, links.expert is net)),
    ]
    if ep or dp > 1:
        size = tp * dp
        groups.append(GroupMembership(size, links.expert is net, _nvls(request, size, links.expert is net)))
    return tuple(groups)


def _invalid(
    tp: int, pp: int, dp: int, ep: bool, placement: Placement, settings: ResolvedSettings, reason: str
) -> LayoutPlan:
    return LayoutPlan(
        tensor_parallel=tp,
        pipeline_parallel=pp,
        data_parallel=dp,
        expert_parallel=ep,
        placement=placement,
        valid=False,
        invalid_reason=reason,
        supported=False,
        fits=False,
        shortfall_bytes=0,
        usable_bytes_per_gpu=settings.usable_bytes_per_gpu,
        weights_bytes_per_gpu=0,
        weights_by_component=(),
        reserve=None,
        kv_budget_bytes_per_gpu=0,
        kv_cache_bytes_per_gpu=0,
        kv_bytes_per_token_per_gpu=0,
        kv_block_size=settings.kv.block_size,
        kv_tokens_per_replica=0,
        max_concurrency=0.0,
        est_decode_tokens_per_s=0.0,
        est_decode_tokens_per_s_per_request=0.0,
        est_bound="",
        est_batch_per_replica=0,
        traffic=(),
        stages=(),
        warnings=(),
        warning_codes=(),
        vllm_args=(),
        reason=f"invalid: {reason}",
    )


def evaluate_layout(
    request: PlanRequest,
    settings: ResolvedSettings,
    tp: int,
    pp: int,
    dp: int,
    ep: bool,
    placement: Placement,
) -> LayoutPlan:
    card, cluster = request.model, request.cluster
    shape = ShardShape(tp, tp * dp, ep, settings.weights_dtype)
    reason = invalid_shard_reason(card, shape)
    if reason is None and pp > card.num_hidden_layers:
        reason = f"PP={pp} exceeds the {card.num_hidden_layers} layers"
    if reason is None and request.mtp and pp > 1:
        reason = MTP_PP_REASON
    if reason is not None:
        return _invalid(tp, pp, dp, ep, placement, settings, reason)

    links = group_links(cluster, placement, tp, pp, dp)
    groups = _groups(request, tp, pp, dp, ep, links)
    kv = settings.kv
    bounds = pp_partition(card.num_hidden_layers, pp)
    mtp_layers = card.num_nextn_predict_layers if request.mtp else 0
    capture_sizes = cudagraph_capture_size_count(settings.max_num_seqs)
    deep_gemm = (
        settings.weights_dtype == "fp8"
        and card.checkpoint_dtype == CHECKPOINT_FP8_BLOCK
        and cluster.gpu.arch in ("hopper", "blackwell")
    )
    stage_data = []
    by_signature: dict[tuple[bool, bool, int, int], tuple] = {}
    for index, (start, end) in enumerate(bounds):
        first, last = index == 0, index == pp - 1
        signature = (first, last, end - start, card.moe_layers_between(start, end))
        cached = by_signature.get(signature)
        if cached is None:
            weights = stage_weights(
                card,
                shape,
                start,
                end,
                first_stage=first,
                last_stage=last,
                mtp=bool(mtp_layers),
                max_num_batched_tokens=settings.max_num_batched_tokens,
            )
            reserve = vllm_reserve(
                card,
                ReserveInputs(
                    tensor_parallel=tp,
                    data_parallel=dp,
                    expert_parallel=ep,
                    moe_ranks=tp * dp,
                    last_stage=last,
                    max_num_batched_tokens=settings.max_num_batched_tokens,
                    max_num_seqs=settings.max_num_seqs,
                    groups=groups,
                    cudagraph_capture_sizes=capture_sizes,
                    stage_layers=end - start,
                    mtp=bool(mtp_layers) and last,
                    vllm_version=request.vllm_version,
                    deep_gemm_moe=deep_gemm,
                ),
            )
            kv_layers = end - start + (mtp_layers if last else 0)
            budget = settings.usable_bytes_per_gpu - weights.total_bytes - reserve.in_budget_bytes
            cached = (weights, reserve, kv_layers, budget)
            by_signature[signature] = cached
        stage_data.append((index, start, end, *cached))

    capacity = kv_capacity(
        tuple(max(0, s[6]) for s in stage_data), tuple(s[5] for s in stage_data), kv, settings.max_model_len
    )
    blocks_per_request = -(-settings.max_model_len // kv.block_size)
    stages = []
    shortfall = 0
    for index, start, end, weights, reserve, kv_layers, budget in stage_data:
        per_block = kv.block_size * kv_layers * kv.bytes_per_token_per_layer
        shortfall = max(shortfall, blocks_per_request * per_block - budget)
        stages.append(
            StagePlan(index, start, end, weights.total_bytes, reserve, budget, capacity.num_blocks * per_block)
        )
    fits = capacity.num_blocks >= blocks_per_request and capacity.num_blocks > 0
    worst = max(range(pp), key=lambda i: stages[i].weights_bytes)
    worst_stage = stage_data[worst]
    worst_weights = worst_stage[3]

    moe_in_worst = card.moe_layers_between(worst_stage[1], worst_stage[2])
    traffic = decode_traffic(
        card,
        tensor_parallel=tp,
        data_parallel=dp,
        pipeline_parallel=pp,
        stage_layers=worst_stage[2] - worst_stage[1],
        stage_moe_layers=moe_in_worst,
        tensor_link=links.tensor,
        expert_link=links.expert,
        pipeline_link=links.pipeline,
    )
    components = worst_weights.as_dict()
    routed = components.get("routed_experts", 0)
    moe_layer = layer_bytes(card, shape, True).as_dict() if moe_in_worst else {}
    local_experts = -(-card.n_routed_experts // (tp * dp)) if ep else card.n_routed_experts
    per_expert = moe_layer.get("routed_experts", 0) / local_experts if local_experts and moe_layer else 0.0
    # every GPU of the TP×DP group holds 1/(TP×DP) of each touched expert on average
    per_expert_share = per_expert * (local_experts / card.n_routed_experts) if ep else per_expert
    scales = components.get("fp8_block_scales", 0)
    active_dense = (worst_weights.total_bytes - routed - scales) / (1 if settings.weights_dtype == "fp8" else 2)
    expert_params = 3 * card.hidden_size * card.moe_intermediate_size
    step_inputs = DecodeStepInputs(
        non_expert_bytes=worst_weights.total_bytes - routed,
        expert_bytes_per_expert_layer=per_expert_share,
        moe_layers=moe_in_worst,
        attention_layers=worst_stage[5],
        kv_latent_bytes_per_token_per_layer=kv.latent_bytes_per_token_per_layer,
        kv_indexer_bytes_per_token_per_layer=kv.indexer_bytes_per_token_per_layer,
        index_topk=card.index_topk,
        n_routed_experts=card.n_routed_experts,
        experts_per_token=card.num_experts_per_tok,
        data_parallel=dp,
        flops_per_token=2 * active_dense,
        expert_flops_per_token=2 * expert_params * card.num_experts_per_tok * moe_in_worst,
        moe_ranks=tp * dp,
    )
    context = settings.context_tokens
    batch = max(1, min(settings.max_num_seqs, capacity.tokens // max(1, context))) if fits else 1
    weights_fp8 = settings.weights_dtype == "fp8"
    busy = decode_estimate(
        step_inputs,
        cluster,
        traffic,
        batch=batch,
        context_tokens=context,
        pipeline_parallel=pp,
        weights_fp8=weights_fp8,
    )
    single = decode_estimate(
        step_inputs, cluster, traffic, batch=1, context_tokens=context, pipeline_parallel=pp, weights_fp8=weights_fp8
    )
    warnings = layout_warnings(
        RuleInputs(
            card=card,
            cluster=cluster,
            tensor_parallel=tp,
            pipeline_parallel=pp,
            data_parallel=dp,
            expert_parallel=ep,
            tensor_link=links.tensor,
            expert_link=links.expert,
            pipeline_link=links.pipeline,
            tensor_crosses_socket=links.tensor_crosses_socket,
            weights_dtype=settings.weights_dtype,
            max_num_seqs=settings.max_num_seqs,
            max_num_seqs_from_user=settings.max_num_seqs_from_user,
            expected_concurrency=batch,
            mtp=request.mtp,
        )
    )
    extra = []
    outside = stages[worst].reserve.outside_budget_bytes
    headroom = cluster.gpu.torch_visible_bytes - settings.usable_bytes_per_gpu
    if fits and outside > headroom:
        extra.append(
            f"CUDA graphs (~{outside / GIB:.1f} GiB, captured after the KV cache in vLLM < 0.21) exceed the "
            f"{headroom / GIB:.1f} GiB left by --gpu-memory-utilization: lower it or run --enforce-eager"
        )
    args = vllm_serve_args(
        _Shape(tp, pp, dp, ep),
        ServeSettings(
            max_model_len=settings.max_model_len,
            gpu_memory_utilization=request.gpu_memory_utilization,
            kv_cache_dtype=kv.vllm_kv_cache_dtype,
            max_num_seqs=settings.max_num_seqs_emitted,
            max_num_batched_tokens=request.max_num_batched_tokens,
            deepseek_v32_frontend=card.has_sparse_indexer,
            mtp_speculative_tokens=request.mtp_speculative_tokens if request.mtp else 0,
        ),
    )
    supported = not any(w.blocks_launch for w in warnings)
    cluster_rate = busy.tokens_per_s * dp * placement.instances
    if not fits:
        line = f"does not fit: short by {max(0, shortfall) / GIB:.1f} GiB per GPU for one {settings.max_model_len}-token request"
    else:
        line = (
            f"fits with {stages[worst].kv_cache_bytes / GIB:.1f} GiB KV per GPU; est. {cluster_rate:,.0f} tok/s "
            f"({busy.bound} bound)"
        )
    return LayoutPlan(
        tensor_parallel=tp,
        pipeline_parallel=pp,
        data_parallel=dp,
        expert_parallel=ep,
        placement=placement,
        valid=True,
        invalid_reason=None,
        supported=supported,
        fits=fits,
        shortfall_bytes=0 if fits else max(0, int(shortfall)),
        usable_bytes_per_gpu=settings.usable_bytes_per_gpu,
        weights_bytes_per_gpu=worst_weights.total_bytes,
        weights_by_component=worst_weights.components,
        reserve=stages[worst].reserve,
        kv_budget_bytes_per_gpu=stages[worst].kv_budget_bytes,
        kv_cache_bytes_per_gpu=stages[worst].kv_cache_bytes,
        kv_bytes_per_token_per_gpu=worst_stage[5] * kv.bytes_per_token_per_layer,
        kv_block_size=kv.block_size,
        kv_tokens_per_replica=capacity.tokens,
        max_concurrency=capacity.max_concurrency,
        est_decode_tokens_per_s=cluster_rate if fits else 0.0,
        est_decode_tokens_per_s_per_request=single.tokens_per_s_per_request if fits else 0.0,
        est_bound=busy.bound,
        est_batch_per_replica=batch if fits else 0,
        traffic=traffic,
        stages=tuple(stages),
        warnings=tuple(w.message for w in warnings) + tuple(extra),
        warning_codes=tuple(w.code for w in warnings),
        vllm_args=tuple(args),
        reason=line,
    )


class _Shape:
    __slots__ = ("data_parallel", "expert_parallel", "pipeline_parallel", "tensor_parallel")

    def __init__(self, tp: int, pp: int, dp: int, ep: bool) -> None:
        self.tensor_parallel, self.pipeline_parallel, self.data_parallel, self.expert_parallel = tp, pp, dp, ep
