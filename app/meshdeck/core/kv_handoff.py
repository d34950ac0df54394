"""Whether a disaggregated deployment's KV handoff is happening, from a decode engine's own counters.

A decode engine should compute almost none of a prompt: the prefill engine computed it and the KV connector
moved its cache over. vLLM counts every prompt token by where its KV came from
(`vllm:prompt_tokens_by_source_total`: local_compute, local_cache_hit, external_kv_transfer). A decode engine
may compute at most a request's last partial KV block itself; when it computes more than that for its
requests, the handoff is not happening (the router dropped `kv_transfer_params` — production-stack #913 / #747
— or the transfer failed and vLLM fell back to recomputing): every prompt is computed twice, and decode's
latency and capacity are what a plan without disaggregation would have had. Failed transfers are counted by
the connector (`vllm:nixl_num_failed_transfers_total`).
"""

from __future__ import annotations

from dataclasses import dataclass

# The largest KV block DeepSeek's MLA backends use (FlashMLA's 64 tokens; vLLM's default elsewhere is 16): a
# request's last partial block, at most this many tokens, may be computed by decode.
BLOCK_ALLOWANCE_TOKENS = 64


@dataclass(frozen=True)
class DecodeCounters:
    """One decode engine's lifetime counters, as its agent last scraped them."""

    computed: float  # prompt tokens it computed itself
    transferred: float  # prompt tokens whose KV came over the connector
    requests: float  # requests it finished, runs and holds waiting
    failed_transfers: float = 0.0


def handoff_alarm(part: str, counters: DecodeCounters) -> str | None:
    """The alarm when `part` (a decode engine) computes prompt tokens beyond its requests' last partial blocks."""
    allowance = BLOCK_ALLOWANCE_TOKENS * max(1.0, counters.requests)
    if counters.computed <= allowance:
        return None
    return (
        f"{part} computed {counters.computed:,.0f} prompt tokens itself ({counters.transferred:,.0f} came over the "
        f"KV connector) for {counters.requests:,.0f} request(s), beyond their last partial blocks "
        f"({BLOCK_ALLOWANCE_TOKENS} tokens each): the KV handoff is not happening — check that the router "
        "passes kv_transfer_params and the connector's lines in the engines' logs"
    )


def transfer_failure_alarm(part: str, counters: DecodeCounters) -> str | None:
    """The alarm when the connector of `part` counted failed KV transfers (handshake or transfer)."""
    if counters.failed_transfers <= 0:
        return None
    return (
        f"{part}: {counters.failed_transfers:,.0f} KV transfer(s) failed (NIXL handshake or transfer: the requests "
        "waiting on them failed, or were recomputed on decode under kv_load_failure_policy recompute) — see the "
        "connector's lines in its log"
    )
