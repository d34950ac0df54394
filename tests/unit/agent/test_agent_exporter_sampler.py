"""The Prometheus exporter serves the newest sample per GPU, link, NIC and worker; the sampler keeps
its schedule, survives a failing source and stamps every sample."""

from __future__ import annotations

import logging
import time
import urllib.request

import pytest
from meshdeck_agent.exporter import Exporter, parse_listen
from meshdeck_agent.gpu.catalog import parse_simulate
from meshdeck_agent.ring import SampleRing
from meshdeck_agent.sampler import Sampler
from meshdeck_agent.simmachine import SimulatedMachine
from prometheus_client.parser import text_string_to_metric_families


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_exporter_serves_gpu_link_nic_host_and_worker_series():
    machine = SimulatedMachine(parse_simulate("2xH100"), seed=1)
    ring = SampleRing()
    sampler = Sampler(
        machine, ring, workers=lambda: [{"id": "w1", "engine": "0", "metrics": {"kv_cache_usage_perc": 0.25, "up": 1}}]
    )
    sampler.sample_once()
    exporter = Exporter(ring, machine)
    exporter.start("127.0.0.1:0")
    try:
        host, port = exporter.address
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as reply:
            families = _families(reply.read().decode())
    finally:
        exporter.stop()
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

    def read(self, now: float) -> dict:
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
    time.sleep(1.55)
    sampler.stop()
    elapsed = time.monotonic() - started
    import json

    stamps = [json.loads(chunk)["ts"] for chunk in ring.read(0).chunks]
    assert 1 <= len(stamps) <= elapsed / 0.1 + 2  # never more than one sample per tick
    assert stamps == sorted(set(stamps))  # stamped in order, never twice
    latest = ring.latest()
    assert latest["simulated"] is True and latest["seq"] == len(ring) and latest["workers"] == []
    assert isinstance(latest["ts"], float)
