"""Scraping a vLLM server's Prometheus `/metrics` into per-engine numbers for SAMPLE.workers.

Parsing is prometheus_client's own text parser (`text_string_to_metric_families`, vendored into the
zipapp); samples are matched by sample name, so typed and untyped exposition (excerpts without
`# TYPE`) read the same. Old and new vLLM names are both understood, the new one winning when a
server exports both:

    vllm:kv_cache_usage_perc            (vllm:gpu_cache_usage_perc before 0.10)
    vllm:num_requests_running / _waiting
    vllm:prompt_tokens_total, vllm:generation_tokens_total          -> totals and tokens/s
    vllm:prefix_cache_hits_total / _queries_total (vllm:gpu_prefix_cache_*)  -> hit rate
    vllm:num_preemptions_total, vllm:request_success_total
    vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds
      (vllm:time_per_output_token_seconds before), vllm:e2e_request_latency_seconds,
      vllm:request_queue_time_seconds, vllm:request_prefill_time_seconds,
      vllm:request_decode_time_seconds                                -> mean and p50/p99
    vllm:cache_config_info{num_gpu_blocks, block_size}               -> KV capacity in tokens
    vllm:prompt_tokens_by_source_total{source=local_compute | local_cache_hit | external_kv_transfer}
                                                  -> computed / local-cache / transferred prompt tokens
  and, from the NixlConnector of a prefill/decode-disaggregated deployment:
    vllm:nixl_bytes_transferred_sum (the histogram's cumulative bytes)  -> KV bytes moved, bytes/s
    vllm:nixl_xfer_time_seconds_count, vllm:nixl_num_failed_transfers_total -> transfers, failed ones
  and, from a vLLM router (vllm-router's --prometheus-port):
    vllm_router_processed_requests_total{worker}                     -> requests, summed over workers

Samples of one name that differ in a label besides `engine` (a `source`, a router's `worker`, a finished
request's reason) are summed, unless the label picks the meshdeck name (COUNTERS_BY_LABEL).

Each `engine` label (one per data-parallel rank) gets its own entry; an entry with engine "" sums the
engines. Rates, means and quantiles are over the interval since the previous scrape (histograms merged
bucket-wise across engines, quantiles interpolated as PromQL's histogram_quantile does). KV usage across
engines is weighted by each engine's capacity in tokens; when a server does not say its capacity the
engines are weighted equally (the DP engines of one vLLM server share one cache config). A server whose
text holds none of these (a router before its first request) is up, with nothing else to say.

What it emits are `WorkerSample` records (wire_sample.py) whose metric names come from the registry
(metric_registry.WORKER_METRICS: unit, gauge or counter, range); a value the scrape cannot tell (no
previous scrape for a rate, no `_count` for a mean) is left out of the record.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from .metric_registry import WORKER, describe, latency_names, worker_metric
from .wire_sample import WorkerSample

log = logging.getLogger(__name__)

# meshdeck's names for what is scraped: each is registered (metric_registry.WORKER_METRICS, with its unit
# and range); `worker_metric` refuses, at import, a name the registry lacks.
UP = worker_metric("up")
ENGINES = worker_metric("engines")
KV_USAGE = worker_metric("kv_cache_usage_perc")
KV_CAPACITY = worker_metric("kv_cache_capacity_tokens")
PREFIX_HITS = worker_metric("prefix_cache_hits_total")
PREFIX_QUERIES = worker_metric("prefix_cache_queries_total")
PREFIX_HIT_RATE = worker_metric("prefix_cache_hit_rate")
PROMPT_COMPUTED = worker_metric("prompt_tokens_computed_total")
PROMPT_TRANSFERRED = worker_metric("prompt_tokens_transferred_total")
KV_TRANSFER_BYTES = worker_metric("kv_transfer_bytes_total")

# vLLM's name -> (meshdeck's name, priority): the lower priority wins when a server exports both.
GAUGES = {
    "vllm:kv_cache_usage_perc": (KV_USAGE, 0),
    "vllm:gpu_cache_usage_perc": (KV_USAGE, 1),
    "vllm:num_requests_running": (worker_metric("num_requests_running"), 0),
    "vllm:num_requests_waiting": (worker_metric("num_requests_waiting"), 0),
}
COUNTERS = {
    "vllm:prompt_tokens_total": (worker_metric("prompt_tokens_total"), 0),
    "vllm:generation_tokens_total": (worker_metric("generation_tokens_total"), 0),
    "vllm:prefix_cache_hits_total": (PREFIX_HITS, 0),
    "vllm:gpu_prefix_cache_hits_total": (PREFIX_HITS, 1),
    "vllm:prefix_cache_queries_total": (PREFIX_QUERIES, 0),
    "vllm:gpu_prefix_cache_queries_total": (PREFIX_QUERIES, 1),
    "vllm:num_preemptions_total": (worker_metric("num_preemptions_total"), 0),
    "vllm:request_success_total": (worker_metric("request_success_total"), 0),
    # NixlConnector (vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py): a histogram's _sum and
    # _count are counters too (the bytes observed only grow; _count is the transfers that completed)
    "vllm:nixl_bytes_transferred_sum": (KV_TRANSFER_BYTES, 0),
    "vllm:nixl_xfer_time_seconds_count": (worker_metric("kv_transfers_total"), 0),
    "vllm:nixl_num_failed_transfers_total": (worker_metric("kv_transfers_failed_total"), 0),
    "vllm_router_processed_requests_total": (worker_metric("router_requests_total"), 0),
}
# vLLM's counter -> (label, {its value: (meshdeck's name, priority)}): one family split by a label. A value
# not listed (a source a newer vLLM adds) is not read.
COUNTERS_BY_LABEL = {
    "vllm:prompt_tokens_by_source_total": (
        "source",
        {
            "local_compute": (PROMPT_COMPUTED, 0),
            "local_cache_hit": (worker_metric("prompt_tokens_local_cache_total"), 0),
            "external_kv_transfer": (PROMPT_TRANSFERRED, 0),
        },
    ),
}
# vLLM's histogram -> (the registry's LATENCY_HISTOGRAMS prefix of its statistics, priority)
HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": ("ttft", 0),
    "vllm:inter_token_latency_seconds": ("itl", 0),
    "vllm:time_per_output_token_seconds": ("itl", 1),
    "vllm:e2e_request_latency_seconds": ("e2e", 0),
    "vllm:request_queue_time_seconds": ("queue", 0),
    "vllm:request_prefill_time_seconds": ("prefill", 0),
    "vllm:request_decode_time_seconds": ("decode", 0),
}
LATENCY_NAMES = {prefix: tuple(worker_metric(n) for n in latency_names(prefix)) for prefix, _ in HISTOGRAMS.values()}
# counter -> its rate over the interval between two scrapes
RATES = {
    worker_metric("prompt_tokens_total"): worker_metric("prompt_tokens_per_s"),
    worker_metric("generation_tokens_total"): worker_metric("generation_tokens_per_s"),
    worker_metric("num_preemptions_total"): worker_metric("preemptions_per_s"),
    PROMPT_COMPUTED: worker_metric("prompt_tokens_computed_per_s"),
    PROMPT_TRANSFERRED: worker_metric("prompt_tokens_transferred_per_s"),
    KV_TRANSFER_BYTES: worker_metric("kv_transfer_bytes_per_s"),
}


class Histogram:
    def __init__(self) -> None:
        self.buckets: Dict[float, float] = {}
        self.sum = 0.0
        self.count = 0.0

    def minus(self, older: Optional["Histogram"]) -> "Histogram":
        delta = Histogram()
        if older is None or self.went_down_since(older):
            older = Histogram()  # first scrape or the server restarted: use lifetime values
        delta.sum = self.sum - older.sum
        delta.count = self.count - older.count
        delta.buckets = {le: c - older.buckets.get(le, 0.0) for le, c in self.buckets.items()}
        return delta

    def went_down_since(self, older: "Histogram") -> bool:
        """Whether any cumulative part (count, sum, a bucket) is below `older`'s: the server restarted.
        A restarted server that served more requests than before has a higher count, yet a lower sum."""
        if self.count < older.count or self.sum < older.sum:
            return True
        return any(self.buckets.get(le, 0.0) < count for le, count in older.buckets.items())

    def add(self, other: "Histogram") -> None:
        self.sum += other.sum
        self.count += other.count
        for le, c in other.buckets.items():
            self.buckets[le] = self.buckets.get(le, 0.0) + c


def quantile(q: float, buckets: Dict[float, float]) -> Optional[float]:
    """PromQL histogram_quantile over cumulative bucket counts {le: count}."""
    if not buckets:
        return None
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    lower, lower_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == lower_count:
                return bound
            return lower + (bound - lower) * (rank - lower_count) / (count - lower_count)
        lower, lower_count = bound, count
    return lower


class EngineSnapshot:
    def __init__(self) -> None:
        self.values: Dict[str, Tuple[int, float]] = {}  # key -> (priority, value)
        self.histograms: Dict[str, Tuple[int, Histogram]] = {}
        self.capacity_tokens: Optional[float] = None

    def put(self, key: str, priority: int, value: float, add: bool = False) -> None:
        current = self.values.get(key)
        if current is None or priority < current[0]:
            self.values[key] = (priority, value)
        elif priority == current[0] and add:
            self.values[key] = (priority, current[1] + value)

    def value(self, key: str) -> Optional[float]:
        entry = self.values.get(key)
        return entry[1] if entry else None

    def histogram(self, key: str, priority: int) -> Optional[Histogram]:
        current = self.histograms.get(key)
        if current is None or priority < current[0]:
            current = (priority, Histogram())
            self.histograms[key] = current
        return current[1] if current[0] == priority else None


# Each engine label becomes an entry of every sample: a server with more engines, or longer labels, than
# any vLLM has (one per data-parallel rank) would make samples too large for the wire.
MAX_ENGINES = 256
MAX_ENGINE_LABEL_CHARS = 64


def _snapshot(engines: Dict[str, EngineSnapshot], engine: str) -> EngineSnapshot:
    snapshot = engines.get(engine)
    if snapshot is None:
        if len(engine) > MAX_ENGINE_LABEL_CHARS:
            raise ValueError("an engine label of %d characters (at most %d)" % (len(engine), MAX_ENGINE_LABEL_CHARS))
        if len(engines) >= MAX_ENGINES:
            raise ValueError("more than %d engine labels" % MAX_ENGINES)
        snapshot = engines[engine] = EngineSnapshot()
    return snapshot


def parse_vllm_metrics(text: str) -> Dict[str, EngineSnapshot]:
    """{engine label ("" when none): snapshot}. Raises ValueError on text the parser rejects and on more
    engines, or longer engine labels, than MAX_ENGINES / MAX_ENGINE_LABEL_CHARS."""
    # imported here: prometheus_client costs ~10 MB of RSS, paid only once a worker has metrics to scrape
    from prometheus_client.parser import text_string_to_metric_families

    engines: Dict[str, EngineSnapshot] = {}
    capacities: Dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, float(sample.value)
            engine = labels.get("engine", "")
            if name == "vllm:cache_config_info":
                try:
                    blocks = float(labels.get("num_gpu_blocks", "nan"))
                    block_size = float(labels.get("block_size", "nan"))
                except ValueError:
                    continue
                if math.isfinite(blocks) and math.isfinite(block_size):
                    capacities[engine] = blocks * block_size
                continue
            base = None
            for suffix in ("_bucket", "_sum", "_count"):
                if name.endswith(suffix) and name[: -len(suffix)] in HISTOGRAMS:
                    base = name[: -len(suffix)]
                    break
            if name in GAUGES:
                key, priority = GAUGES[name]
                _snapshot(engines, engine).put(key, priority, value)
            elif name in COUNTERS:
                key, priority = COUNTERS[name]
                _snapshot(engines, engine).put(key, priority, value, add=True)
            elif name in COUNTERS_BY_LABEL:
                label, keys = COUNTERS_BY_LABEL[name]
                picked = keys.get(labels.get(label, ""))
                if picked is not None:
                    _snapshot(engines, engine).put(picked[0], picked[1], value, add=True)
            elif base is not None:
                key, priority = HISTOGRAMS[base]
                histogram = _snapshot(engines, engine).histogram(key, priority)
                if histogram is None:
                    continue
                if name.endswith("_bucket"):
                    le = float(labels.get("le", "inf"))
                    histogram.buckets[le] = histogram.buckets.get(le, 0.0) + value
                elif name.endswith("_sum"):
                    histogram.sum += value
                else:
                    histogram.count += value
    for engine, capacity in capacities.items():
        if engine in engines:
            engines[engine].capacity_tokens = capacity
        elif engine == "" and engines:
            for snapshot in engines.values():  # V0: one unlabelled cache_config for the one engine
                snapshot.capacity_tokens = capacity
    return engines


def _histogram_metrics(prefix: str, delta: Optional[Histogram], metrics: Dict[str, Any]) -> None:
    """Mean (needs _sum and _count) and p50/p99 (from the buckets alone) over the interval."""
    mean, p50, p99 = LATENCY_NAMES[prefix]
    metrics[mean] = delta.sum / delta.count if delta is not None and delta.count > 0 else None
    metrics[p50] = quantile(0.5, delta.buckets) if delta is not None else None
    metrics[p99] = quantile(0.99, delta.buckets) if delta is not None else None


class VllmMetrics:
    """Turns successive snapshots of one server into SAMPLE.workers entries (keeps the previous one).

    A value outside its metric's range in the registry (a KV-cache usage of 5, -3 running requests) is a
    server's garbage: it is left out of the entry, and logged once per metric."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self._previous: Optional[Tuple[float, Dict[str, EngineSnapshot]]] = None
        self._refused: Set[str] = set()

    def _entry(self, engine: str, metrics: Dict[str, Any]) -> WorkerSample:
        kept: Dict[str, Any] = {}
        for name, value in metrics.items():
            if value is None or not math.isfinite(value):
                continue  # not told (NaN in a server's text reads as not told too)
            metric = describe(WORKER, name)
            if metric.holds(value):
                kept[name] = value
            elif name not in self._refused:
                self._refused.add(name)
                log.warning(
                    "worker %s engine %r reported %s = %g, outside its range [%g, %g]; such values are left out",
                    self.worker_id,
                    engine,
                    name,
                    value,
                    metric.low,
                    metric.high,
                )
        return WorkerSample.of(self.worker_id, engine, kept)

    def update(self, now: float, engines: Dict[str, EngineSnapshot]) -> List[WorkerSample]:
        previous_time, previous = self._previous if self._previous else (None, {})
        elapsed = now - previous_time if previous_time is not None else None
        entries: List[WorkerSample] = []
        totals: Dict[str, float] = {}
        merged: Dict[str, Histogram] = {}
        kv_weighted: List[Tuple[float, Optional[float]]] = []
        for engine in sorted(engines, key=lambda e: (len(e), e)):
            snapshot = engines[engine]
            before = previous.get(engine)
            metrics: Dict[str, Any] = {UP: 1}
            for key, (_, value) in snapshot.values.items():
                metrics[key] = value
                if key != KV_USAGE:
                    totals[key] = totals.get(key, 0.0) + value
            for total_key, rate_key in RATES.items():
                now_value = snapshot.value(total_key)
                old_value = before.value(total_key) if before else None
                rate = None
                if now_value is not None and old_value is not None and elapsed and now_value >= old_value:
                    rate = (now_value - old_value) / elapsed
                metrics[rate_key] = rate
                if rate is not None:
                    totals[rate_key] = totals.get(rate_key, 0.0) + rate
            for key, (_, histogram) in snapshot.histograms.items():
                old = before.histograms.get(key, (0, None))[1] if before else None
                delta = histogram.minus(old)
                merged.setdefault(key, Histogram()).add(delta)
                _histogram_metrics(key, delta, metrics)
            hits, queries = (
                self._delta(snapshot, before, PREFIX_HITS),
                self._delta(snapshot, before, PREFIX_QUERIES),
            )
            metrics[PREFIX_HIT_RATE] = hits / queries if hits is not None and queries else None
            metrics[KV_CAPACITY] = snapshot.capacity_tokens
            usage = snapshot.value(KV_USAGE)
            if usage is not None:
                kv_weighted.append((usage, snapshot.capacity_tokens))
            entries.append(self._entry(engine, metrics))
        self._previous = (now, engines)
        if not engines:  # read, yet nothing vLLM's in it (a router that has routed nothing yet): up all the same
            entries.append(self._entry("", {UP: 1}))
        elif len(engines) > 1 or "" not in engines:
            entries.append(self._entry("", self._aggregate(totals, merged, kv_weighted, engines, previous)))
        return entries

    @staticmethod
    def _delta(snapshot: EngineSnapshot, before: Optional[EngineSnapshot], key: str) -> Optional[float]:
        now_value = snapshot.value(key)
        if now_value is None:
            return None
        old_value = before.value(key) if before else None
        if old_value is None or now_value < old_value:
            return now_value
        return now_value - old_value

    def _aggregate(
        self,
        totals: Dict[str, float],
        merged: Dict[str, Histogram],
        kv_weighted: List[Tuple[float, Optional[float]]],
        engines: Dict[str, EngineSnapshot],
        previous: Dict[str, EngineSnapshot],
    ) -> Dict[str, Any]:
        metrics: Dict[str, Any] = {UP: 1, ENGINES: len(engines)}
        metrics.update(totals)
        if kv_weighted:
            capacities = [c for _, c in kv_weighted]
            if all(c is not None and c > 0 for c in capacities):
                total_capacity = sum(c for c in capacities if c is not None)
                metrics[KV_USAGE] = sum(u * (c or 0) for u, c in kv_weighted) / total_capacity
                metrics[KV_CAPACITY] = total_capacity
            else:
                metrics[KV_USAGE] = sum(u for u, _ in kv_weighted) / len(kv_weighted)
                metrics[KV_CAPACITY] = None
        for key in sorted(merged):
            _histogram_metrics(key, merged.get(key), metrics)
        hits = sum(self._delta(s, previous.get(e), PREFIX_HITS) or 0.0 for e, s in engines.items())
        queries = sum(self._delta(s, previous.get(e), PREFIX_QUERIES) or 0.0 for e, s in engines.items())
        metrics[PREFIX_HIT_RATE] = hits / queries if queries else None
        return metrics


# A vLLM server's /metrics is ~100 KB per engine; a body past this is refused, never read whole.
MAX_METRICS_BYTES = 16 * 1024 * 1024
_READ_CHUNK = 256 * 1024
# What a failed scrape repeats of the server's answer (it rides in every sample until the next scrape).
MAX_ERROR_CHARS = 300


def fetch(url: str, timeout_s: float) -> str:
    """The body at `url`, read within 2 x timeout_s. Raises OSError when the server cannot be read (network,
    a broken HTTP answer, too slow) and ValueError when the body exceeds MAX_METRICS_BYTES."""
    import http.client
    import urllib.request

    deadline = time.monotonic() + 2 * timeout_s
    request = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4"})
    chunks: List[bytes] = []
    size = 0
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:
            while True:
                chunk = reply.read(min(_READ_CHUNK, MAX_METRICS_BYTES + 1 - size))
                if not chunk:
                    if getattr(reply, "length", None):  # http.client does not raise IncompleteRead here
                        raise OSError("the body ended %d bytes short of its Content-Length" % reply.length)
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_METRICS_BYTES:
                    raise ValueError("the body is larger than %d MiB; not a vLLM /metrics" % (MAX_METRICS_BYTES >> 20))
                if time.monotonic() > deadline:
                    raise OSError("the body took longer than %.1f s to read" % (2 * timeout_s))
    except http.client.HTTPException as exc:  # a broken status line, headers or body: not an OSError
        raise OSError("broken HTTP answer: %s: %s" % (type(exc).__name__, exc)) from None
    return b"".join(chunks).decode("utf-8", errors="replace")


def _error_text(url: str, exc: Exception) -> str:
    """`url: problem`, cut to MAX_ERROR_CHARS (a parser error quotes the whole bad line)."""
    text = "%s: %s" % (url, exc)
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "... (%d characters)" % len(text)


class ScrapeLoop:
    """Scrapes one worker's metrics_url every interval on its own thread; `latest()` is what it last saw."""

    def __init__(
        self, worker_id: str, url: str, interval_s: float, fetcher: Callable[[str, float], str] = fetch
    ) -> None:
        self.worker_id = worker_id
        self.url = url
        self.interval_s = interval_s
        self.fetcher = fetcher
        self.metrics = VllmMetrics(worker_id)
        self._lock = threading.Lock()
        self._latest: List[WorkerSample] = []
        self._latest_at = 0.0
        self.error: Optional[str] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scrape-%s" % worker_id, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def scrape_once(self) -> List[WorkerSample]:
        now = time.time()
        try:
            text = self.fetcher(self.url, max(0.5, min(5.0, self.interval_s)))
            entries = self.metrics.update(now, parse_vllm_metrics(text))
            self.error = None
        except (OSError, ValueError) as exc:  # urllib's URLError is an OSError
            self.error = _error_text(self.url, exc)
            entries = [WorkerSample.of(self.worker_id, "", {UP: 0}, self.error)]
        with self._lock:
            self._latest = entries
            self._latest_at = now
        return entries

    def latest(self, max_age_s: float) -> List[WorkerSample]:
        with self._lock:
            if time.time() - self._latest_at > max_age_s:
                return []
            return list(self._latest)

    def _run(self) -> None:
        failed = False
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.scrape_once()
            except Exception:  # a bug must not stop this worker's metrics for good
                if not failed:
                    log.exception("scraping %s failed; later failures are not logged", self.url)
                failed = True
            self._stop.wait(max(0.05, self.interval_s - (time.monotonic() - started)))

    def stop(self, wait: bool = True) -> None:
        """End the loop; with `wait`, also wait for a scrape in flight (up to its timeout)."""
        self._stop.set()
        if wait and self._thread.is_alive():
            self._thread.join(timeout=10.0)
