"""One evaluated serving layout: every number the planner reports for it, and its JSON form.

Per-GPU figures are those of the pipeline stage with the most weights (the busiest stage); the KV
tokens of a replica are limited by its tightest stage, exactly as vLLM takes the minimum number of
blocks over its workers. `stages` lists every stage for whoever needs the detail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from meshdeck.core.layout_parts import PipelineMemory
from meshdeck.core.placement import Placement, RankPlacement, rank_map
from meshdeck.core.reserve import Reserve
from meshdeck.core.serving import ServingEstimate, parallel_label
from meshdeck.core.traffic import TrafficItem, traffic_by_link
from meshdeck.core.units import GIB
from meshdeck.core.weights import StageWeights

# What the "N×" in front of a layout label means, wherever a label shows it (tables' legends, tooltips, dialogs).
INSTANCES_LEGEND = (
    "N×: N independent instances of the layout, one `vllm serve` (or torchrun) each on its own GPUs — "
    "N deployments with N endpoints; nothing routes requests between them"
)


@dataclass(frozen=True)
class StagePlan:
    stage: int
    first_layer: int
    end_layer: int  # exclusive
    weights_bytes: int
    reserve: Reserve
    kv_budget_bytes: int  # total × utilization − weights − reserve in budget (may be negative)
    kv_cache_bytes: int  # what vLLM allocates on this stage: replica blocks × block × layers × bytes

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "layers": [self.first_layer, self.end_layer],
            "weights_gib": round(self.weights_bytes / GIB, 3),
            "reserve_gib": round(self.reserve.in_budget_bytes / GIB, 3),
            "kv_budget_gib": round(self.kv_budget_bytes / GIB, 3),
            "kv_cache_gib": round(self.kv_cache_bytes / GIB, 3),
        }


@dataclass(frozen=True)
class LayoutDetails:
    """The text parts of a layout: warnings (with codes) and the `vllm serve` flags."""

    warnings: tuple[str, ...]
    warning_codes: tuple[str, ...]
    vllm_args: tuple[str, ...]


@dataclass(frozen=True)
class LayoutPlan:
    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    expert_parallel: bool
    placement: Placement
    valid: bool
    invalid_reason: str | None
    supported: bool  # False when a warning says vLLM cannot run it on this GPU
    fits: bool = False
    shortfall_bytes: int = 0  # per GPU of the tightest stage, to hold one max_model_len request; 0 when it fits
    usable_bytes_per_gpu: int = 0  # torch-visible memory × gpu_memory_utilization
    weights_bytes_per_gpu: int = 0
    reserve: Reserve | None = None
    kv_budget_bytes_per_gpu: int = 0
    kv_cache_bytes_per_gpu: int = 0
    kv_bytes_per_token_per_gpu: int = 0
    # DeepSeek-V4: kv_bytes_per_token_per_gpu by part (swa, c4_latent, c128_latent, indexer, compressor_state, padding)
    kv_bytes_per_token_by_part: tuple[tuple[str, float], ...] = ()
    kv_block_size: int = 0
    kv_tokens_per_replica: int = 0
    kv_tokens_logged_per_replica: int = 0  # "GPU KV cache size" as the chosen vLLM release logs it
    max_concurrency: float = 0.0
    est_decode_tokens_per_s: float = 0.0  # whole cluster (all instances, all DP ranks)
    est_decode_tokens_per_s_per_request: float = 0.0
    est_bound: str = ""
    est_batch_per_replica: int = 0
    traffic: tuple[TrafficItem, ...] = ()
    pipeline_memory: PipelineMemory | None = None  # what each stage holds: see `stages`
    practice_tier: int = 0  # rules.PRACTICE_*: 0 documented; higher ranks lower whatever the estimate
    reason: str = ""
    # TTFT, TPOT and tokens/s at the plan's workload (serving.py), or why there is none ("" when it fits and has one)
    serving: ServingEstimate | None = None
    serving_problem: str = ""
    # Warnings and flags are only needed for the layouts someone looks at: built on first use.
    details_factory: Callable[[], LayoutDetails] | None = field(default=None, compare=False, repr=False)
    # what the roofline speed model needs of this layout (roofline_speed.RooflineInputs; None when it does not fit)
    speed_inputs: Any = field(default=None, compare=False, repr=False)
    weights_factory: Callable[[], StageWeights] | None = field(default=None, compare=False, repr=False)

    @cached_property
    def weights_by_component(self) -> tuple[tuple[str, int], ...]:
        """Per-GPU weight bytes of the largest stage, by component."""
        return self.weights_factory().components if self.weights_factory else ()

    @cached_property
    def stages(self) -> tuple[StagePlan, ...]:
        """Every pipeline stage's memory on one GPU (built when asked for: ranking never reads it)."""
        memory = self.pipeline_memory
        if memory is None:
            return ()
        stages = []
        for stage in memory.pipeline.stages:
            held = memory.of(stage)
            stages.append(
                StagePlan(
                    stage=stage.index,
                    first_layer=stage.first_layer,
                    end_layer=stage.end_layer,
                    weights_bytes=held.weights_bytes,
                    reserve=held.reserve,
                    kv_budget_bytes=held.kv_budget_bytes,
                    kv_cache_bytes=memory.kv_cache_bytes(stage),
                )
            )
        return tuple(stages)

    @cached_property
    def details(self) -> LayoutDetails:
        return self.details_factory() if self.details_factory else LayoutDetails((), (), ())

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.details.warnings

    @property
    def warning_codes(self) -> tuple[str, ...]:
        return self.details.warning_codes

    @property
    def vllm_args(self) -> tuple[str, ...]:
        return self.details.vllm_args

    @property
    def instances(self) -> int:
        return self.placement.instances

    @property
    def gpus(self) -> int:
        return self.placement.gpus_used

    @property
    def gpus_per_instance(self) -> int:
        return self.placement.gpus_per_instance

    @property
    def nodes(self) -> int:
        return self.placement.nodes_used

    @property
    def replicas(self) -> int:
        """Independent KV pools: DP ranks of every instance."""
        return self.placement.instances * self.data_parallel

    @property
    def kv_tokens_total(self) -> int:
        return self.replicas * self.kv_tokens_per_replica

    @property
    def weights_gib_per_gpu(self) -> float:
        return self.weights_bytes_per_gpu / GIB

    @property
    def kv_cache_gib_per_gpu(self) -> float:
        return self.kv_cache_bytes_per_gpu / GIB

    @cached_property
    def rank_map(self) -> tuple[RankPlacement, ...]:
        return rank_map(self.placement, self.tensor_parallel, self.pipeline_parallel, self.data_parallel)

    def shape_label(self) -> str:
        """One instance's layout: "TP1·DP8·EP" (what `label()` writes after "N×")."""
        return parallel_label(
            self.tensor_parallel, self.pipeline_parallel, self.data_parallel, "EP" if self.expert_parallel else ""
        )

    def label(self) -> str:
        text = self.shape_label()
        return f"{self.instances}× {text}" if self.instances > 1 else text

    def instances_text(self) -> str:
        """What "N×" means for this layout, in one sentence; "" for a single instance."""
        if self.instances == 1:
            return ""
        return (
            f"{self.label()}: {self.instances} independent instances of {self.shape_label()}, one `vllm serve` "
            f"(or torchrun) each on {self.gpus_per_instance} GPUs — {self.instances} deployments with "
            f"{self.instances} endpoints; nothing routes requests between them"
        )

    def as_dict(self, *, include_rank_map: bool = True, rank_note: str = "") -> dict[str, Any]:
        """JSON form; `rank_note` is the plan's word on where it ranked this layout (PlanResult.rank_note)."""
        out: dict[str, Any] = {
            "tensor_parallel": self.tensor_parallel,
            "pipeline_parallel": self.pipeline_parallel,
            "data_parallel": self.data_parallel,
            "expert_parallel": self.expert_parallel,
            "expert_parallel_size": self.tensor_parallel * self.data_parallel if self.expert_parallel else 1,
            "instances": self.instances,
            "gpus": self.gpus,
            "gpus_per_instance": self.gpus_per_instance,
            "nodes": self.nodes,
            "valid": self.valid,
            "invalid_reason": self.invalid_reason,
            "supported": self.supported,
            "fits": self.fits,
            "shortfall_gib": round(self.shortfall_bytes / GIB, 2),
            "usable_gib_per_gpu": round(self.usable_bytes_per_gpu / GIB, 3),
            "weights_gib_per_gpu": round(self.weights_gib_per_gpu, 3),
            "weights_gib_by_component": {k: round(v / GIB, 4) for k, v in self.weights_by_component},
            "reserve_gib": None
            if self.reserve is None
            else {
                "activation_peak": round(self.reserve.activation_peak_bytes / GIB, 3),
                "sampler": round(self.reserve.sampler_bytes / GIB, 3),
                "non_torch": round(self.reserve.non_torch_bytes / GIB, 3),
                "cudagraphs": round(self.reserve.cudagraph_bytes / GIB, 3),
                "cudagraphs_in_budget": self.reserve.cudagraph_in_budget,
                "in_budget_total": round(self.reserve.in_budget_bytes / GIB, 3),
                "communicators_outside_budget": round(self.reserve.communicator_bytes / GIB, 3),
            },
            "kv_budget_gib_per_gpu": round(self.kv_budget_bytes_per_gpu / GIB, 3),
            "kv_cache_gib_per_gpu": round(self.kv_cache_gib_per_gpu, 3),
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
            **(
                {"kv_bytes_per_token_by_part": {k: round(v, 2) for k, v in self.kv_bytes_per_token_by_part}}
                if self.kv_bytes_per_token_by_part
                else {}
            ),
            "kv_block_size": self.kv_block_size,
            "kv_tokens_per_replica": self.kv_tokens_per_replica,
            "kv_tokens_logged_per_replica": self.kv_tokens_logged_per_replica,
            "kv_tokens_total": self.kv_tokens_total,
            "max_concurrency": round(self.max_concurrency, 2),
            "est_decode_tokens_per_s": round(self.est_decode_tokens_per_s, 1),
            "est_decode_tokens_per_s_per_request": round(self.est_decode_tokens_per_s_per_request, 2),
            "est_bound": self.est_bound,
            "est_batch_per_replica": self.est_batch_per_replica,
            "traffic_per_token": [item.as_dict() for item in self.traffic],
            "traffic_bytes_per_token_by_link": {k: round(v) for k, v in traffic_by_link(self.traffic).items()},
            "stages": [stage.as_dict() for stage in self.stages],
            "warnings": list(self.warnings),
            "warning_codes": list(self.warning_codes),
            "vllm_args": list(self.vllm_args),
            "reason": self.reason,
            "rank_note": rank_note,
            "serving": self.serving.as_dict() if self.serving is not None else None,
            "serving_problem": self.serving_problem or None,
        }
        if include_rank_map:
            out["rank_map"] = [r.as_dict() for r in self.rank_map]
        return out
