"""The text parts of one layout — its warnings and `vllm serve` flags — built only when someone looks.

Ranking never needs them, so the evaluator hands each LayoutPlan a partial of `layout_details`
instead of the strings (a 64-node cluster has hundreds of layouts; a table shows a handful).
"""

from __future__ import annotations

from meshdeck.core.layout_plan import LayoutDetails
from meshdeck.core.placement import GroupLinks
from meshdeck.core.plan_request import PlanRequest, ResolvedSettings
from meshdeck.core.rules import RuleInputs, layout_warnings
from meshdeck.core.vllm_args import ParallelLayout, ServeSettings, vllm_serve_args


def layout_details(
    request: PlanRequest,
    settings: ResolvedSettings,
    layout: ParallelLayout,
    links: GroupLinks,
    pipeline_inside_nvlink_node: bool,
    *,
    expected_concurrency: int,
    extra_warnings: tuple[str, ...],
) -> LayoutDetails:
    """Warnings (practice rules, then `extra_warnings`: CUDA-graph headroom lines) and the `vllm serve` flags."""
    card = request.model
    warnings = layout_warnings(
        RuleInputs(
            card=card,
            cluster=request.cluster,
            tensor_parallel=layout.tensor_parallel,
            pipeline_parallel=layout.pipeline_parallel,
            data_parallel=layout.data_parallel,
            expert_parallel=layout.expert_parallel,
            tensor_link=links.tensor,
            expert_link=links.expert,
            pipeline_link=links.pipeline,
            tensor_crosses_socket=links.tensor_crosses_socket,
            pipeline_inside_nvlink_node=pipeline_inside_nvlink_node,
            weights_dtype=settings.weights_dtype,
            max_num_seqs=settings.max_num_seqs,
            max_num_seqs_from_user=settings.max_num_seqs_from_user,
            expected_concurrency=expected_concurrency,
            mtp=request.mtp,
            vllm_version=request.vllm_version,
        )
    )
    args = vllm_serve_args(
        layout,
        ServeSettings(
            max_model_len=settings.max_model_len,
            gpu_memory_utilization=request.gpu_memory_utilization,
            kv_cache_dtype=settings.kv.vllm_kv_cache_dtype,
            max_num_seqs=settings.max_num_seqs_emitted,
            max_num_batched_tokens=request.max_num_batched_tokens,
            deepseek_v32_frontend=card.has_sparse_indexer and not card.is_v4,  # V4 has an indexer, not V3.2's parsers
            deepseek_v4_frontend=card.is_v4,
            mtp_speculative_tokens=request.mtp_speculative_tokens if request.mtp else 0,
            mm_encoder_tp_mode=request.mm_encoder_tp_mode,
        ),
    )
    return LayoutDetails(
        tuple(w.message for w in warnings) + extra_warnings,
        tuple(w.code for w in warnings) + tuple("cudagraph_headroom" for _ in extra_warnings),
        tuple(args),
    )
