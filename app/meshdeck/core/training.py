"""Training / fine-tuning plans (engine torch, `--mode train`): memory per GPU and traffic per step.

Mixed-precision Adam, as in the ZeRO paper: BF16 parameters (2 B) and gradients (2 B), FP32 master
weights and two Adam moments (12 B) — 16 bytes per parameter, partitioned over the data-parallel
group by ZeRO stage: 1 shards the optimizer state, 2 also the gradients, 3 also the parameters.
Experts are split over the data-parallel ranks with expert parallel (EP = DP, each expert lives
on one rank of the group, so ZeRO has nothing left to shard for them).

Activations (BF16, Megatron-style tensor parallel with sequence parallel, so every per-token tensor
is split by TP) are counted from DeepSeek's shapes: MLA projections, FlashAttention inputs/outputs
(no s² term), the MLP or the routed top-k expert copies. With activation checkpointing a layer keeps
only its input (and recomputes one layer at a time). 1F1B keeps up to PP micro-batches alive on the
first stage; its bubble is (PP − 1) / (m + PP − 1).

Traffic per optimizer step, per GPU: DP gradient all-reduce (ZeRO-3 adds the parameter all-gathers:
1.5×), TP all-reduces (4 per layer per micro-batch, 6 with recomputation), EP all-to-all (dispatch +
combine, forward and backward), PP activations and gradients at each stage boundary.
Speeds are estimates (MFU and link efficiency assumed), labelled as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from meshdeck.core.cluster import LinkClass
from meshdeck.core.layout_parts import pp_partition
from meshdeck.core.parameters import ParameterCounts
from meshdeck.core.placement import Placement, group_links, placement_for
from meshdeck.core.plan_request import PlanRequest, ResolvedSettings
from meshdeck.core.units import GIB, MIB

BF16 = 2
OPTIMIZER_BYTES = 12  # FP32 master weights + Adam m + v
TRAIN_MFU = 0.35
LINK_EFFICIENCY = 0.7
NON_TORCH_TRAINING_BYTES = 2048 * MIB  # CUDA context, NCCL buffers, cuBLAS workspaces
FRAGMENTATION = 0.05  # caching-allocator slack kept free


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class TrainingLayout:
    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    expert_parallel: bool
    zero_stage: int
    placement: Placement
    fits: bool
    parameters_per_gpu: int
    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    activations_bytes_without_checkpointing: int
    activations_bytes_with_checkpointing: int
    usable_bytes: int
    bubble_fraction: float
    traffic: tuple[tuple[str, float, LinkClass], ...]  # (strategy, bytes per step per GPU, link)
    est_step_time_s: float
    est_tokens_per_s: float
    est_compute_time_s: float  # per step, without communication or bubble

    def link_needs_bytes_per_s(self) -> dict[str, float]:
        """Bandwidth each strategy's traffic needs to hide behind the step's compute."""
        return {name: volume / self.est_compute_time_s for name, volume, _ in self.traffic if self.est_compute_time_s}

    @property
    def total_bytes(self) -> int:
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes

    def label(self) -> str:
        parts = [f"TP{self.tensor_parallel}", f"PP{self.pipeline_parallel}", f"DP{self.data_parallel}"]
        if self.expert_parallel:
            parts.append(f"EP{self.data_parallel}")
        return "·".join(parts) + f" ZeRO-{self.zero_stage}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "tensor_parallel": self.tensor_parallel,
            "pipeline_parallel": self.pipeline_parallel,
            "data_parallel": self.data_parallel,
            "expert_parallel": self.expert_parallel,
            "zero_stage": self.zero_stage,
            "gpus": self.placement.gpus_per_instance,
            "nodes": self.placement.nodes_per_instance,
            "fits": self.fits,
            "parameters_per_gpu": self.parameters_per_gpu,
            "params_gib_per_gpu": round(self.params_bytes / GIB, 2),
            "grads_gib_per_gpu": round(self.grads_bytes / GIB, 2),
            "optimizer_gib_per_gpu": round(self.optimizer_bytes / GIB, 2),
            "activations_gib_per_gpu": round(self.activations_bytes / GIB, 2),
            "activations_gib_without_checkpointing": round(self.activations_bytes_without_checkpointing / GIB, 2),
            "activations_gib_with_checkpointing": round(self.activations_bytes_with_checkpointing / GIB, 2),
            "total_gib_per_gpu": round(self.total_bytes / GIB, 2),
            "usable_gib_per_gpu": round(self.usable_bytes / GIB, 2),
            "pipeline_bubble_fraction": round(self.bubble_fraction, 4),
            "traffic_per_step": [
                {"strategy": name, "bytes_per_gpu": round(volume), "link": link.value}
                for name, volume, link in self.traffic
            ],
            "est_step_time_s": round(self.est_step_time_s, 3),
            "est_tokens_per_s": round(self.est_tokens_per_s, 1),
            "est_link_needs_gbps": {k: round(v * 8 / 1e9, 1) for k, v in self.link_needs_bytes_per_s().items()},
        }


@dataclass(frozen=True)
class TrainingPlan:
    layouts: list[TrainingLayout]
    top_reason: str
    notes: tuple[str, ...]
    strategies: tuple[tuple[str, TrainingLayout], ...] = ()  # the seed table, on this cluster

    def as_dict(self, *, include_all: bool = False, top: int | None = None) -> dict[str, Any]:
        chosen = self.layouts if include_all else [layout for layout in self.layouts if layout.fits]
        if top is not None:
            chosen = chosen[:top]
        return {
            "mode": "train",
            "top_reason": self.top_reason,
            "notes": list(self.notes),
            "layouts_total": len(self.layouts),
            "layouts": [layout.as_dict() for layout in chosen],
            "strategies": [{"strategy": name, **layout.as_dict()} for name, layout in self.strategies],
        }


def activation_bytes_per_token_per_layer(request: PlanRequest, tensor_parallel: int, moe: bool) -> int:
    """BF16 bytes one token leaves for backward in one layer, TP + sequence parallel splitting all of it."""
    card = request.model
    h, heads = card.hidden_size, card.num_attention_heads
    q_lora = card.q_lora_rank or 0
    attention = 2 * h + 2 * q_lora + card.mla_latent_dim + card.kv_lora_rank
    # q_b out, kv_b out, FlashAttention q/k/v (v padded to qk_head_dim) and its output, o_proj input
    attention += heads * (
        card.qk_head_dim + card.qk_nope_head_dim + card.v_head_dim + 3 * card.qk_head_dim + 2 * card.v_head_dim
    )
    if card.has_sparse_indexer:
        attention += card.index_n_heads * card.index_head_dim + card.index_head_dim
    if moe:
        shared = 3 * card.moe_intermediate_size * card.n_shared_experts
        routed = card.num_experts_per_tok * (h + 3 * card.moe_intermediate_size)
        mlp = h + 2 * card.n_routed_experts + shared + routed
    else:
        mlp = h + 3 * card.intermediate_size
    return BF16 * (attention + mlp) // tensor_parallel


def _evaluate(
    request: PlanRequest,
    settings: ResolvedSettings,
    counts: ParameterCounts,
    tp: int,
    pp: int,
    dp: int,
    ep: bool,
    placement: Placement,
    zero: int | None = None,
) -> TrainingLayout:
    card, cluster, training = request.model, request.cluster, request.train_settings
    assert training is not None
    zero = training.zero_stage if zero is None else zero
    s, b, m = training.seq_len, training.micro_batch_size, training.micro_batches
    bounds = pp_partition(card.num_hidden_layers, pp)
    per_layer_attn = (counts.attention + counts.indexer) / card.num_hidden_layers
    dense_mlp = counts.dense_mlp / max(1, card.dense_layer_count)
    moe_non_routed = (counts.shared_experts + counts.router) / max(1, card.moe_layer_count)
    routed = counts.routed_experts / max(1, card.moe_layer_count)
    worst_params = 0.0
    worst_dense = worst_expert = 0.0
    worst_layers = worst_moe = 0
    for index, (start, end) in enumerate(bounds):
        moe = card.moe_layers_between(start, end)
        dense = end - start - moe
        non_expert = (end - start) * per_layer_attn + dense * dense_mlp + moe * moe_non_routed
        non_expert += (counts.embedding if index == 0 else 0) + (counts.lm_head if index == pp - 1 else 0)
        expert = moe * routed / (dp if ep else 1)
        params = (non_expert + expert) / tp
        if params > worst_params:
            worst_params, worst_dense, worst_expert = params, non_expert / tp, expert / tp
            worst_layers, worst_moe = end - start, moe
    # ZeRO shards over the data-parallel replicas of each parameter: DP for non-experts, DP/EP for experts
    expert_replicas = 1 if ep else dp
    params_b = grads_b = opt_b = 0.0
    for part, replicas in ((worst_dense, dp), (worst_expert, expert_replicas)):
        params_b += part * BF16 / (replicas if zero >= 3 else 1)
        grads_b += part * BF16 / (replicas if zero >= 2 else 1)
        opt_b += part * OPTIMIZER_BYTES / (replicas if zero >= 1 else 1)
    tokens_micro = s * b
    full_layer = [
        activation_bytes_per_token_per_layer(request, tp, False),
        activation_bytes_per_token_per_layer(request, tp, True),
    ]
    per_micro_full = tokens_micro * ((worst_layers - worst_moe) * full_layer[0] + worst_moe * full_layer[1])
    in_flight = min(pp, m)
    without_ckpt = in_flight * per_micro_full
    with_ckpt = in_flight * tokens_micro * worst_layers * card.hidden_size * BF16 // tp + tokens_micro * max(full_layer)
    activations = with_ckpt if training.activation_checkpointing else without_ckpt
    usable = int((cluster.gpu.torch_visible_bytes - NON_TORCH_TRAINING_BYTES) * (1 - FRAGMENTATION))
    total = params_b + grads_b + opt_b + activations

    links = group_links(cluster, placement, tp, pp, dp)
    h = card.hidden_size
    traffic: list[tuple[str, float, LinkClass]] = []
    if dp > 1:
        grads = worst_dense * BF16 + (worst_expert * BF16 if not ep else 0.0)
        volume = 2 * (dp - 1) / dp * grads * (1.5 if zero >= 3 else 1.0)
        traffic.append(("dp_gradients" + ("+zero3_params" if zero >= 3 else ""), volume, links.expert))
    if tp > 1:
        passes = 6 if training.activation_checkpointing else 4
        volume = passes * worst_layers * m * 2 * (tp - 1) / tp * tokens_micro * h * BF16
        traffic.append(("tp_all_reduce", volume, links.tensor))
    if ep and dp > 1 and worst_moe:
        volume = 4 * worst_moe * m * tokens_micro * card.num_experts_per_tok * h * BF16 * (dp - 1) / dp / tp
        traffic.append(("ep_all_to_all", volume, links.expert))
    if pp > 1:
        traffic.append(("pp_activations", 2 * m * tokens_micro * h * BF16 / tp, links.pipeline))

    bubble = (pp - 1) / (m + pp - 1)
    active = counts.active_per_token
    tokens_step = dp * m * tokens_micro
    gpu = cluster.gpu
    peak = gpu.bf16_tflops * 1e12 or 100e12
    compute = 6 * active * tokens_step / (placement.gpus_per_instance * peak * TRAIN_MFU)
    if training.activation_checkpointing:
        compute *= 4 / 3  # one more forward
    comm = sum(volume / (cluster.link_bytes_per_s(link) * LINK_EFFICIENCY) for _, volume, link in traffic)
    step = compute / (1 - bubble) + comm
    return TrainingLayout(
        tensor_parallel=tp,
        pipeline_parallel=pp,
        data_parallel=dp,
        expert_parallel=ep,
        zero_stage=zero,
        placement=placement,
        fits=total <= usable,
        parameters_per_gpu=int(worst_dense + worst_expert),
        params_bytes=int(params_b),
        grads_bytes=int(grads_b),
        optimizer_bytes=int(opt_b),
        activations_bytes=int(activations),
        activations_bytes_without_checkpointing=int(without_ckpt),
        activations_bytes_with_checkpointing=int(with_ckpt),
        usable_bytes=usable,
        bubble_fraction=bubble,
        traffic=tuple(traffic),
        est_step_time_s=step,
        est_tokens_per_s=tokens_step / step * placement.instances if step > 0 else 0.0,
        est_compute_time_s=compute,
    )


def plan_training(request: PlanRequest, settings: ResolvedSettings, counts: ParameterCounts) -> TrainingPlan:
    """Every TP × PP × DP (× EP) layout over all GPUs of the cluster, ranked by estimated tokens/s."""
    cluster, card = request.cluster, request.model
    gpus = cluster.total_gpus
    placement = placement_for(cluster, gpus)
    assert placement is not None
    layouts = []
    for tp in _divisors(card.num_attention_heads):
        if gpus % tp or tp > cluster.gpus_per_node:
            continue
        if request.tensor_parallel is not None and tp != request.tensor_parallel:
            continue
        for pp in _divisors(gpus // tp):
            if pp > card.num_hidden_layers or (
                request.pipeline_parallel is not None and pp != request.pipeline_parallel
            ):
                continue
            dp = gpus // tp // pp
            if request.data_parallel is not None and dp != request.data_parallel:
                continue
            for ep in (False, True) if dp > 1 and request.expert_parallel is None else (bool(request.expert_parallel),):
                layouts.append(_evaluate(request, settings, counts, tp, pp, dp, ep, placement))
    layouts.sort(
        key=lambda layout: (layout.fits, layout.est_tokens_per_s if layout.fits else -layout.total_bytes), reverse=True
    )
    notes = (
        "16 bytes per parameter: BF16 weights + BF16 grads + FP32 master and Adam moments (ZeRO paper)",
        "activations: TP with sequence parallel, FlashAttention (no s^2 term), 1F1B keeps PP micro-batches in flight",
        f"est_* numbers assume {TRAIN_MFU:.0%} MFU and {LINK_EFFICIENCY:.0%} link efficiency: estimates, not measurements",
    )
    if not layouts:
        return TrainingPlan([], "no layout matches the filters", notes)
    top = layouts[0]
    if top.fits:
        reason = (
            f"{top.label()}: {top.total_bytes / GIB:.1f} GiB of {top.usable_bytes / GIB:.1f} GiB per GPU, "
            f"est. {top.est_tokens_per_s:,.0f} tokens/s, bubble {top.bubble_fraction:.0%}"
        )
    else:
        reason = (
            f"nothing fits: the smallest, {top.label()}, needs {top.total_bytes / GIB:.1f} GiB per GPU of "
            f"{top.usable_bytes / GIB:.1f} — raise --zero, turn on --activation-checkpointing, or add GPUs"
        )
    return TrainingPlan(layouts, reason, notes, strategy_table(request, settings, counts, placement, top))


def strategy_table(
    request: PlanRequest,
    settings: ResolvedSettings,
    counts: ParameterCounts,
    placement: Placement,
    best: TrainingLayout,
) -> tuple[tuple[str, TrainingLayout], ...]:
    """One row per classic strategy over every GPU of this cluster: memory, traffic and link needs.

    DP and ZeRO 1-3 replicate the model on every GPU; TP shards it inside a node (DP across nodes);
    PP stacks stages across nodes; 3D is the best-ranked TP × PP × DP layout.
    """
    card, cluster = request.model, request.cluster
    gpus = cluster.total_gpus
    rows: list[tuple[str, TrainingLayout]] = []
    for zero in (0, 1, 2, 3):
        rows.append(
            (
                "DP" if zero == 0 else f"ZeRO-{zero}",
                _evaluate(request, settings, counts, 1, 1, gpus, False, placement, zero),
            )
        )
    tp = max(d for d in _divisors(card.num_attention_heads) if d <= cluster.gpus_per_node and gpus % d == 0)
    rows.append((f"TP{tp}", _evaluate(request, settings, counts, tp, 1, gpus // tp, False, placement, 0)))
    pp = max(d for d in _divisors(gpus) if d <= min(card.num_hidden_layers, 16))
    rows.append((f"PP{pp}", _evaluate(request, settings, counts, 1, pp, gpus // pp, False, placement, 0)))
    rows.append(("3D", best))
    return tuple(rows)
