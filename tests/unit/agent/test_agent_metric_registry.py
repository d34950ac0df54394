"""One metric registry: well formed, and it knows every name the agent emits with every value in its
range: a simulated server's samples through the real sampler and ring, and the scraper fed every
recorded vLLM /metrics dump (alone, twice, and after each other, as a server restarted between scrapes)."""

from __future__ import annotations

import itertools
import json
import logging
from pathlib import Path

import pytest
from meshdeck_agent import metric_registry
from meshdeck_agent.gpu.catalog import parse_simulate
from meshdeck_agent.metric_registry import (
    GPU_METRICS,
    HOST_METRICS,
    METRICS,
    NIC_METRICS,
    NVLINK_METRICS,
    WORKER,
    WORKER_METRICS,
    describe,
    lookup,
    worker_metric,
)
from meshdeck_agent.ring import SampleRing
from meshdeck_agent.sampler import Sampler
from meshdeck_agent.scrape import VllmMetrics, parse_vllm_metrics
from meshdeck_agent.sim.machine import SimulatedMachine
from meshdeck_agent.sim.traffic import SimWorkerActivity
from meshdeck_agent.wire_sample import GpuSample, HostSample, Sample, WorkerSample

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "agent"
DUMPS = sorted(FIXTURES.glob("vllm_metrics_*.txt"))
GIB = 1 << 30


def test_every_metric_has_a_known_scope_kind_unit_a_range_and_help_once():
    assert len({(m.scope, m.name) for m in METRICS}) == len(METRICS)
    for metric in METRICS:
        assert metric.scope in metric_registry.SCOPES and metric.kind in metric_registry.KINDS, metric
        assert metric.unit in metric_registry.UNITS and metric.low < metric.high and metric.help, metric
    assert {m.scope for m in GPU_METRICS} == {"gpu"} and {m.scope for m in NVLINK_METRICS} == {"nvlink"}
    assert {m.scope for m in HOST_METRICS} == {"host"} and {m.scope for m in NIC_METRICS} == {"nic"}
    counters = {m.name for m in METRICS if m.kind == metric_registry.COUNTER}
    ecc = {"ecc_uncorrected_volatile", "ecc_corrected_volatile"}  # NVML's, counting until a reset
    assert counters == {m.name for m in WORKER_METRICS if m.name.endswith("_total")} | ecc


def test_a_name_the_registry_lacks_is_described_as_a_unitless_gauge_and_refused_to_the_scraper():
    unknown = describe(WORKER, "vllm_next_thing")
    assert (unknown.unit, unknown.kind, unknown.scope) == ("", "gauge", WORKER) and unknown.holds(-1.0)
    assert lookup(WORKER, "vllm_next_thing") is None and lookup("gpu", "power_w").unit == "W"
    with pytest.raises(KeyError, match="vllm_next_thing"):
        worker_metric("vllm_next_thing")


def test_a_record_refuses_a_metric_name_the_registry_lacks():
    with pytest.raises(TypeError, match="power_kw"):
        GpuSample.of(0, None, power_kw=1.0)
    with pytest.raises(TypeError, match="cpu_percent"):
        HostSample.of(cpu_percent=1.0)


def _in_range(sample: Sample) -> list[str]:
    """Every value of `sample` outside its metric's range (or of a name the registry lacks), as text."""
    wrong = []
    for gpu in sample.gpus:
        for metric, value in zip(GPU_METRICS, gpu.values, strict=True):
            if value is not None and not metric.holds(value):
                wrong.append(f"gpu{gpu.index}.{metric.name}={value}")
        for link, pair in enumerate(gpu.nvlink_links):
            for metric, value in zip(NVLINK_METRICS, pair, strict=True):
                if value is not None and not metric.holds(value):
                    wrong.append(f"gpu{gpu.index}/nvlink{link}.{metric.name}={value}")
    if sample.host is not None:
        for metric, value in zip(HOST_METRICS, sample.host.values, strict=True):
            if value is not None and not metric.holds(value):
                wrong.append(f"host.{metric.name}={value}")
    for nic in sample.nics:
        for metric, value in zip(NIC_METRICS, (nic.tx_bytes_per_s, nic.rx_bytes_per_s), strict=True):
            if value is not None and not metric.holds(value):
                wrong.append(f"{nic.name}.{metric.name}={value}")
    for worker in sample.workers:
        wrong.extend(_worker_out_of_range(worker))
    return wrong


def _worker_out_of_range(worker: WorkerSample) -> list[str]:
    wrong = []
    for name, value in worker.metrics:
        metric = lookup(WORKER, name)
        if metric is None or not metric.holds(value):
            wrong.append(f"worker {worker.id}/{worker.engine!r}.{name}={value}")
    return wrong


@pytest.mark.parametrize("spec", ["16xH200", "4xL40S", "8xA100"])
def test_a_simulated_server_under_load_emits_only_registered_metrics_within_their_ranges(spec):
    machine_spec = parse_simulate(spec)
    busy = [
        SimWorkerActivity(
            "v", tuple(range(machine_spec.count)), 40 * GIB, (1,), False, 0.0, 8000.0, 2000.0, 4, 1, 2, 4, True, 2
        )
    ]
    loads = itertools.chain(itertools.repeat([], 5), itertools.repeat(busy))  # idle, then serving
    machine = SimulatedMachine(machine_spec, seed=7, activity=lambda: next(loads))
    ring = SampleRing()
    times = itertools.count(1_764_480_000)
    sampler = Sampler(machine, ring, clock=lambda: float(next(times)))
    for _ in range(60):
        sampler.sample_once()
    decoded = [Sample.from_wire(json.loads(chunk)) for chunk in ring.read(0).chunks]  # as the app decodes them
    assert len(decoded) == 60
    assert [problem for sample in decoded for problem in _in_range(sample)] == []
    reported = {
        name
        for sample in decoded
        for gpu in sample.gpus
        for name, v in zip((m.name for m in GPU_METRICS), gpu.values, strict=True)
        if v is not None
    }
    assert reported >= {"memory_used_bytes", "power_w", "pcie_tx_bytes_per_s"}


def _scrape(metrics: VllmMetrics, now: float, text: str) -> list[WorkerSample]:
    return metrics.update(now, parse_vllm_metrics(text))


@pytest.mark.parametrize("path", DUMPS, ids=lambda p: p.name)
def test_the_scraper_fed_a_recorded_dump_emits_registered_names_within_their_ranges(path):
    text = path.read_text()
    metrics = VllmMetrics("w1")
    first = _scrape(metrics, 10.0, text)
    again = _scrape(metrics, 11.0, text)
    assert first and again
    assert [p for entry in first + again for p in _worker_out_of_range(entry)] == []
    names = {name for entry in first + again for name, _ in entry.metrics}
    assert "up" in names and names & {"kv_cache_usage_perc", "num_requests_running", "e2e_p50_s", "decode_p99_s"}


@pytest.mark.parametrize(("before", "after"), list(itertools.permutations(DUMPS, 2)), ids=lambda p: p.name[:40])
def test_the_scraper_fed_one_server_after_another_stays_within_the_ranges(before, after):
    """Another server's dump after the first stands for a restart between two scrapes: counters and
    histograms that went down, engines that appeared or left."""
    metrics = VllmMetrics("w1")
    entries = _scrape(metrics, 10.0, before.read_text()) + _scrape(metrics, 12.0, after.read_text())
    assert [p for entry in entries for p in _worker_out_of_range(entry)] == []


def _histogram_dump(count: int, total_s: float, kv: float, running: int) -> str:
    return (
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f'vllm:kv_cache_usage_perc{{engine="0"}} {kv}\n'
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{engine="0"}} {running}\n'
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        f'vllm:e2e_request_latency_seconds_bucket{{engine="0",le="1.0"}} 0\n'
        f'vllm:e2e_request_latency_seconds_bucket{{engine="0",le="+Inf"}} {count}\n'
        f'vllm:e2e_request_latency_seconds_count{{engine="0"}} {count}\n'
        f'vllm:e2e_request_latency_seconds_sum{{engine="0"}} {total_s}\n'
    )


def test_a_server_that_restarted_and_served_more_requests_gives_no_negative_latency():
    """10 slow requests (100 s), then a restart and 12 fast ones (5 s): the count went up, the sum went
    down. Subtracting gave a mean of -47.5 s; the restart must read as lifetime values instead."""
    metrics = VllmMetrics("w1")
    _scrape(metrics, 10.0, _histogram_dump(10, 100.0, 0.5, 3))
    engine, total = _scrape(metrics, 11.0, _histogram_dump(12, 5.0, 0.5, 3))  # engine "0", then the sum
    assert engine.value("e2e_mean_s") == pytest.approx(5.0 / 12) and total.value("e2e_mean_s") == pytest.approx(
        5.0 / 12
    )


def test_a_value_outside_its_range_is_left_out_and_logged_once(caplog):
    """A server reporting a KV-cache usage of 5 (500 %) or -3 running requests sends garbage: it never
    reaches the wire, and the log says so once per metric."""
    metrics = VllmMetrics("w1")
    with caplog.at_level(logging.WARNING, logger="meshdeck_agent.scrape"):
        first = _scrape(metrics, 10.0, _histogram_dump(1, 0.5, 5.0, -3))
        again = _scrape(metrics, 11.0, _histogram_dump(2, 1.0, 5.0, -3))
    for scraped in first + again:  # engine "0" and the sum over engines
        assert scraped.value("kv_cache_usage_perc") is None and scraped.value("num_requests_running") is None
        assert scraped.value("up") == 1
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and any("kv_cache_usage_perc" in m and "5" in m for m in warned)
