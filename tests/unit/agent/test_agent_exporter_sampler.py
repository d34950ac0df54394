"""The Prometheus exporter serves the newest sample per GPU, link, NIC and worker; the sampler keeps
its schedule, survives a failing source and stamps every sample."""

from __future__ import annotations

import logging
import time
import urllib.request

import pytest
from meshdeck_agent.exporter import Exporter, parse_listen
from meshdeck_agent.gpu.catalog import parse_simulate
from meshdeck_agent.machine import Reading
from meshdeck_agent.metric_registry import GPU_METRICS
from meshdeck_agent.ring import SampleRing
from meshdeck_agent.sampler import Sampler
from meshdeck_agent.sim.machine import SimulatedMachine
from meshdeck_agent.wire_sample import WorkerSample
from prometheus_client.parser import text_string_to_metric_families


def _exported(ring: SampleRing, machine: SimulatedMachine) -> dict:
    """The exporter's families over HTTP, by name, as Prometheus scrapes them."""
    exporter = Exporter(ring, machine)
    exporter.start("127.0.0.1:0")
    try:
        host, port = exporter.address
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as reply:
            return {f.name: f for f in text_string_to_metric_families(reply.read().decode())}
    finally:
        exporter.stop()


def test_exporter_serves_gpu_link_nic_host_and_worker_series():
    machine = SimulatedMachine(parse_simulate("2xH100"), seed=1)
    ring = SampleRing()
    sampler = Sampler(
        machine, ring, workers=lambda: [WorkerSample.of("w1", "0", {"kv_cache_usage_perc": 0.25, "up": 1})]
    )
    sampler.sample_once()
    families = _exported(ring, machine)
    info = families["meshdeck_agent_info"].samples[0]
    assert info.labels["simulated"] == "true"
    memory = families["meshdeck_gpu_memory_total_bytes"].samples
    assert {s.labels["gpu"] for s in memory} == {"0", "1"} and memory[0].value == 81559 * 2**20
    links = families["meshdeck_gpu_nvlink_link_tx_bytes_per_s"].samples
    assert len(links) == 2 * 18 and {s.labels["link"] for s in links} == {str(n) for n in range(18)}
    assert families["meshdeck_host_ram_total_bytes"].samples[0].value > 0
    assert any(s.labels["nic"] == "mlx5_0/1" for s in families["meshdeck_nic_tx_bytes_per_s"].samples)
    worker = families["meshdeck_worker_kv_cache_usage_perc"].samples[0]
    assert (worker.labels, worker.value) == ({"worker": "w1", "engine": "0"}, 0.25)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:9400", ("127.0.0.1", 9400)), (":9400", ("127.0.0.1", 9400)), ("[::1]:9400", ("::1", 9400))],
)
def test_listen_addresses(text, expected):
    assert parse_listen(text) == expected


def test_a_bad_listen_address_names_the_option():
    with pytest.raises(ValueError, match="--prometheus"):
        parse_listen("localhost:http")


class Broken:
    simulated = False

    def read(self, now: float) -> Reading:
        raise RuntimeError("sensor fell off")


def test_a_failing_source_skips_the_tick_is_logged_once_and_the_sampler_keeps_going(caplog):
    ring = SampleRing()
    sampler = Sampler(Broken(), ring, interval_s=0.05)
    with caplog.at_level(logging.ERROR, logger="meshdeck_agent.sampler"):
        assert sampler.sample_once() is None
        assert sampler.sample_once() is None
    assert len([r for r in caplog.records if "sensor fell off" in r.getMessage()]) == 1
    assert len(ring) == 0


def test_the_schedule_takes_at_most_one_sample_per_tick_and_stamps_them():
    machine = SimulatedMachine(parse_simulate("1xH200"), seed=1)
    ring = SampleRing()
    sampler = Sampler(machine, ring, interval_s=0.1)
    started = time.monotonic()
    sampler.start()
    time.sleep(1.55)  # the behaviour under test is a rate: samples per tick over a fixed run
    sampler.stop()
    elapsed = time.monotonic() - started
    import json

    stamps = [json.loads(chunk)["ts"] for chunk in ring.read(0).chunks]
    assert 1 <= len(stamps) <= elapsed / 0.1 + 2  # never more than one sample per tick
    assert stamps == sorted(set(stamps))  # stamped in order, never twice
    latest = ring.latest()
    assert latest.simulated is True and latest.seq == len(ring) and latest.workers == ()
    assert isinstance(latest.ts, float)


def test_the_exporter_takes_help_units_and_types_from_the_metric_registry():
    machine = SimulatedMachine(parse_simulate("1xH100"), seed=1)
    ring = SampleRing()
    worker = {"prompt_tokens_total": 1200.0, "ttft_p99_s": 0.25, "vllm_next_thing": 3.0}
    Sampler(machine, ring, workers=lambda: [WorkerSample.of("w1", "", worker)]).sample_once()
    families = _exported(ring, machine)
    for metric in GPU_METRICS:
        family = families["meshdeck_gpu_" + metric.name]
        assert family.documentation == f"{metric.help} ({metric.unit})" and family.type == metric.kind
    ecc = families["meshdeck_gpu_ecc_uncorrected_volatile"]  # NVML's count since the driver loaded
    assert ecc.type == "counter" and ecc.samples[0].name == "meshdeck_gpu_ecc_uncorrected_volatile_total"
    assert (
        families["meshdeck_gpu_nvlink_link_rx_bytes_per_s"].documentation
        == "NVLink data received on one link (bytes/s)"
    )
    assert families["meshdeck_host_cpu_pct"].documentation == "CPU busy share, all cores (%)"
    tokens = families["meshdeck_worker_prompt_tokens"]  # a counter: its samples are named ..._total
    assert tokens.type == "counter" and tokens.samples[0].name == "meshdeck_worker_prompt_tokens_total"
    assert tokens.documentation == "Prompt tokens processed (tokens)" and tokens.samples[0].value == 1200.0
    assert families["meshdeck_worker_ttft_p99_s"].documentation.endswith("(s)")
    unknown = families["meshdeck_worker_vllm_next_thing"]  # a newer agent's name still flows, unitless
    assert unknown.type == "gauge" and "not in this agent's metric registry" in unknown.documentation
