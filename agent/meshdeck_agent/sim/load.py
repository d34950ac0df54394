"""The synthetic request load behind the simulated vLLM stand-in, exported under vLLM's metric names.

Per engine (one per data-parallel rank): requests arrive as a Poisson process whose rate swings slowly
(±50 % over 5 minutes) around `request_rate`; prompts and outputs have log-normal lengths; a request is
admitted while fewer than max_num_seqs run and its prompt fits the free KV cache, prefills at
PREFILL_TOKENS_PER_S, then decodes one token per inter-token latency, which grows with the batch. When
the KV cache fills, the newest request is preempted back to the queue, as vLLM's scheduler does.
Deterministic for a seed and a sequence of `step` calls.

Exported (labels model_name, engine — and finished_reason on request_success), with vLLM's buckets:
vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc, vllm:prompt_tokens,
vllm:generation_tokens, vllm:prefix_cache_queries, vllm:prefix_cache_hits, vllm:num_preemptions,
vllm:request_success, vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds,
vllm:e2e_request_latency_seconds, vllm:request_queue_time_seconds, vllm:cache_config_info.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Dict, List

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFILL_TOKENS_PER_S = 20000.0
BASE_ITL_S = 0.022
# vLLM's own buckets (vllm/v1/metrics/loggers.py)
# fmt: off
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                   480.0, 960.0, 1920.0, 7680.0]
# fmt: on


@dataclass
class _Request:
    prompt: int
    target: int
    arrived: float
    admitted: float = -1.0
    first_token: float = -1.0
    generated: float = 0.0
    cached: int = 0


class ExportedMetrics:
    """vLLM's Prometheus metrics for a set of engines, in a registry of their own."""

    def __init__(self, model_name: str, engines: List[str], cache_info: Dict[str, str]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["model_name", "engine"]
        r = self.registry
        self.running = Gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", labels, registry=r
        )
        self.waiting = Gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels, registry=r
        )
        self.kv_usage = Gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels, registry=r
        )
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=r)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", labels, registry=r
        )
        self.prefix_queries = Counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            labels,
            registry=r,
        )
        self.prefix_hits = Counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", labels, registry=r
        )
        self.preemptions = Counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels, registry=r
        )
        self.success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=r,
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels,
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            labels,
            buckets=ITL_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue = Histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            [*sorted(cache_info), "engine"],
            registry=r,
        )
        for engine in engines:
            info.labels(**dict(cache_info, engine=engine)).set(1)
        self.model_name = model_name


class EngineLoad:
    """One engine's scheduler, stepping in simulated time."""

    def __init__(
        self,
        engine: str,
        metrics: ExportedMetrics,
        kv_tokens: int,
        max_model_len: int,
        request_rate: float,
        seed: int,
        max_num_seqs: int = 256,
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        self.kv_tokens = max(1, kv_tokens)
        self.max_model_len = max_model_len
        self.request_rate = request_rate
        self.max_num_seqs = max_num_seqs
        self.rng = random.Random(seed)
        self.waiting: List[_Request] = []
        self.running: List[_Request] = []
        self.kv_used = 0.0
        labels = (metrics.model_name, engine)
        self._labels = labels
        self.metrics.running.labels(*labels).set(0)
        self.metrics.waiting.labels(*labels).set(0)
        self.metrics.kv_usage.labels(*labels).set(0)
        # vLLM creates every per-engine series up front, so they are exported (as 0) before any request
        for family in (
            metrics.prompt_tokens,
            metrics.generation_tokens,
            metrics.prefix_queries,
            metrics.prefix_hits,
            metrics.preemptions,
            metrics.ttft,
            metrics.itl,
            metrics.e2e,
            metrics.queue,
        ):
            family.labels(*labels)
        for reason in ("stop", "length", "abort"):
            metrics.success.labels(*labels, reason)

    def _lengths(self) -> _Request:
        prompt = int(min(self.max_model_len * 0.75, max(16, self.rng.lognormvariate(math.log(1200), 0.8))))
        target = int(min(self.max_model_len - prompt, max(8, self.rng.lognormvariate(math.log(300), 0.7))))
        return _Request(prompt=prompt, target=max(1, target), arrived=0.0)

    def step(self, now: float, dt: float) -> None:
        m = self.metrics
        labels = self._labels
        rate = self.request_rate * (1.0 + 0.5 * math.sin(2 * math.pi * now / 300.0))
        arrivals = self._poisson(max(0.0, rate) * dt)
        for _ in range(arrivals):
            request = self._lengths()
            request.arrived = now
            self.waiting.append(request)
        while self.waiting and len(self.running) < self.max_num_seqs:
            request = self.waiting[0]
            if self.kv_used + request.prompt > self.kv_tokens:
                break
            self.waiting.pop(0)
            request.admitted = now
            request.cached = int(request.prompt * self.rng.uniform(0.1, 0.6))
            request.first_token = now + (request.prompt - request.cached) / PREFILL_TOKENS_PER_S
            self.kv_used += request.prompt
            self.running.append(request)
            m.queue.labels(*labels).observe(now - request.arrived)
            m.prompt_tokens.labels(*labels).inc(request.prompt)
            m.prefix_queries.labels(*labels).inc(request.prompt)
            m.prefix_hits.labels(*labels).inc(request.cached)
        itl = BASE_ITL_S * (1.0 + len(self.running) / 96.0)
        finished: List[_Request] = []
        generated_total = 0
        for request in self.running:
            if now < request.first_token:
                continue
            if request.generated == 0:
                m.ttft.labels(*labels).observe(request.first_token - request.arrived)
            before = int(request.generated)
            request.generated = min(float(request.target), request.generated + dt / itl)
            new_tokens = int(request.generated) - before
            if new_tokens:
                generated_total += new_tokens
                self.kv_used += new_tokens
                m.itl.labels(*labels).observe(itl * (1.0 + self.rng.gauss(0, 0.05)))
            if request.generated >= request.target:
                finished.append(request)
        if generated_total:
            m.generation_tokens.labels(*labels).inc(generated_total)
        for request in finished:
            self.running.remove(request)
            self.kv_used -= request.prompt + int(request.generated)
            reason = "length" if request.target >= self.max_model_len - request.prompt else "stop"
            m.success.labels(*labels, reason).inc()
            m.e2e.labels(*labels).observe(now - request.arrived)
        while self.kv_used > self.kv_tokens and self.running:
            victim = self.running.pop()  # the newest request gives its blocks back
            self.kv_used -= victim.prompt + int(victim.generated)
            victim.generated, victim.first_token = 0.0, -1.0
            self.waiting.insert(0, victim)
            m.preemptions.labels(*labels).inc()
        self.kv_used = max(0.0, self.kv_used)
        m.running.labels(*labels).set(len(self.running))
        m.waiting.labels(*labels).set(len(self.waiting))
        m.kv_usage.labels(*labels).set(min(1.0, self.kv_used / self.kv_tokens))

    def _poisson(self, mean: float) -> int:
        if mean <= 0:
            return 0
        limit, k, p = math.exp(-mean), 0, 1.0
        while True:
            p *= self.rng.random()
            if p <= limit:
                return k
            k += 1
