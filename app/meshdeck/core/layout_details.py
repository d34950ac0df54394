"""The text parts of one layout — its warnings and `vllm serve` flags — built only when someone looks.

Ranking never needs them, so the evaluator hands each LayoutPlan a partial of `layout_details`
instead of the strings (a 64-node cluster has hundreds of layouts; a table shows a handful).
"""

from __future__ import annotations

from meshdeck.core.layout_plan import LayoutDetails
from meshdeck.core.placement import GroupLinks
from meshdeck.core.plan_request import PlanRequest, ResolvedSettings
from meshdeck.core.rules import RuleInputs, layout_warnings
from meshdeck.core.vllm_args import ServeSettings, vllm_serve_args


class _Shape:
    __slots__ = ("data_parallel", "expert_parallel", "pipeline_parallel", "tensor_parallel")

    def __init__(self, tp: int, pp: int, dp: int, ep: bool) -> None:
        self.tensor_parallel, self.pipeline_parallel, self.data_parallel, self.expert_parallel = tp, pp, dp, ep


def layout_details(
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
    """Warnings (practice rules, then `extra` CUDA-graph headroom lines) and the `vllm serve` flags."""
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
