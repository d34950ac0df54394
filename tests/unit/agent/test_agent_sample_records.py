"""The agent builds every sample as the records the app decodes (wire_sample.py), serialised once where
the ring stores it: the wire keeps its keys and number forms, and decodes back to the very records."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

from fake_pynvml import build
from meshdeck_agent.gpu.catalog import parse_simulate
from meshdeck_agent.gpu.nvml import Nvml, NvmlGpus
from meshdeck_agent.metric_registry import GPU_METRICS
from meshdeck_agent.ring import SampleRing
from meshdeck_agent.sampler import Sampler
from meshdeck_agent.sim.machine import SimulatedMachine
from meshdeck_agent.wire_sample import Sample, WorkerSample

WIRE_GPU_KEYS = {
    "index",
    "uuid",
    *(m.name for m in GPU_METRICS),
    "nvlink_links",
    "xid_events",
    "ecc_uncorrected_volatile",
    "remapped_rows_pending",
    "processes",
}


def _stored(ring: SampleRing) -> list[dict]:
    return [json.loads(chunk) for chunk in ring.read(0).chunks]


def test_a_stored_simulated_sample_keeps_the_wire_keys_and_decodes_to_the_record_the_agent_built():
    machine = SimulatedMachine(parse_simulate("2xH200"), seed=4)
    ring = SampleRing()
    scraped = WorkerSample.of("w1", "0", {"up": 1, "kv_cache_usage_perc": 0.5, "prompt_tokens_per_s": None})
    sampler = Sampler(machine, ring, workers=lambda: [scraped], clock=lambda: 1_764_480_000.25)
    seq = sampler.sample_once()
    [wire] = _stored(ring)
    assert set(wire) == {"seq", "ts", "simulated", "gpus", "host", "nics", "workers"} and wire["seq"] == seq
    assert all(set(gpu) == WIRE_GPU_KEYS for gpu in wire["gpus"])
    assert set(wire["host"]) == {"cpu_pct", "ram_used_bytes", "ram_total_bytes"}
    assert set(wire["nics"][0]) == {"name", "kind", "tx_bytes_per_s", "rx_bytes_per_s"}
    assert wire["workers"] == [{"id": "w1", "engine": "0", "metrics": {"up": 1, "kv_cache_usage_perc": 0.5}}]
    assert isinstance(wire["gpus"][0]["memory_used_bytes"], int)  # integers stay integers on the wire
    assert isinstance(wire["gpus"][0]["nvlink_links"][0], list) and wire["simulated"] is True
    assert Sample.from_wire(wire) == ring.latest()  # the app reads back exactly what the agent built


DELLA = json.loads((Path(__file__).resolve().parents[2] / "fakes" / "nvml_capture_h100_della.json").read_text())


def test_an_nvml_sample_with_its_remapped_rows_round_trips():
    gpus = NvmlGpus(Nvml(build(copy.deepcopy(DELLA))))
    gpus.read()
    [reading] = gpus.read()[:1]
    assert reading.remapped_rows_pending is False and reading.remapped_rows_correctable is not None
    sample = Sample(3, 1_764_480_000.0, False, gpus=(reading,))
    wire = json.loads(json.dumps(sample.to_wire()))
    assert {"remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_failure"} <= set(wire["gpus"][0])
    assert Sample.from_wire(wire) == sample


def test_ecc_counts_round_trip_and_a_gpu_without_ecc_stays_null_on_the_wire():
    data = copy.deepcopy(DELLA)
    data["devices"].append(copy.deepcopy(data["devices"][0]))
    data["devices"][0].update(ecc_uncorrected_volatile=1, ecc_corrected_volatile=40)
    data["devices"][1].update(ecc_uncorrected_volatile=None, ecc_corrected_volatile=None)  # NOT_SUPPORTED
    with_ecc, without = NvmlGpus(Nvml(build(data))).read()
    sample = Sample(4, 1_764_480_000.0, False, gpus=(with_ecc, without))
    wire = json.loads(json.dumps(sample.to_wire()))
    assert (wire["gpus"][0]["ecc_uncorrected_volatile"], wire["gpus"][0]["ecc_corrected_volatile"]) == (1, 40)
    assert (wire["gpus"][1]["ecc_uncorrected_volatile"], wire["gpus"][1]["ecc_corrected_volatile"]) == (None, None)
    assert Sample.from_wire(wire) == sample


def test_a_worker_record_leaves_out_what_a_scrape_could_not_tell():
    entry = WorkerSample.of("w1", "", {"up": 1, "ttft_mean_s": None, "e2e_p50_s": math.nan, "itl_p99_s": math.inf})
    assert entry.metrics == (("up", 1),) and entry.value("ttft_mean_s") is None
