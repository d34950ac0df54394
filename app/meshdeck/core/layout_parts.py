"""The parts one layout's numbers are built from: its sharding, its pipeline stages, its process groups.

A sharding (TP, DP, EP) fixes validity, weight totals, the reserve terms that do not depend on the
process groups, and what a decode step reads; a PP depth fixes the stage partition (vLLM's
get_pp_indices); the process groups a rank joins fix its NCCL memory. `evaluate.py` puts them together.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from meshdeck.core.cluster import LinkClass
from meshdeck.core.model_card import ModelCard
from meshdeck.core.placement import GroupLinks, Placement
from meshdeck.core.plan_request import ResolvedSettings
from meshdeck.core.reserve import GroupMembership, LayoutReserve, Reserve
from meshdeck.core.throughput import DecodeStepInputs
from meshdeck.core.weights import BF16, ShardShape, ShardTotals, stage_total


@dataclass(frozen=True)
class LayoutCandidate:
    """One layout the planner asks about: its parallel degrees and where its instances run."""

    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    expert_parallel: bool
    placement: Placement


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


@dataclass(frozen=True)
class StageKind:
    """What a stage's memory depends on besides the sharding: two stages of one kind hold the same bytes."""

    dense_layers: int
    moe_layers: int
    first_stage: bool
    last_stage: bool
    bf16_dense_layers: int = 0  # of them, layers the checkpoint keeps BF16 whole (ModelCard.unquantized_layers)
    bf16_moe_layers: int = 0
    # DeepSeek-V4: the decoder layers [start, end) themselves — V4's layers differ (compress ratios, hash routing), so
    # each stage is its own kind and its weights and KV groups are counted layer by layer (core.v4_layout)
    layer_range: tuple[int, int] | None = None

    @property
    def layers(self) -> int:
        return self.dense_layers + self.moe_layers


@dataclass(frozen=True)
class StageLayers:
    """The decoder layers [first_layer, end_layer) of one pipeline stage, and its kind."""

    index: int
    first_layer: int
    end_layer: int
    kind: StageKind


@dataclass(frozen=True)
class PipelineStages:
    """The stages of a PP depth in order, and their distinct kinds (a few, however many stages)."""

    stages: tuple[StageLayers, ...]
    kinds: tuple[StageKind, ...]


@lru_cache(maxsize=512)
def pipeline_stages(card: ModelCard, pipeline_parallel: int) -> PipelineStages:
    """vLLM's stage partition of this model at this PP depth."""
    last = pipeline_parallel - 1
    kinds: dict[StageKind, StageKind] = {}  # one object per kind: stages of one kind share it
    stages = []
    for index, (start, end) in enumerate(pp_partition(card.num_hidden_layers, pipeline_parallel)):
        moe = card.moe_layers_between(start, end)
        bf16 = [i for i in card.unquantized_layers if start <= i < end]
        bf16_moe = sum(1 for i in bf16 if card.is_moe_layer(i))
        exact = (start, end) if card.is_v4 else None
        kind = StageKind(end - start - moe, moe, index == 0, index == last, len(bf16) - bf16_moe, bf16_moe, exact)
        stages.append(StageLayers(index, start, end, kinds.setdefault(kind, kind)))
    return PipelineStages(tuple(stages), tuple(kinds))


@dataclass(frozen=True)
class StageMemory:
    """What one GPU of a stage holds before the KV cache, and what one KV block costs it."""

    weights_bytes: int
    reserve: Reserve
    kv_budget_bytes: int  # usable − weights − reserve in budget (may be negative)
    kv_layers: int  # its layers, plus the MTP layer on the last stage
    kv_block_bytes: int  # one KV block over all its kv layers

    @property
    def kv_blocks(self) -> int:
        """KV blocks this stage alone would allocate."""
        return self.kv_budget_bytes // self.kv_block_bytes if self.kv_budget_bytes > 0 else 0


@dataclass(frozen=True)
class PipelineMemory:
    """What every stage of one replica holds. vLLM gives each stage the same number of KV blocks: the
    tightest stage's."""

    pipeline: PipelineStages
    by_kind: tuple[StageMemory, ...]  # one per kind, in the order of pipeline.kinds
    kv_blocks: int

    def of(self, stage: StageLayers) -> StageMemory:
        """What one GPU of `stage` holds (its kind's memory)."""
        return self.by_kind[self.pipeline.kinds.index(stage.kind)]

    def kv_cache_bytes(self, stage: StageLayers) -> int:
        """What vLLM allocates for the KV cache on one GPU of this stage."""
        return self.kv_blocks * self.of(stage).kv_block_bytes

    @property
    def busiest_stage(self) -> StageLayers:
        """The first stage holding the most weights: a layout's per-GPU figures are its."""
        most = max(memory.weights_bytes for memory in self.by_kind)
        return next(stage for stage in self.pipeline.stages if self.of(stage).weights_bytes == most)


@dataclass(frozen=True)
class Sharding:
    """What every layout of one (TP, DP, EP) shares: its shape, per-GPU weight totals and group-independent reserve."""

    card: ModelCard
    shape: ShardShape
    totals: ShardTotals
    reserve: LayoutReserve
    parameter_totals: ShardTotals  # the same shard stored in BF16: bytes / 2 are its parameters

    def step_inputs(self, stage_bytes: int, stage: StageKind, attention_layers: int) -> DecodeStepInputs:
        """What one decode step of this stage reads and computes on one GPU holding `stage_bytes` of weights.

        A GPU reads 1/E of a layer's routed bytes per touched expert: with expert parallel whole experts
        (its experts / all experts of the touched ones, each of full size), without a 1/(TP×DP) slice of each.
        """
        card, totals, shape = self.card, self.totals, self.shape
        dense_layers, moe_layers = stage.dense_layers, stage.moe_layers
        routed = moe_layers * totals.routed_per_moe_layer
        # FLOPs follow the parameters, not their storage (4-bit formats store 2 parameters a byte): count
        # them on the same shard in BF16, without the buffers every stage allocates
        params = self.parameter_totals
        bf16_bytes = stage_total(params, dense_layers, moe_layers, stage.first_stage, stage.last_stage)
        dense_parameters = (bf16_bytes - moe_layers * params.routed_per_moe_layer - params.every_stage_extra) / BF16
        expert_parameters = 3 * card.hidden_size * card.moe_intermediate_size
        return DecodeStepInputs(
            non_expert_bytes=stage_bytes - routed,
            expert_bytes_per_expert_layer=totals.routed_per_moe_layer / card.n_routed_experts if moe_layers else 0.0,
            moe_layers=moe_layers,
            attention_layers=attention_layers,
            data_parallel=shape.moe_ranks // shape.tensor_parallel,
            flops_per_token=2 * dense_parameters,
            expert_flops_per_token=2 * expert_parameters * card.num_experts_per_tok * moe_layers,
            moe_ranks=shape.moe_ranks,
        )


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
        GroupMembership(world, world_crosses, nvls and not world_crosses and world > 2, communicators=1),
        GroupMembership(tp, tensor_crosses, nvls and not tensor_crosses and tp > 2),
        GroupMembership(pp, links.pipeline is net, False),
        GroupMembership(dp, expert_crosses, nvls and not expert_crosses and dp > 2),
    ]
    if ep or dp > 1:
        size = tp * dp
        groups.append(GroupMembership(size, expert_crosses, nvls and not expert_crosses and size > 2))
    return tuple(groups)
