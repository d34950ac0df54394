"""The sample ring: seq numbering, paging, eviction with a `dropped` count, and its memory bound."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from meshdeck_agent.ring import SampleRing
from meshdeck_agent.wire_sample import GpuSample, Sample, WorkerSample


def _fill(ring: SampleRing, count: int) -> None:
    for index in range(count):
        ring.append(Sample(0, 1e9 + index, False, gpus=(GpuSample.of(0, None, power_w=index),)))


def test_append_assigns_consecutive_seqs_from_first_seq():
    ring = SampleRing(capacity=100, block_samples=4, first_seq=41)
    _fill(ring, 10)
    read = ring.read(0)
    assert [json.loads(c)["seq"] for c in read.chunks] == list(range(41, 51))
    assert (read.first_seq, read.last_seq) == (41, 50)


def test_read_after_since_seq_spans_sealed_blocks_and_the_open_one():
    ring = SampleRing(capacity=100, block_samples=4)
    _fill(ring, 10)
    read = ring.read(5, limit=3)
    assert [json.loads(c)["seq"] for c in read.chunks] == [6, 7, 8]
    assert read.next_since == 8 and read.dropped == 0
    rest = ring.read(read.next_since)
    assert [json.loads(c)["seq"] for c in rest.chunks] == [9, 10]


def test_reading_past_the_newest_returns_nothing_and_keeps_the_cursor():
    ring = SampleRing(capacity=100, block_samples=4)
    _fill(ring, 3)
    read = ring.read(3)
    assert read.chunks == [] and read.next_since == 3 and read.dropped == 0


def test_oldest_blocks_are_evicted_and_a_late_reader_is_told_how_many_it_lost():
    ring = SampleRing(capacity=20, block_samples=5)
    _fill(ring, 100)
    read = ring.read(10)
    first = json.loads(read.chunks[0])["seq"]
    assert first == read.first_seq and read.first_seq > 11
    assert read.dropped == read.first_seq - 11
    assert len(ring) >= 20  # never fewer than capacity once that many were taken


def test_byte_bound_evicts_even_below_capacity():
    ring = SampleRing(capacity=10_000, block_samples=10, max_bytes=4_000)
    for index in range(2_000):
        noise = "%x" % (index * 2654435761 % 2**32) * 20
        ring.append(Sample(0, 1e9 + index, False, workers=(WorkerSample("w", "", (), error=noise),)))
    assert ring.stats()["block_bytes"] <= 4_000 + 1_500  # at most one block over before eviction
    assert ring.read(0).dropped > 0


def test_max_bytes_of_a_read_is_respected_but_one_sample_always_comes_back():
    ring = SampleRing(capacity=100, block_samples=4)
    _fill(ring, 20)
    small = ring.read(0, max_bytes=1)
    assert len(small.chunks) == 1
    some = ring.read(0, max_bytes=5 * (len(small.chunks[0]) + 1))
    assert len(some.chunks) == 5


def test_latest_is_the_newest_sample_numbered():
    ring = SampleRing()
    assert ring.latest() is None
    _fill(ring, 3)
    assert ring.latest().seq == 3 and ring.latest().gpus[0].value("power_w") == 2


def test_invalid_sizes_are_refused():
    with pytest.raises(ValueError):
        SampleRing(capacity=0)


@pytest.mark.slow
def test_two_hours_of_16_gpu_samples_fit_the_memory_bound_measured_as_rss():
    """7200 samples of a simulated 16xH200 under load: ring bytes and the process's RSS growth."""
    script = r"""
import json, psutil
from meshdeck_agent.gpu.catalog import parse_simulate
from meshdeck_agent.ring import SampleRing
from meshdeck_agent.sampler import Sampler
from meshdeck_agent.sim.machine import SimulatedMachine
from meshdeck_agent.sim.traffic import SimWorkerActivity
busy = [SimWorkerActivity("v", tuple(range(16)), 120 << 30, (1,), False, 0.0, 8000.0, 2000.0, 8, 1, 2, 2, True, 1)]
machine = SimulatedMachine(parse_simulate("16xH200"), seed=3, activity=lambda: busy)
ring = SampleRing()
times = iter(range(1_000_000_000, 1_000_007_200))
sampler = Sampler(machine, ring, clock=lambda: float(next(times)))
process = psutil.Process()
before = process.memory_info().rss
for i in range(7200):
    sampler.sample_once()
print(json.dumps({"stats": ring.stats(), "rss_growth": process.memory_info().rss - before}))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=True)
    report = json.loads(result.stdout)
    stats = report["stats"]
    assert stats["held"] == 7200 and stats["evicted"] == 0  # 2 h at 1 Hz, nothing lost
    assert stats["block_bytes"] < 16 * 1024 * 1024
    assert report["rss_growth"] < 32 * 1024 * 1024
