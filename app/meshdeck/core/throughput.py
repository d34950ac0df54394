"""Estimated decode speed: memory-bandwidth, compute or communication bound — and which one holds.

One decode step of a batch of B sequences on one GPU of the busiest stage reads:
- every non-expert weight it holds (attention, dense MLP, shared experts, router, indexer, lm_head);
- the routed experts the batch actually touches: with top-k routing over E experts the expected
  number of distinct experts hit by n tokens is E·(1 − (1 − k/E)^n); with data parallel the MoE
  sees the tokens of every DP rank; each GPU reads its 1/(TP×DP) share of those experts;
- the KV cache of each sequence for its layers (V3.2 reads only index_topk latents per query but
  its indexer scans every key of the context).
Time = max(bytes / HBM bandwidth, FLOPs / tensor throughput) + communication (bytes / link
bandwidth + a latency per collective) + a fixed per-layer floor (small kernels); the bound named is
the largest of these terms. Pipeline stages run B/PP-sized micro-batches in flight; with
fewer sequences than stages the pipeline idles (bubble). All of it is an *estimate* (efficiencies
below are typical achieved fractions, not measurements of your cluster).
"""

from __future__ import annotations

from dataclasses import dataclass

from meshdeck.core.cluster import ClusterSpec, LinkClass
from meshdeck.core.kv_cache import KvFormat
from meshdeck.core.model_card import ModelCard
from meshdeck.core.traffic import TrafficItem

HBM_EFFICIENCY = 0.75
# A decode step also pays a floor per layer that no bandwidth model sees: dozens of small kernels
# (norms, RoPE, routing, quantization, attention metadata) even inside CUDA graphs. Cross-check: a
# public vLLM run of DeepSeek-R1-0528-AWQ on 8×H100 measured 16.1 ms per output token at one request
# (tenstorrent/tt-inference-server #356) where weights and all-reduces alone explain ~2 ms.
LAYER_STEP_OVERHEAD_S = 200e-6
# Assumed chance that each MTP draft position is accepted (DeepSeek-V3 report: 85-90 % for the first
# draft; later positions lower) — an assumption, stated in the plan's notes when --mtp is on.
MTP_ACCEPTANCE = 0.75
TENSOR_EFFICIENCY = 0.45
LINK_EFFICIENCY = 0.7
COLLECTIVE_LATENCY_S = {
    LinkClass.LOCAL: 0.0,
    LinkClass.NVLINK: 8e-6,
    LinkClass.INFINITY_FABRIC: 8e-6,  # assumed as NVLink's: direct links, custom all-reduce on gfx94x/95x
    LinkClass.PCIE: 15e-6,
    LinkClass.NETWORK: 30e-6,
}


@dataclass(frozen=True)
class DecodeStepInputs:
    """What one decode step of the busiest stage reads and computes on one GPU."""

    non_expert_bytes: int  # per GPU, read every step
    expert_bytes_per_expert_layer: float  # one routed expert's bytes in one layer, per GPU share (already / ranks)
    moe_layers: int
    attention_layers: int
    data_parallel: int
    flops_per_token: float  # per GPU (dense part already divided by TP)
    expert_flops_per_token: float  # per token, all routed experts of the stage, before splitting over ranks
    moe_ranks: int


@dataclass(frozen=True)
class CollectiveCost:
    """One in-stage collective of a decode step: seconds per token of each sequence, plus its fixed latency."""

    seconds_per_token: float
    latency_s: float


@dataclass(frozen=True)
class LinkCosts:
    """What a layout's traffic costs a decode step: its in-stage collectives and its pipeline hop."""

    collectives: tuple[CollectiveCost, ...]
    pipeline_hop_s_per_token: float  # latency + bytes / bandwidth, paid for every token the hop carries


@dataclass(frozen=True)
class DecodeEstimate:
    tokens_per_s: float  # the replica (one DP rank's pipeline)
    tokens_per_s_per_request: float
    step_time_s: float
    bound: str  # "memory-bandwidth" | "compute" | "communication" | "pipeline bubble"
    batch: int


def expected_accepted_tokens(speculative_tokens: int) -> float:
    """Tokens emitted per verification step: 1 + a + a² + … + a^k for k drafts accepted with probability a each."""
    return sum(MTP_ACCEPTANCE**i for i in range(speculative_tokens + 1))


def expected_distinct_experts(n_experts: int, top_k: int, tokens: int) -> float:
    if tokens <= 0:
        return 0.0
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** tokens)


class DecodeModel:
    """The decode estimate of one model, cluster and request, for many layouts: its constants computed once.

    The planner builds one per plan and asks it for every layout that fits.
    """

    __slots__ = (
        "_bandwidth",
        "accepted",
        "cluster",
        "context_tokens",
        "experts_per_token",
        "flops_per_s",
        "index_topk",
        "kv_indexer_bytes_per_token_per_layer",
        "kv_latent_bytes_per_token_per_layer",
        "memory_bytes_per_s",
        "n_routed_experts",
        "speculative_tokens",
        "tokens_per_sequence",
    )

    def __init__(
        self,
        card: ModelCard,
        kv: KvFormat,
        cluster: ClusterSpec,
        *,
        context_tokens: int,
        weights_fp8: bool,
        speculative_tokens: int = 0,
    ) -> None:
        gpu = cluster.gpu
        self.kv_latent_bytes_per_token_per_layer = kv.latent_bytes_per_token_per_layer
        self.kv_indexer_bytes_per_token_per_layer = kv.indexer_bytes_per_token_per_layer
        self.index_topk = card.index_topk
        self.n_routed_experts = card.n_routed_experts
        self.experts_per_token = card.num_experts_per_tok
        self.cluster = cluster
        self.context_tokens = context_tokens
        self.speculative_tokens = speculative_tokens
        self.tokens_per_sequence = 1 + speculative_tokens
        self.accepted = expected_accepted_tokens(speculative_tokens)
        self.memory_bytes_per_s = gpu.hbm_bytes_per_s * HBM_EFFICIENCY
        tflops = gpu.fp8_tflops if (weights_fp8 and gpu.fp8_native and gpu.fp8_tflops) else gpu.bf16_tflops
        self.flops_per_s = tflops * 1e12 * TENSOR_EFFICIENCY if tflops else 0.0  # 0: no compute term
        self._bandwidth: dict[tuple[LinkClass, int], float] = {}

    def links(self, traffic: tuple[TrafficItem, ...]) -> LinkCosts:
        """What each in-stage collective and the PP hop of this traffic cost per token."""
        collectives, hop = [], 0.0
        bandwidths = self._bandwidth
        for item in traffic:
            link = item.link
            bandwidth = bandwidths.get((link, item.group_size))
            if bandwidth is None:
                bandwidth = self.cluster.link_bytes_per_s(link, item.group_size) * LINK_EFFICIENCY
                bandwidths[(link, item.group_size)] = bandwidth
            latency = COLLECTIVE_LATENCY_S[link]
            if item.collective == "pp_send":
                hop = latency + item.bytes_per_token / bandwidth
            else:
                collectives.append(
                    CollectiveCost(item.bytes_per_token / bandwidth, item.collectives_per_token * latency)
                )
        return LinkCosts(tuple(collectives), hop)

    def step(
        self,
        inputs: DecodeStepInputs,
        collectives: tuple[CollectiveCost, ...],
        batch: int,
        context_tokens: int | None = None,
    ) -> tuple[float, str]:
        """(seconds, bound) for one decode step of `batch` sequences on the busiest stage.

        With speculative decoding every sequence runs 1 + k query tokens through the model per step.
        `context_tokens` defaults to the plan's (--context-tokens); the serving roofline passes its workload's.
        """
        tokens_per_sequence = self.tokens_per_sequence
        context_tokens = self.context_tokens if context_tokens is None else context_tokens
        moe_tokens = batch * inputs.data_parallel * tokens_per_sequence
        touched = expected_distinct_experts(self.n_routed_experts, self.experts_per_token, moe_tokens)
        expert_bytes = touched * inputs.expert_bytes_per_expert_layer * inputs.moe_layers
        index_topk = self.index_topk
        attended = min(context_tokens, index_topk) if index_topk else context_tokens
        kv_bytes = (
            batch
            * inputs.attention_layers
            * (
                attended * self.kv_latent_bytes_per_token_per_layer
                + context_tokens * self.kv_indexer_bytes_per_token_per_layer
            )
        )
        memory_time = (inputs.non_expert_bytes + expert_bytes + kv_bytes) / self.memory_bytes_per_s
        flops = (
            batch * tokens_per_sequence * inputs.flops_per_token
            + moe_tokens * inputs.expert_flops_per_token / inputs.moe_ranks
        )
        compute_time = flops / self.flops_per_s if self.flops_per_s else 0.0
        comm_time = sum(
            batch * tokens_per_sequence * collective.seconds_per_token + collective.latency_s
            for collective in collectives
        )
        overhead = inputs.attention_layers * LAYER_STEP_OVERHEAD_S
        local = max(memory_time, compute_time)
        if overhead > max(local, comm_time):
            bound = "kernel-latency"
        elif comm_time > local:
            bound = "communication"
        elif compute_time > memory_time:
            bound = "compute"
        else:
            bound = "memory-bandwidth"
        return local + comm_time + overhead, bound

    def estimates(
        self,
        inputs: DecodeStepInputs,
        links: LinkCosts,
        *,
        batches: tuple[int, ...],
        pipeline_parallel: int,
        context_tokens: int | None = None,
    ) -> tuple[DecodeEstimate, ...]:
        """Replica tokens/s at each batch size (concurrent sequences), and the speed one request sees.

        `links` is what `links(traffic)` returns for the layout's traffic.
        """
        hop = links.pipeline_hop_s_per_token
        speculative_tokens = self.speculative_tokens
        out = []
        for requested in batches:
            batch = max(1, requested)
            micro = max(1, -(-batch // pipeline_parallel))
            step, bound = self.step(inputs, links.collectives, micro, context_tokens)
            stage_time = step + hop * micro * (1 + speculative_tokens)
            round_trip = pipeline_parallel * stage_time / self.accepted
            tokens_per_s = min(batch, pipeline_parallel * micro) / round_trip
            if pipeline_parallel > 1 and batch < pipeline_parallel:
                bound = "pipeline bubble"
            out.append(DecodeEstimate(tokens_per_s, 1.0 / round_trip, stage_time, bound, batch))
        return tuple(out)
