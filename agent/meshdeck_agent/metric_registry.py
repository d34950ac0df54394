"""The metric registry: every number a sample carries, with its unit, scope, kind and physical range.

One table (after nvitop's DEVICE_METRICS) that everything reads: the sample records lay out and check
their values by it (wire_sample.py), the sampler rounds the rates it names (quantize.py), the scraper
takes the names of the vLLM worker metrics it emits from it (scrape.py), the Prometheus exporter its
help text, units and metric types (exporter.py), and the app its units for the charts and the history
export (meshdeck.services.metrics). A metric an agent sends that the registry does not know still flows
through the app, unitless (`describe`): a newer agent may add some within protocol 1.

Scopes name what a value is measured on, as the app's series keys do (meshdeck.core.samples.Device):
a GPU, one NVLink link of a GPU, the host, a NIC port, or a vLLM worker (one engine, or its sum over
engines). A `gauge` is a level or a rate at the sample's time; a `counter` only grows while the process
that counts lives (vLLM's `*_total`; for a GPU's volatile ECC counts, the driver until it reloads or the
GPU is reset).

The ranges are physical bounds with room to spare (no GPU has a petabyte of memory or runs at 10 kW),
not tuning: they keep garbage out and never clip a real reading. Stdlib only, Python 3.9.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

GPU = "gpu"
NVLINK = "nvlink"
HOST = "host"
NIC = "nic"
WORKER = "worker"
SCOPES = (HOST, GPU, NVLINK, NIC, WORKER)
GAUGE = "gauge"
COUNTER = "counter"
KINDS = (GAUGE, COUNTER)

# Units, as a person reads them; the app maps each to its axis scale and readout (ui/charts/units.py).
BYTES = "bytes"
BYTES_PER_S = "bytes/s"
PERCENT = "%"  # 0..100
RATIO = "ratio"  # 0..1 (vLLM's `*_perc` are ratios)
WATTS = "W"
CELSIUS = "°C"
MHZ = "MHz"
SECONDS = "s"
TOKENS = "tokens"
TOKENS_PER_S = "tokens/s"
REQUESTS = "requests"
PREEMPTIONS = "preemptions"
PREEMPTIONS_PER_S = "preemptions/s"
ENGINES = "engines"
ERRORS = "errors"
UNITLESS = ""
UNITS = (
    BYTES,
    BYTES_PER_S,
    PERCENT,
    RATIO,
    WATTS,
    CELSIUS,
    MHZ,
    SECONDS,
    TOKENS,
    TOKENS_PER_S,
    REQUESTS,
    PREEMPTIONS,
    PREEMPTIONS_PER_S,
    ENGINES,
    ERRORS,
    UNITLESS,
)

PETABYTE = 2.0**50
MAX_ERROR_COUNT = 2.0**63  # NVML's counters are unsigned 64-bit; no real count comes near
BYTE_RATE = 1e14  # 100 TB/s: above any link a GPU, NIC or host has
MAX_WORKER_VALUE = 1e18  # vLLM counters (tokens served) stay far below; beyond this a value is garbage


@dataclass(frozen=True)
class Metric:
    """One scalar a sample carries: its wire name, unit, physical range [low, high], what it is measured
    on (`scope`), whether it is a gauge or a counter, and a line of help for a person."""

    name: str
    unit: str
    high: float
    scope: str = GPU
    kind: str = GAUGE
    help: str = ""
    low: float = 0.0

    def holds(self, value: float) -> bool:
        """Whether `value` lies in the metric's physical range (False for NaN)."""
        return self.low <= value <= self.high


# Per GPU, in wire order. `nvlink_*` are the sums over the GPU's links (per link: NVLINK_METRICS). The ECC
# counts are NVML's volatile totals (nvmlDeviceGetTotalEccErrors, NVML_VOLATILE_ECC): null on a GPU
# without ECC (or with ECC off), never 0, since 0 would say "checked, no errors".
GPU_METRICS: Tuple[Metric, ...] = (
    Metric("memory_used_bytes", BYTES, PETABYTE, GPU, GAUGE, "GPU memory in use"),
    Metric("memory_total_bytes", BYTES, PETABYTE, GPU, GAUGE, "GPU memory on the board"),
    Metric("memory_reserved_bytes", BYTES, PETABYTE, GPU, GAUGE, "GPU memory the driver reserves for itself"),
    Metric("utilization_pct", PERCENT, 100.0, GPU, GAUGE, "Share of the last sample period a kernel ran"),
    Metric("memory_utilization_pct", PERCENT, 100.0, GPU, GAUGE, "Share of the last sample period memory was accessed"),
    Metric("power_w", WATTS, 10_000.0, GPU, GAUGE, "GPU power draw"),
    Metric("power_limit_w", WATTS, 10_000.0, GPU, GAUGE, "Enforced GPU power limit"),
    Metric("temperature_c", CELSIUS, 250.0, GPU, GAUGE, "GPU core temperature"),
    Metric("sm_clock_mhz", MHZ, 100_000.0, GPU, GAUGE, "SM clock"),
    Metric("mem_clock_mhz", MHZ, 100_000.0, GPU, GAUGE, "Memory clock"),
    Metric("nvlink_tx_bytes_per_s", BYTES_PER_S, BYTE_RATE, GPU, GAUGE, "NVLink data sent, all links"),
    Metric("nvlink_rx_bytes_per_s", BYTES_PER_S, BYTE_RATE, GPU, GAUGE, "NVLink data received, all links"),
    Metric("pcie_tx_bytes_per_s", BYTES_PER_S, BYTE_RATE, GPU, GAUGE, "PCIe data sent by the GPU"),
    Metric("pcie_rx_bytes_per_s", BYTES_PER_S, BYTE_RATE, GPU, GAUGE, "PCIe data received by the GPU"),
    Metric(
        "ecc_uncorrected_volatile",
        ERRORS,
        MAX_ERROR_COUNT,
        GPU,
        COUNTER,
        "Uncorrected ECC memory errors since the driver loaded or the GPU was reset (volatile)",
    ),
    Metric(
        "ecc_corrected_volatile",
        ERRORS,
        MAX_ERROR_COUNT,
        GPU,
        COUNTER,
        "Corrected ECC memory errors since the driver loaded or the GPU was reset (volatile)",
    ),
)
# Per NVLink link of a GPU: the (tx, rx) pair of GpuSample.nvlink_links, in that order.
NVLINK_METRICS: Tuple[Metric, ...] = (
    Metric("nvlink_tx_bytes_per_s", BYTES_PER_S, BYTE_RATE, NVLINK, GAUGE, "NVLink data sent on one link"),
    Metric("nvlink_rx_bytes_per_s", BYTES_PER_S, BYTE_RATE, NVLINK, GAUGE, "NVLink data received on one link"),
)
HOST_METRICS: Tuple[Metric, ...] = (
    Metric("cpu_pct", PERCENT, 100.0, HOST, GAUGE, "CPU busy share, all cores"),
    Metric("ram_used_bytes", BYTES, 2.0**60, HOST, GAUGE, "RAM in use (MemTotal - MemAvailable)"),
    Metric("ram_total_bytes", BYTES, 2.0**60, HOST, GAUGE, "RAM installed"),
)
NIC_METRICS: Tuple[Metric, ...] = (
    Metric("tx_bytes_per_s", BYTES_PER_S, BYTE_RATE, NIC, GAUGE, "Bytes sent on the port"),
    Metric("rx_bytes_per_s", BYTES_PER_S, BYTE_RATE, NIC, GAUGE, "Bytes received on the port"),
)

# vLLM's latency histograms, as the scraper reduces each one over the interval between two scrapes:
# (prefix, what it times). Each gives `<prefix>_mean_s`, `<prefix>_p50_s` and `<prefix>_p99_s`.
LATENCY_HISTOGRAMS: Tuple[Tuple[str, str], ...] = (
    ("ttft", "time to first token"),
    ("itl", "inter-token latency"),
    ("e2e", "end-to-end request latency"),
    ("queue", "time requests waited in the queue"),
    ("prefill", "prefill time of requests"),
    ("decode", "decode time of requests"),
)
LATENCY_STATISTICS: Tuple[Tuple[str, str], ...] = (
    ("mean", "Mean"),
    ("p50", "Median (interpolated from the buckets)"),
    ("p99", "99th percentile (interpolated from the buckets)"),
)
MAX_LATENCY_S = 1e7  # vLLM's largest finite bucket bound is hours; ~4 months is garbage


def latency_names(prefix: str) -> Tuple[str, ...]:
    """The names of one histogram's statistics, in LATENCY_STATISTICS order (mean, p50, p99)."""
    return tuple("%s_%s_s" % (prefix, statistic) for statistic, _ in LATENCY_STATISTICS)


def _latency_metrics() -> Tuple[Metric, ...]:
    return tuple(
        Metric(
            name,
            SECONDS,
            MAX_LATENCY_S,
            WORKER,
            GAUGE,
            "%s %s over the interval between two scrapes" % (statistic, what),
        )
        for prefix, what in LATENCY_HISTOGRAMS
        for name, (_, statistic) in zip(latency_names(prefix), LATENCY_STATISTICS)
    )


_WORKER_SCALARS: Tuple[Metric, ...] = (
    Metric("up", UNITLESS, 1.0, WORKER, GAUGE, "1 when the last scrape of the worker's /metrics succeeded, else 0"),
    Metric("engines", ENGINES, 4096.0, WORKER, GAUGE, "vLLM engines (data-parallel ranks) the worker reports"),
    Metric("kv_cache_usage_perc", RATIO, 1.0, WORKER, GAUGE, "Share of the KV-cache blocks in use (1 = full)"),
    Metric("kv_cache_capacity_tokens", TOKENS, 1e15, WORKER, GAUGE, "KV-cache capacity (GPU blocks x block size)"),
    Metric("num_requests_running", REQUESTS, 1e9, WORKER, GAUGE, "Requests in the running batch"),
    Metric("num_requests_waiting", REQUESTS, 1e9, WORKER, GAUGE, "Requests waiting to be scheduled"),
    Metric("prompt_tokens_total", TOKENS, MAX_WORKER_VALUE, WORKER, COUNTER, "Prompt tokens processed"),
    Metric("generation_tokens_total", TOKENS, MAX_WORKER_VALUE, WORKER, COUNTER, "Tokens generated"),
    Metric(
        "prefix_cache_hits_total", TOKENS, MAX_WORKER_VALUE, WORKER, COUNTER, "Prompt tokens found in the prefix cache"
    ),
    Metric(
        "prefix_cache_queries_total",
        TOKENS,
        MAX_WORKER_VALUE,
        WORKER,
        COUNTER,
        "Prompt tokens looked up in the prefix cache",
    ),
    Metric("num_preemptions_total", PREEMPTIONS, MAX_WORKER_VALUE, WORKER, COUNTER, "Requests preempted"),
    Metric("request_success_total", REQUESTS, MAX_WORKER_VALUE, WORKER, COUNTER, "Requests finished"),
    # Where prompt tokens came from (vLLM's prompt_tokens_by_source); the three add up to prompt_tokens_total.
    Metric(
        "prompt_tokens_computed_total",
        TOKENS,
        MAX_WORKER_VALUE,
        WORKER,
        COUNTER,
        "Prompt tokens the engine prefilled itself (source local_compute)",
    ),
    Metric(
        "prompt_tokens_local_cache_total",
        TOKENS,
        MAX_WORKER_VALUE,
        WORKER,
        COUNTER,
        "Prompt tokens found in the engine's own prefix cache (source local_cache_hit)",
    ),
    Metric(
        "prompt_tokens_transferred_total",
        TOKENS,
        MAX_WORKER_VALUE,
        WORKER,
        COUNTER,
        "Prompt tokens whose KV cache came from another instance, e.g. a prefill engine (source external_kv_transfer)",
    ),
    # KV-cache transfers between disaggregated prefill and decode instances (vLLM's NixlConnector).
    Metric(
        "kv_transfer_bytes_total",
        BYTES,
        MAX_WORKER_VALUE,
        WORKER,
        COUNTER,
        "KV-cache bytes moved by the engine's NIXL transfers (vllm:nixl_bytes_transferred_sum)",
    ),
    Metric(
        "kv_transfers_total",
        UNITLESS,
        MAX_WORKER_VALUE,
        WORKER,
        COUNTER,
        "NIXL KV-cache transfers completed (vllm:nixl_xfer_time_seconds_count)",
    ),
    Metric(
        "kv_transfers_failed_total",
        ERRORS,
        MAX_WORKER_VALUE,
        WORKER,
        COUNTER,
        "NIXL KV-cache transfers, handshakes and notifications that failed",
    ),
    # A vLLM router (vllm-router) scraped as a worker: its requests, summed over the workers it routes to.
    Metric(
        "router_requests_total",
        REQUESTS,
        MAX_WORKER_VALUE,
        WORKER,
        COUNTER,
        "Requests a vLLM router passed to its workers, all workers (vllm_router_processed_requests_total)",
    ),
    Metric("prompt_tokens_per_s", TOKENS_PER_S, 1e12, WORKER, GAUGE, "Prompt tokens processed per second"),
    Metric("generation_tokens_per_s", TOKENS_PER_S, 1e12, WORKER, GAUGE, "Tokens generated per second"),
    Metric("preemptions_per_s", PREEMPTIONS_PER_S, 1e9, WORKER, GAUGE, "Requests preempted per second"),
    Metric(
        "prompt_tokens_computed_per_s", TOKENS_PER_S, 1e12, WORKER, GAUGE, "Prompt tokens prefilled locally per second"
    ),
    Metric(
        "prompt_tokens_transferred_per_s",
        TOKENS_PER_S,
        1e12,
        WORKER,
        GAUGE,
        "Prompt tokens whose KV cache came from another instance, per second",
    ),
    Metric(
        "kv_transfer_bytes_per_s", BYTES_PER_S, BYTE_RATE, WORKER, GAUGE, "KV-cache bytes moved over NIXL per second"
    ),
    Metric(
        "prefix_cache_hit_rate",
        RATIO,
        1.0,
        WORKER,
        GAUGE,
        "Share of the prompt tokens looked up in the prefix cache that were found, over the interval",
    ),
)
# Per vLLM worker: one entry per engine (data-parallel rank) and one with engine "" that sums them.
WORKER_METRICS: Tuple[Metric, ...] = (*_WORKER_SCALARS, *_latency_metrics())

METRICS: Tuple[Metric, ...] = GPU_METRICS + NVLINK_METRICS + HOST_METRICS + NIC_METRICS + WORKER_METRICS
_BY_KEY: Dict[Tuple[str, str], Metric] = {(m.scope, m.name): m for m in METRICS}


def lookup(scope: str, name: str) -> Optional[Metric]:
    """The registered metric `name` of `scope`, or None."""
    return _BY_KEY.get((scope, name))


def describe(scope: str, name: str) -> Metric:
    """The registered metric, or, for a name this registry does not know (a newer agent's), a unitless
    gauge whose range is any number a worker value may be."""
    metric = _BY_KEY.get((scope, name))
    if metric is None:
        return Metric(name, UNITLESS, MAX_WORKER_VALUE, scope, GAUGE, "", -MAX_WORKER_VALUE)
    return metric


def worker_metric(name: str) -> str:
    """`name`, which must be a registered worker metric: the scraper names what it emits through this,
    so a name it emits that the registry lacks fails at import, not on a chart."""
    if (WORKER, name) not in _BY_KEY:
        raise KeyError("worker metric %r is not in the metric registry (metric_registry.WORKER_METRICS)" % name)
    return name
