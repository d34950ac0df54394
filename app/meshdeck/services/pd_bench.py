"""`meshdeck bench vllm --local --disaggregated`: a real prefill/decode-disaggregated vLLM on this machine.

One prefill engine and one decode engine of vLLM's CPU build (the tiny DeepSeek-V3-shaped model, dummy
weights), each on its own local agent, NixlConnector moving the prompt's KV from prefill's host-memory buffer to
decode's over UCX (TCP here), vLLM's router in front — launched from the disaggregated profile by the same
pre-flight, ordered start and readiness as any deployment (services.vllm_bench.LocalVllmDeployment). Then:

- one warm-up completion through the router (NIXL's first handshake; services.vllm_bench.LocalVllmDeployment.
  warm_up says why, and the failures it took are reported), then N greedy completions through the router;
- whether the KV handoff happened, from the engines' own counters: the decode engine's
  `vllm:prompt_tokens_by_source_total{source="local_compute"}` (prompt tokens it computed itself: 0 when
  every prompt's KV came over; at most the last partial block each if not) and `external_kv_transfer`, and
  `vllm:nixl_bytes_transferred_sum`;
- whether the answers equal an aggregated engine's: the same prompts sent straight to the decode engine
  (without the router's kv_transfer_params it computes every prompt itself — an ordinary aggregated engine
  with the same seeded dummy weights), compared token for token;
- the metric rows the agents stored, the stop (router, decode, prefill) and every process left in the
  workers' sessions after it.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from meshdeck.services.completion_load import LoadResult, send_completions
from meshdeck.services.deployments.model import LaunchProgress
from meshdeck.services.session_processes import left_after
from meshdeck.services.vllm_bench import LocalVllmDeployment, VllmBenchResult

MAX_TOKENS = 16
METRICS_READ_BYTES = 4 << 20
PROMPT_SOURCE = "vllm:prompt_tokens_by_source"
NIXL_BYTES = "vllm:nixl_bytes_transferred"
PD_METRICS = ("kv_cache_usage_perc", "num_requests_running", "generation_tokens_total", "prompt_tokens_total",
              "prompt_tokens_computed_total", "prompt_tokens_transferred_total", "kv_transfer_bytes_total")  # fmt: skip


@dataclass(frozen=True)
class EngineCounters:
    """An engine's prompt tokens by where their KV came from, and the bytes NIXL moved, summed over engines."""

    computed: float = 0.0
    cached: float = 0.0
    transferred: float = 0.0
    nixl_bytes: float = 0.0
    generated: float = 0.0

    def minus(self, older: EngineCounters) -> EngineCounters:
        return EngineCounters(
            self.computed - older.computed,
            self.cached - older.cached,
            self.transferred - older.transferred,
            self.nixl_bytes - older.nixl_bytes,
            self.generated - older.generated,
        )


def parse_engine_counters(text: str) -> EngineCounters:
    """The counters from a vLLM /metrics page (vLLM's own names; see the module doc)."""
    sources = {"local_compute": 0.0, "local_cache_hit": 0.0, "external_kv_transfer": 0.0}
    nixl = generated = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{PROMPT_SOURCE}_total" and sample.labels.get("source") in sources:
                sources[sample.labels["source"]] += sample.value
            elif sample.name == f"{NIXL_BYTES}_sum":
                nixl += sample.value
            elif sample.name == "vllm:generation_tokens_total":
                generated += sample.value
    return EngineCounters(
        sources["local_compute"], sources["local_cache_hit"], sources["external_kv_transfer"], nixl, generated
    )


def engine_counters(port: int) -> EngineCounters:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
        return parse_engine_counters(reply.read(METRICS_READ_BYTES).decode("utf-8", "replace"))


def outputs_match(routed: LoadResult, direct: LoadResult, requests: int) -> tuple[bool | None, str | None]:
    """Whether every routed answer equals the aggregated engine's, or None and why it cannot be told."""
    if len(routed.texts) < requests or len(direct.texts) < requests:
        return None, f"answers missing: {len(routed.texts)} routed, {len(direct.texts)} aggregated of {requests}"
    return routed.texts == direct.texts, None


def run_disaggregated_bench(
    executable: str,
    *,
    requests: int = 16,
    concurrency: int = 4,
    progress: Callable[[LaunchProgress], None] | None = None,
) -> VllmBenchResult:
    """Launch, load, check the handoff and the answers, stop, count leftovers (the CLI contract's keys)."""
    with LocalVllmDeployment(executable, disaggregated=True) as run:
        pools = run.profile.disaggregated
        assert pools is not None and pools.prefill.port is not None and pools.decode.port is not None
        run.require_preflight()
        run.launch(progress)
        sessions = run.worker_pids()
        warm_up_errors = run.warm_up()
        before = engine_counters(pools.decode.port)
        load = run.send_load(requests, concurrency=concurrency, max_tokens=MAX_TOKENS, keep_texts=True)
        after = engine_counters(pools.decode.port)
        handoff = after.minus(before)
        stored_in_time = run.wait_stored(load, generated=after.generated)
        direct = send_completions(
            f"http://127.0.0.1:{pools.decode.port}/v1", run.profile.model, requests=requests,
            concurrency=concurrency, max_tokens=MAX_TOKENS, keep_texts=True,
        )  # fmt: skip
        match, why = outputs_match(load, direct, requests)
        document: dict[str, Any] = {
            "prefill_engines": pools.prefill.workers,
            "decode_engines": pools.decode.workers,
            "router": pools.router.executable.rsplit("/", 1)[-1],
            "ready_s": round(run.ready_s or 0.0, 2),
            "requests_ok": load.ok,
            "requests_failed": load.failed,
            "kv_connector": pools.kv_connector.name,
            "kv_transfer_observed": handoff.transferred > 0 and handoff.nixl_bytes > 0,
            "decode_prompt_tokens_computed": int(handoff.computed),
            "prompt_tokens_sent": load.prompt_tokens,
            "outputs_match_aggregated": match,
            "metric_rows_stored": run.stored_rows(PD_METRICS),
            "leftover_processes": 0,
        }
        if why is not None:
            document["outputs_match_reason"] = why
        details: dict[str, Any] = {
            "deployment": run.deployment_id,
            "decode_prompt_tokens_transferred": int(handoff.transferred),
            "kv_bytes_transferred": int(handoff.nixl_bytes),
            "aggregated_requests_ok": direct.ok,
            "warm_up_failures": warm_up_errors,
            "stored_in_time": stored_in_time,
            "load_errors": (load.errors + direct.errors)[:3],
        }
        final = run.stop()
        details["stopped"] = final.state
        keepers = run.keeper_pids()
    left = left_after(sessions, keepers=keepers)
    document["leftover_processes"] = len(left)
    details["leftover_commands"] = left
    return VllmBenchResult(document, details, final, load)
