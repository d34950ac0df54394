"""Bytes each GPU sends per generated token, per collective, and which link class carries them.

Decode of one token through one replica (vLLM's communication pattern for DeepseekV2):
- TP all-reduce: after o_proj and after the MLP/MoE of every layer (2 per layer), BF16 hidden
  vector; a ring all-reduce sends 2·(TP−1)/TP of the buffer from each rank.
- MoE across DP ranks (data_parallel > 1, with or without expert parallel): vLLM's default
  all2all backend (allgather_reducescatter) gathers every DP rank's tokens before the experts and
  reduce-scatters the outputs: (DP−1) hidden vectors out and back per token per MoE layer.
- PP: the stage boundary sends hidden_states and residual (2 BF16 hidden vectors) per token.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshdeck.core.cluster import LinkClass
from meshdeck.core.model_card import ModelCard

BF16 = 2


@dataclass(frozen=True)
class TrafficItem:
    collective: str  # tp_all_reduce | moe_dispatch_combine | pp_send
    bytes_per_token: float  # sent by one GPU of the group, per generated token
    collectives_per_token: int  # separate collective calls (latency count) per token step
    link: LinkClass
    group_size: int = 0  # GPUs in the collective (0: not known); Infinity Fabric's bandwidth depends on it

    def as_dict(self) -> dict[str, object]:
        return {
            "collective": self.collective,
            "bytes_per_token": round(self.bytes_per_token),
            "calls_per_token": self.collectives_per_token,
            "link": self.link.value,
        }


def decode_traffic(
    card: ModelCard,
    *,
    tensor_parallel: int,
    data_parallel: int,
    pipeline_parallel: int,
    stage_layers: int,
    stage_moe_layers: int,
    tensor_link: LinkClass,
    expert_link: LinkClass,
    pipeline_link: LinkClass,
) -> tuple[TrafficItem, ...]:
    """Per-GPU traffic for one token through the busiest stage."""
    hidden = card.hidden_size * BF16
    items: list[TrafficItem] = []
    if tensor_parallel > 1:
        per_reduce = 2 * (tensor_parallel - 1) / tensor_parallel * hidden
        items.append(
            TrafficItem("tp_all_reduce", 2 * stage_layers * per_reduce, 2 * stage_layers, tensor_link, tensor_parallel)
        )
    if data_parallel > 1 and stage_moe_layers:
        per_layer = 2 * (data_parallel - 1) * hidden
        items.append(
            TrafficItem(
                "moe_dispatch_combine",
                stage_moe_layers * per_layer,
                2 * stage_moe_layers,
                expert_link,
                data_parallel * tensor_parallel,
            )
        )
    if pipeline_parallel > 1:
        items.append(TrafficItem("pp_send", 2 * hidden, 1, pipeline_link, 2))
    return tuple(items)


def traffic_by_link(items: tuple[TrafficItem, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        out[item.link.value] = out.get(item.link.value, 0.0) + item.bytes_per_token
    return out
