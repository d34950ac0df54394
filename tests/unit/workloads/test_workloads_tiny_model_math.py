"""The tiny DeepSeek's sharding math, checked in one process: the partial results of every tensor rank sum to
the unsharded result, expert routing is a proper top-k, and the seeded weights are the same everywhere."""

from __future__ import annotations

import torch
from meshdeck.workloads import tiny_deepseek_model as model


def partial_sum(fn, tensor_parallel: int) -> torch.Tensor:
    """Σ over tensor ranks of fn(Shard(rank)) — what the all-reduce in the TP group computes."""
    return sum(fn(model.Shard(tensor_parallel=tensor_parallel, tensor_rank=r)) for r in range(tensor_parallel))


def setup(seed: int = 3):
    cfg = model.TinyConfig()
    weights = model.make_weights(cfg, seed)
    x = torch.randn(2, 5, cfg.hidden_size, generator=torch.Generator().manual_seed(seed))
    return cfg, weights, x


def test_attention_split_by_heads_sums_to_the_whole() -> None:
    cfg, w, x = setup()
    whole = model.attention(x, w, "layers.1.", cfg, model.Shard())
    for tp in (2, 4):
        assert torch.allclose(partial_sum(lambda s: model.attention(x, w, "layers.1.", cfg, s), tp), whole, atol=1e-5)


def test_mlp_split_by_columns_sums_to_the_whole() -> None:
    cfg, w, x = setup()
    whole = model.swiglu(x, w, "layers.0.mlp")
    got = partial_sum(lambda s: model.swiglu(x, w, "layers.0.mlp", s.rows(cfg.dense_intermediate)), 2)
    assert torch.allclose(got, whole, atol=1e-5)


def test_routed_experts_split_by_columns_sum_to_the_whole() -> None:
    cfg, w, x = setup()
    tokens = x.reshape(-1, cfg.hidden_size)
    whole = model.routed_experts_tp(tokens, w, "layers.2.", cfg, model.Shard())
    got = partial_sum(lambda s: model.routed_experts_tp(tokens, w, "layers.2.", cfg, s), 2)
    assert torch.allclose(got, whole, atol=1e-5)
    assert whole.abs().sum() > 0


def test_a_wrong_shard_is_caught() -> None:
    """The comparison is sensitive: one rank using the other rank's heads breaks the sum."""
    cfg, w, x = setup()
    whole = model.attention(x, w, "layers.1.", cfg, model.Shard())
    wrong = model.attention(x, w, "layers.1.", cfg, model.Shard(tensor_parallel=2, tensor_rank=0)) * 2
    assert (wrong - whole).abs().max() > 1e-2


def test_router_picks_top_k_with_weights_that_sum_to_one() -> None:
    cfg, w, x = setup()
    weights, ids = model.route(x.reshape(-1, cfg.hidden_size), w["layers.2.router"], cfg.experts_per_token)
    assert ids.shape == (10, cfg.experts_per_token)
    assert torch.allclose(weights.sum(-1), torch.ones(10))
    assert all(len(set(row.tolist())) == cfg.experts_per_token for row in ids)


def test_weights_and_tokens_are_reproducible_from_the_seed() -> None:
    cfg = model.TinyConfig()
    a, b, c = model.make_weights(cfg, 0), model.make_weights(cfg, 0), model.make_weights(cfg, 1)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["embed"], c["embed"])
    assert set(a) == set(model.weight_shapes(cfg))
    assert torch.equal(model.make_tokens(cfg, 4, 8, 0), model.make_tokens(cfg, 4, 8, 0))


def test_reference_forward_is_causal() -> None:
    cfg = model.TinyConfig()
    w = model.make_weights(cfg, 0)
    tokens = model.make_tokens(cfg, 1, 8, 0)
    changed = tokens.clone()
    changed[0, -1] = (changed[0, -1] + 1) % cfg.vocab_size
    a, b = model.reference_forward(tokens, w, cfg), model.reference_forward(changed, w, cfg)
    assert torch.allclose(a[0, :-1], b[0, :-1], atol=1e-5)  # earlier positions never see later tokens
    assert (a[0, -1] - b[0, -1]).abs().max() > 1e-2
