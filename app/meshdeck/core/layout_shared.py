"""What the layouts of one plan share, so the evaluator computes it once per plan (see evaluate.py).

A sharding (TP, DP, EP) fixes validity, weight totals and the reserve terms that do not depend on
the process groups; a grid (TP, PP, DP on one instance size) fixes the links every group crosses and
its NCCL memory; a PP depth fixes the stage partition, stages of one kind computed once.
"""

from __future__ import annotations

from typing import NamedTuple

from meshdeck.core.cluster import LinkClass
from meshdeck.core.placement import GroupLinks
from meshdeck.core.plan_request import ResolvedSettings
from meshdeck.core.reserve import GroupMembership, LayoutReserve, Reserve
from meshdeck.core.throughput import DecodeStepInputs
from meshdeck.core.traffic import TrafficItem
from meshdeck.core.weights import ShardShape, ShardTotals


def process_groups(
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


class Sharding:
    """What every layout of one (TP, DP, EP) shares: validity, weight totals, group-independent reserve."""

    __slots__ = ("decode_constants", "invalid_reason", "reserve", "shape", "stage_reserves", "totals")

    def __init__(self, shape: ShardShape, invalid_reason: str | None) -> None:
        self.shape = shape
        self.invalid_reason = invalid_reason
        self.totals: ShardTotals | None = None
        self.reserve: LayoutReserve | None = None  # non_torch_bytes is per grid: see LayoutEvaluator._reserve
        self.stage_reserves: dict[tuple[int, bool, int], tuple[Reserve, int]] = {}
        self.decode_constants: tuple = ()

    def step_inputs(
        self, stage_bytes: int, dense_layers: int, moe_layers: int, attention_layers: int
    ) -> DecodeStepInputs:
        """What one decode step of the busiest stage reads and computes on one GPU."""
        totals = self.totals
        routed_per_layer, per_expert, bytes_per_param, expert_flops_per_layer, card_terms = self.decode_constants
        latent, indexer, index_topk, n_routed_experts, experts_per_token = card_terms
        routed = moe_layers * routed_per_layer
        scales = dense_layers * totals.scales_dense_layer + moe_layers * totals.scales_moe_layer  # type: ignore[union-attr]
        dense_params = (stage_bytes - routed - scales) / bytes_per_param
        shape = self.shape
        return DecodeStepInputs(
            stage_bytes - routed,  # non_expert_bytes
            per_expert if moe_layers else 0.0,
            moe_layers,
            attention_layers,
            latent,
            indexer,
            index_topk,
            n_routed_experts,
            experts_per_token,
            shape.moe_ranks // shape.tensor_parallel,  # data_parallel
            2 * dense_params,  # flops_per_token
            expert_flops_per_layer * moe_layers,  # expert_flops_per_token
            shape.moe_ranks,
        )


class GridShared:
    """What the EP and non-EP variants of one (TP, PP, DP) placement share."""

    __slots__ = ("links", "non_torch", "pipeline_in_node", "tier", "traffic")

    def __init__(self, links: GroupLinks, pipeline_in_node: bool, tier: int) -> None:
        self.links = links
        self.pipeline_in_node = pipeline_in_node
        self.tier = tier
        self.non_torch: dict[bool, int] = {}  # by "has an EP group"
        self.traffic: dict[
            tuple[int, int], tuple[tuple[TrafficItem, ...], tuple[list[tuple[float, float]], float]]
        ] = {}


class StageKind(NamedTuple):
    dense_layers: int
    moe_layers: int
    first_stage: bool
    last_stage: bool
    layers: int
    kv_layers: int  # its layers, plus the MTP layer on the last stage
    block_bytes: int  # one KV block over all its kv layers


class PipelineStages(NamedTuple):
    """The stages of a PP depth: their kinds, and (first_layer, end_layer, kind index) in stage order."""

    kinds: tuple[StageKind, ...]
    stages: tuple[tuple[int, int, int], ...]
    max_kv_layers: int
