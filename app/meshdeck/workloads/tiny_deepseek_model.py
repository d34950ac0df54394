"""A tiny DeepSeek-shaped model: MLA-style latent-KV attention, dense then MoE layers with one shared and
several routed experts behind a top-k router. Seeded weights, fp32, pure torch.

The same layer functions run unsharded (the single-process reference) and sharded (tiny_deepseek.py):
a `Shard` says which heads / MLP columns / experts this rank holds and how partial results meet
(all-reduce in the tensor-parallel group, all-to-all in the expert-parallel group). With the default
`Shard()` nothing is split and nothing is communicated.

Shapes follow DeepSeek V3 in miniature: q goes through a low-rank `q_a -> norm -> q_b`; keys and values
come from one cached latent `c_kv` (kv_lora_rank) plus a decoupled RoPE key shared by all heads; the
latent is computed whole on every tensor-parallel rank (vLLM does not shard MLA's cache), while q_b,
kv_b and o are split by heads.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

Tensor = torch.Tensor


@dataclass(frozen=True)
class TinyConfig:
    vocab_size: int = 512
    hidden_size: int = 64
    num_layers: int = 4
    first_dense_layers: int = 1
    num_heads: int = 4
    q_lora_rank: int = 32
    kv_lora_rank: int = 16
    qk_nope_head_dim: int = 16
    qk_rope_head_dim: int = 8
    v_head_dim: int = 16
    dense_intermediate: int = 128
    moe_intermediate: int = 32
    shared_intermediate: int = 64
    num_experts: int = 8
    experts_per_token: int = 2
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def weight_shapes(cfg: TinyConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter of the full (unsharded) model, in creation order."""
    h, qk = cfg.hidden_size, cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    shapes: dict[str, tuple[int, ...]] = {"embed": (cfg.vocab_size, h)}
    for layer in range(cfg.num_layers):
        p = f"layers.{layer}."
        shapes[p + "attn_norm"] = (h,)
        shapes[p + "q_a"] = (cfg.q_lora_rank, h)
        shapes[p + "q_a_norm"] = (cfg.q_lora_rank,)
        shapes[p + "q_b"] = (cfg.num_heads * qk, cfg.q_lora_rank)
        shapes[p + "kv_a"] = (cfg.kv_lora_rank + cfg.qk_rope_head_dim, h)
        shapes[p + "kv_norm"] = (cfg.kv_lora_rank,)
        shapes[p + "kv_b"] = (cfg.num_heads * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank)
        shapes[p + "o"] = (h, cfg.num_heads * cfg.v_head_dim)
        shapes[p + "mlp_norm"] = (h,)
        if layer < cfg.first_dense_layers:
            for name, inter in (("mlp", cfg.dense_intermediate),):
                shapes[p + name + ".gate"] = (inter, h)
                shapes[p + name + ".up"] = (inter, h)
                shapes[p + name + ".down"] = (h, inter)
        else:
            shapes[p + "router"] = (cfg.num_experts, h)
            for name, inter in [("shared", cfg.shared_intermediate)] + [
                (f"experts.{e}", cfg.moe_intermediate) for e in range(cfg.num_experts)
            ]:
                shapes[p + name + ".gate"] = (inter, h)
                shapes[p + name + ".up"] = (inter, h)
                shapes[p + name + ".down"] = (h, inter)
    shapes["final_norm"] = (h,)
    shapes["lm_head"] = (cfg.vocab_size, h)
    return shapes


def make_weights(cfg: TinyConfig, seed: int) -> dict[str, Tensor]:
    """Deterministic full weights: every rank (and the reference) builds the same ones from the seed."""
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for name, shape in weight_shapes(cfg).items():
        if len(shape) == 1:  # norm scales around 1, so they matter
            weights[name] = 1.0 + 0.1 * torch.randn(shape, generator=generator)
        else:
            weights[name] = torch.randn(shape, generator=generator) / math.sqrt(shape[1])
    return weights


def make_tokens(cfg: TinyConfig, batch: int, seq_len: int, seed: int) -> Tensor:
    generator = torch.Generator().manual_seed(seed + 1)
    return torch.randint(cfg.vocab_size, (batch, seq_len), generator=generator)


@dataclass
class Shard:
    """What this rank holds and how partial results are combined. Default: everything, no communication."""

    tensor_parallel: int = 1
    tensor_rank: int = 0
    expert_parallel: int = 1  # size of the expert-parallel group (1 = experts split by TP columns instead)
    expert_rank: int = 0
    all_reduce_tp: Callable[[Tensor], Tensor] = field(default=lambda t: t)
    all_gather_tp: Callable[[Tensor], Tensor] = field(default=lambda t: t)  # [n, ...] chunks -> cat on dim 0
    all_to_all_ep: Callable[[Tensor, list[int], list[int]], Tensor] | None = None

    def rows(self, total: int) -> slice:
        part = total // self.tensor_parallel
        return slice(self.tensor_rank * part, (self.tensor_rank + 1) * part)

    def local_experts(self, num_experts: int) -> range:
        per_rank = num_experts // self.expert_parallel
        return range(self.expert_rank * per_rank, (self.expert_rank + 1) * per_rank)


def rms_norm(x: Tensor, scale: Tensor, eps: float) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * scale


def rotary(x: Tensor, positions: Tensor, theta: float) -> Tensor:
    """RoPE on the last dim of x [..., S, (heads,) d] — interleaved pairs, as DeepSeek's rope dims use."""
    dim = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32, device=x.device) / dim))
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # [S, d/2]
    if x.dim() == 4:  # [B, S, heads, d]: the same angle for every head
        angles = angles[:, None, :]
    cos, sin = angles.cos(), angles.sin()
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def _head_rows(weight: Tensor, heads: int, shard: Shard) -> Tensor:
    """Rows of a [heads*d, in] projection belonging to this rank's heads."""
    per_head = weight.shape[0] // heads
    return weight.view(heads, per_head, -1)[shard.rows(heads)].reshape(-1, weight.shape[1])


def attention(x: Tensor, w: dict[str, Tensor], p: str, cfg: TinyConfig, shard: Shard) -> Tensor:
    batch, seq, _ = x.shape
    heads = cfg.num_heads // shard.tensor_parallel
    nope, rope, v_dim = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    positions = torch.arange(seq, device=x.device)
    q_latent = rms_norm(x @ w[p + "q_a"].T, w[p + "q_a_norm"], cfg.rms_eps)
    q = (q_latent @ _head_rows(w[p + "q_b"], cfg.num_heads, shard).T).view(batch, seq, heads, nope + rope)
    kv = x @ w[p + "kv_a"].T  # the cached part: latent + shared rope key, whole on every TP rank
    c_kv, k_rope = torch.split(kv, [cfg.kv_lora_rank, rope], dim=-1)
    c_kv = rms_norm(c_kv, w[p + "kv_norm"], cfg.rms_eps)
    kv_up = (c_kv @ _head_rows(w[p + "kv_b"], cfg.num_heads, shard).T).view(batch, seq, heads, nope + v_dim)
    k_nope, value = torch.split(kv_up, [nope, v_dim], dim=-1)
    q_nope, q_rope = torch.split(q, [nope, rope], dim=-1)
    q_rope = rotary(q_rope, positions, cfg.rope_theta)
    k_rope = rotary(k_rope, positions, cfg.rope_theta)[:, :, None, :].expand(batch, seq, heads, rope)
    query = torch.cat((q_nope, q_rope), dim=-1).transpose(1, 2)  # [B, heads, S, d]
    key = torch.cat((k_nope, k_rope), dim=-1).transpose(1, 2)
    scores = (query @ key.transpose(-1, -2)) / math.sqrt(nope + rope)
    causal = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
    scores = scores.masked_fill(causal, float("-inf"))
    out = (scores.softmax(-1) @ value.transpose(1, 2)).transpose(1, 2).reshape(batch, seq, heads * v_dim)
    o_cols = w[p + "o"].view(cfg.hidden_size, cfg.num_heads, v_dim)[:, shard.rows(cfg.num_heads)]
    return torch.matmul(out, o_cols.reshape(cfg.hidden_size, -1).T)  # partial over TP: caller all-reduces


def swiglu(x: Tensor, w: dict[str, Tensor], p: str, columns: slice | None = None) -> Tensor:
    gate, up, down = w[p + ".gate"], w[p + ".up"], w[p + ".down"]
    if columns is not None:
        gate, up, down = gate[columns], up[columns], down[:, columns]
    return (torch.nn.functional.silu(x @ gate.T) * (x @ up.T)) @ down.T


def route(tokens: Tensor, router: Tensor, top_k: int) -> tuple[Tensor, Tensor]:
    """(weights [T, k], expert ids [T, k]): softmax over experts, top-k, renormalised."""
    probs = (tokens @ router.T).softmax(-1)
    top_weights, top_ids = probs.topk(top_k, dim=-1)
    return top_weights / top_weights.sum(-1, keepdim=True), top_ids


def routed_experts_tp(tokens: Tensor, w: dict[str, Tensor], p: str, cfg: TinyConfig, shard: Shard) -> Tensor:
    """Every expert on every TP rank, split by intermediate columns; partial over TP."""
    weights, ids = route(tokens, w[p + "router"], cfg.experts_per_token)
    out = torch.zeros_like(tokens)
    columns = shard.rows(cfg.moe_intermediate)
    for expert in range(cfg.num_experts):
        token_idx, slot = (ids == expert).nonzero(as_tuple=True)
        if token_idx.numel():
            expert_out = swiglu(tokens[token_idx], w, f"{p}experts.{expert}", columns)
            out.index_add_(0, token_idx, expert_out * weights[token_idx, slot, None])
    return out


def routed_experts_ep(tokens: Tensor, w: dict[str, Tensor], p: str, cfg: TinyConfig, shard: Shard) -> Tensor:
    """Whole experts spread over the EP group; tokens travel to their experts and back by all-to-all."""
    assert shard.all_to_all_ep is not None
    weights, ids = route(tokens, w[p + "router"], cfg.experts_per_token)
    per_rank = cfg.num_experts // shard.expert_parallel
    flat_ids = ids.reshape(-1)
    token_of = torch.arange(tokens.shape[0], device=tokens.device).repeat_interleave(cfg.experts_per_token)
    order = torch.argsort(flat_ids // per_rank, stable=True)
    dest = (flat_ids // per_rank)[order]
    send_counts = torch.bincount(dest, minlength=shard.expert_parallel)
    counts = shard.all_to_all_ep(
        send_counts.to(torch.float32), [1] * shard.expert_parallel, [1] * shard.expert_parallel
    )
    send_split = send_counts.tolist()
    recv_split = [int(c) for c in counts.tolist()]
    # one message per row: the hidden state plus its expert id (local to the receiver) in the last column
    payload = torch.cat((tokens[token_of[order]], (flat_ids[order] % per_rank).to(tokens.dtype)[:, None]), dim=1)
    received = shard.all_to_all_ep(payload, recv_split, send_split)
    hidden, local_ids = received[:, :-1], received[:, -1].round().to(torch.long)
    processed = torch.zeros_like(hidden)
    for local in range(per_rank):
        rows = (local_ids == local).nonzero(as_tuple=True)[0]
        if rows.numel():
            expert = shard.expert_rank * per_rank + local
            processed[rows] = swiglu(hidden[rows], w, f"{p}experts.{expert}")
    returned = shard.all_to_all_ep(processed, send_split, recv_split)
    out = torch.zeros_like(tokens)
    out.index_add_(0, token_of[order], returned * weights.reshape(-1)[order, None])
    return out


def moe(x: Tensor, w: dict[str, Tensor], p: str, cfg: TinyConfig, shard: Shard) -> Tensor:
    """Shared expert (TP columns) + routed experts; returns the full (already reduced) MoE output."""
    batch, seq, hidden = x.shape
    tokens = x.reshape(-1, hidden)
    shared = swiglu(tokens, w, p + "shared", shard.rows(cfg.shared_intermediate))
    if shard.expert_parallel == 1:
        return shard.all_reduce_tp(shared + routed_experts_tp(tokens, w, p, cfg, shard)).view(batch, seq, hidden)
    # EP: each TP rank sends only its share of the tokens (they are replicated over TP), then the
    # shares are gathered back.
    total = tokens.shape[0]
    chunk = -(-total // shard.tensor_parallel)
    padded = torch.cat((tokens, tokens.new_zeros(chunk * shard.tensor_parallel - total, hidden)))
    mine = padded[shard.tensor_rank * chunk : (shard.tensor_rank + 1) * chunk]
    routed = shard.all_gather_tp(routed_experts_ep(mine, w, p, cfg, shard))[:total]
    return (shard.all_reduce_tp(shared) + routed).view(batch, seq, hidden)


def layer(x: Tensor, w: dict[str, Tensor], index: int, cfg: TinyConfig, shard: Shard) -> Tensor:
    p = f"layers.{index}."
    x = x + shard.all_reduce_tp(attention(rms_norm(x, w[p + "attn_norm"], cfg.rms_eps), w, p, cfg, shard))
    normed = rms_norm(x, w[p + "mlp_norm"], cfg.rms_eps)
    if index < cfg.first_dense_layers:
        return x + shard.all_reduce_tp(swiglu(normed, w, p + "mlp", shard.rows(cfg.dense_intermediate)))
    return x + moe(normed, w, p, cfg, shard)


def embed(tokens: Tensor, w: dict[str, Tensor]) -> Tensor:
    return w["embed"][tokens]


def head(x: Tensor, w: dict[str, Tensor], cfg: TinyConfig) -> Tensor:
    return rms_norm(x, w["final_norm"], cfg.rms_eps) @ w["lm_head"].T


def reference_forward(tokens: Tensor, w: dict[str, Tensor], cfg: TinyConfig) -> Tensor:
    """The single-process run: every layer unsharded, no communication. Logits [B, S, vocab]."""
    x = embed(tokens, w)
    for index in range(cfg.num_layers):
        x = layer(x, w, index, cfg, Shard())
    return head(x, w, cfg)
