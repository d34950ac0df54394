"""The roofline speed model: TTFT and TPOT from bandwidth and FLOP bounds, where no measured kernels reach.

It answers the same `SpeedQuery` as the kernel tables (serving.py) from what the planner already knows of
a layout's busiest pipeline stage (`RooflineInputs`, built by the evaluator):
- decode: the decode step of `throughput.DecodeModel` (weights, touched experts and KV read from HBM,
  FLOPs, collectives, a per-layer kernel floor) at a context of isl + osl/2, MTP acceptance applied;
- prefill: every prompt token's FLOPs (dense share, its share of the routed experts, causal attention over
  the prompt) at the tensor cores' achievable rate, the weights read once per chunk of `chunk_tokens`, the
  collectives' bytes per token; pipeline stages fill before they overlap;
- aggregated (continuous batching with chunked prefill): each decode step also carries prefill chunks; over
  one request's life every one of the b requests of the replica is prefilled once, so TPOT pays b × isl
  prefill tokens spread over osl steps, and TTFT is the prompt's chunks riding on decode steps.
Every number it gives is labelled "roofline" wherever it is shown: it is an estimate, not a measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from meshdeck.core.model_card import ModelCard
from meshdeck.core.serving import SOURCE_ROOFLINE, SpeedQuery, SpeedSource, StepTimes
from meshdeck.core.throughput import DecodeModel, DecodeStepInputs, LinkCosts


@dataclass(frozen=True)
class RooflineInputs:
    """What the roofline needs of one layout: its busiest stage's step inputs and what its links cost."""

    step: DecodeStepInputs
    links: LinkCosts
    pipeline_parallel: int


class RooflineSpeed:
    """The roofline `SpeedModel` of one plan (one model card, cluster and MTP setting)."""

    def __init__(self, decode: DecodeModel, card: ModelCard, reason: str = "") -> None:
        self.decode = decode
        self.card = card
        self._source = SpeedSource(SOURCE_ROOFLINE, "roofline", reason)

    @property
    def source(self) -> SpeedSource:
        return self._source

    def with_reason(self, reason: str) -> RooflineSpeed:
        """The same model, saying why it stands in."""
        return RooflineSpeed(self.decode, self.card, reason)

    def _attention_flops_per_token(self, tensor_parallel: int, attention_layers: int, context: float) -> float:
        """Causal attention of one prompt token over `context` earlier tokens, on one GPU (MLA's prefill form)."""
        card = self.card
        heads = card.num_attention_heads / tensor_parallel
        attended = min(context, card.index_topk) if card.index_topk else context
        per_layer = 2 * heads * (card.qk_nope_head_dim + card.qk_rope_head_dim + card.v_head_dim) * attended
        indexer = 2 * card.index_n_heads * card.index_head_dim * context if card.index_topk else 0.0
        return attention_layers * (per_layer + indexer)

    def _prefill_token_seconds(self, inputs: RooflineInputs, tensor_parallel: int, prompt_tokens: int) -> float:
        """Compute and collective time of one prompt token on the busiest stage (weights read aside)."""
        step = inputs.step
        flops = (
            step.flops_per_token
            + step.data_parallel * step.expert_flops_per_token / step.moe_ranks
            + self._attention_flops_per_token(tensor_parallel, step.attention_layers, prompt_tokens / 2)
        )
        compute = flops / self.decode.flops_per_s
        communication = sum(collective.seconds_per_token for collective in inputs.links.collectives)
        return compute + communication + inputs.links.pipeline_hop_s_per_token

    def _weights_seconds(self, inputs: RooflineInputs) -> float:
        """One pass over the stage's weights (a prefill chunk touches every expert)."""
        step = inputs.step
        every_expert = step.expert_bytes_per_expert_layer * self.decode.n_routed_experts * step.moe_layers
        return (step.non_expert_bytes + every_expert) / self.decode.memory_bytes_per_s

    def _decode_tpot_s(self, inputs: RooflineInputs, batch: int, context: int) -> float:
        (estimate,) = self.decode.estimates(
            inputs.step,
            inputs.links,
            batches=(batch,),
            pipeline_parallel=inputs.pipeline_parallel,
            context_tokens=context,
        )
        return 1.0 / estimate.tokens_per_s_per_request

    def times(self, query: SpeedQuery) -> StepTimes | None:
        inputs = query.roofline
        if not isinstance(inputs, RooflineInputs) or not self.decode.flops_per_s:
            return None
        tensor_parallel = query.shape.tensor_parallel
        isl, osl, batch = query.input_tokens, query.output_tokens, max(1, query.batch_per_rank)
        chunk = max(1, query.chunk_tokens)
        per_token = self._prefill_token_seconds(inputs, tensor_parallel, isl)
        if query.role == "prefill":
            tokens = batch * isl
            chunks = math.ceil(tokens / chunk)
            chunk_time = max(min(tokens, chunk) * per_token, self._weights_seconds(inputs))
            stages = inputs.pipeline_parallel
            ttft = (chunks + stages - 1) * chunk_time
            return StepTimes(ttft * 1000.0, 0.0)
        tpot = self._decode_tpot_s(inputs, batch, isl + osl // 2)
        if query.role == "decode":
            return StepTimes(0.0, tpot * 1000.0)
        # aggregated: the replica's b prompts are prefilled once per request lifetime, riding on decode steps
        amortized_prefill = batch * isl * per_token / osl
        step_time = tpot * self.decode.accepted  # one engine step (MTP: it emits `accepted` tokens)
        ttft = math.ceil(isl / chunk) * step_time + isl * per_token
        return StepTimes(ttft * 1000.0, (tpot + amortized_prefill) * 1000.0)
