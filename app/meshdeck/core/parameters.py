"""Parameter counts of a DeepSeek-V3-architecture model straight from its config.

DeepSeek quotes 671B for V3 (the main model) and 685B for the checkpoint, which adds the MTP
module: one more MoE decoder layer plus its own copies of the embedding and output head and the
eh_proj that joins them. Active parameters per token count the attention, dense MLPs, shared
experts, router and the top-k routed experts of every layer (DeepSeek's "37B activated").
"""

from __future__ import annotations

from dataclasses import dataclass

from meshdeck.core.model_card import ModelCard
from meshdeck.core.v4_weights import parameter_counts as v4_parameter_counts


@dataclass(frozen=True)
class ParameterCounts:
    embedding: int
    lm_head: int
    attention: int  # MLA projections and their norms, all layers
    indexer: int  # V3.2 lightning indexer, all layers
    dense_mlp: int
    shared_experts: int
    router: int
    routed_experts: int
    norms: int  # layer norms and the final norm
    mtp: int  # the MTP module(s) as stored in the checkpoint
    active_per_token: int
    hyper_connections: int = 0  # DeepSeek-V4's hc_* mixing parameters

    @property
    def main_model(self) -> int:
        return (
            self.embedding
            + self.lm_head
            + self.attention
            + self.indexer
            + self.dense_mlp
            + self.shared_experts
            + self.router
            + self.routed_experts
            + self.norms
            + self.hyper_connections
        )

    @property
    def checkpoint_total(self) -> int:
        return self.main_model + self.mtp

    def as_dict(self) -> dict[str, int]:
        return {
            "main_model": self.main_model,
            "mtp": self.mtp,
            "checkpoint_total": self.checkpoint_total,
            "active_per_token": self.active_per_token,
            "embedding": self.embedding,
            "lm_head": self.lm_head,
            "attention": self.attention,
            "indexer": self.indexer,
            "dense_mlp": self.dense_mlp,
            "shared_experts": self.shared_experts,
            "router": self.router,
            "routed_experts": self.routed_experts,
            "norms": self.norms,
            **({"hyper_connections": self.hyper_connections} if self.hyper_connections else {}),
        }


def _attention_per_layer(card: ModelCard) -> int:
    h, heads = card.hidden_size, card.num_attention_heads
    q = (
        (card.q_lora_rank * h + heads * card.qk_head_dim * card.q_lora_rank + card.q_lora_rank)
        if card.q_lora_rank
        else heads * card.qk_head_dim * h
    )
    kv = card.mla_latent_dim * h + heads * (card.qk_nope_head_dim + card.v_head_dim) * card.kv_lora_rank
    return q + kv + card.kv_lora_rank + heads * card.v_head_dim * h


def _indexer_per_layer(card: ModelCard) -> int:
    if not card.has_sparse_indexer or not card.q_lora_rank:
        return 0
    q = card.index_n_heads * card.index_head_dim * card.q_lora_rank
    return q + card.index_head_dim * card.hidden_size + card.index_n_heads * card.hidden_size + 2 * card.index_head_dim


def parameter_counts(card: ModelCard) -> ParameterCounts:
    if card.is_v4:
        return _v4_counts(card)
    h = card.hidden_size
    moe_layers, dense_layers = card.moe_layer_count, card.dense_layer_count
    layers = card.num_hidden_layers
    expert = 3 * h * card.moe_intermediate_size
    attention_layer = _attention_per_layer(card)
    indexer_layer = _indexer_per_layer(card)
    shared_layer = card.n_shared_experts * expert
    router_layer = card.n_routed_experts * h + card.n_routed_experts
    dense_layer = 3 * h * card.intermediate_size
    table = card.vocab_size * h
    moe_layer_total = (
        attention_layer + indexer_layer + shared_layer + router_layer + card.n_routed_experts * expert + 2 * h
    )
    mtp_each = moe_layer_total + 2 * h * h + 3 * h + 2 * table  # eh_proj, enorm/hnorm/head norm, embed + head copies
    active = (
        table  # one embedding row is read, but the output head is used whole
        + layers * (attention_layer + indexer_layer + 2 * h)
        + dense_layers * dense_layer
        + moe_layers * (shared_layer + router_layer + card.num_experts_per_tok * expert)
    )
    return ParameterCounts(
        embedding=table,
        lm_head=0 if card.tie_word_embeddings else table,
        attention=layers * attention_layer,
        indexer=layers * indexer_layer,
        dense_mlp=dense_layers * dense_layer,
        shared_experts=moe_layers * shared_layer,
        router=moe_layers * router_layer,
        routed_experts=moe_layers * card.n_routed_experts * expert,
        norms=layers * 2 * h + h,
        mtp=card.num_nextn_predict_layers * mtp_each,
        active_per_token=active,
    )


def _v4_counts(card: ModelCard) -> ParameterCounts:
    """DeepSeek-V4's counts (core.v4_weights, as vLLM's BF16 model holds them) in the planner's fields: the
    compressors and the indexer under `indexer`, the hash tables with the router."""
    counts = v4_parameter_counts(card)
    parts = dict(counts.components)
    return ParameterCounts(
        embedding=parts.get("embedding", 0),
        lm_head=parts.get("lm_head", 0),
        attention=parts.get("attention", 0),
        indexer=parts.get("compressor_indexer", 0),
        dense_mlp=0,
        shared_experts=parts.get("shared_expert", 0),
        router=parts.get("gate", 0),
        routed_experts=parts.get("routed_experts", 0),
        norms=parts.get("norms", 0),
        mtp=counts.mtp,
        active_per_token=counts.active_per_token,
        hyper_connections=parts.get("hyper_connections", 0),
    )
