"""Fabricated GPU history in the real wire format, for `meshdeck bench ingest` and the store's tests.

The samples go the way an agent's do: the agent's records serialised to the wire, decoded by the
protocol's `Sample.from_wire` and flattened by the sample gate's `batch_from_samples`, so what is
measured is what the app ingests.
Every sample is marked `"simulated": true`. The shape is the one an 8-GPU server reports: per GPU the
twelve scalar metrics below, with plausible H200 magnitudes (141 GB of HBM, 700 W, ~1980 MHz) that
vary from second to second, deterministic for a given seed. With `nvlink_links=18` each GPU also reports
its 18 NVLink links (tx, rx) and their per-GPU sums, as `meshdeck-agent --simulate 8xH200` does: 8 x
(14 + 36) = 400 rows, the GPU part of the 421-row sample of issue 14's fleet measurements.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Any

from meshdeck_agent.metric_registry import GPU_METRICS as REGISTRY_GPU_METRICS
from meshdeck_agent.wire_sample import GpuSample, Sample

from meshdeck.core.samples import SampleBatch
from meshdeck.remote.sample_batch import batch_from_samples
from meshdeck.store.ingest import SampleRow
from meshdeck.store.writer import BatchRows

H200_MEMORY_BYTES = 141 * 1024**3
# The GPU metrics every synthetic GPU reports: the registry's, less NVLink (a synthetic GPU has no links)
# and less the ECC counters (added to the registry after the store's sizes and tests were set on these
# twelve; a real agent sends those two more per GPU).
GPU_METRICS = tuple(
    m.name for m in REGISTRY_GPU_METRICS if not m.name.startswith("nvlink_") and not m.name.startswith("ecc_")
)


def host_name(index: int) -> str:
    return f"gpu-{index:02d}"


def wire_sample(
    seq: int, ts: float, *, gpus: int = 8, rng: random.Random | None = None, nvlink_links: int = 0
) -> dict[str, Any]:
    """One SAMPLE as an agent sends it: its records (the agent's, wire_sample.py) serialised as the agent's
    ring serialises them, `gpus` GPUs with the twelve GPU_METRICS each (and, with `nvlink_links`, that many
    links per GPU plus the two per-GPU NVLink sums)."""
    rng = rng or random.Random(seq)
    phase = math.sin(ts / 300.0)
    devices = []
    for index in range(gpus):
        load = min(100.0, max(0.0, 70.0 + 25.0 * phase + rng.uniform(-5.0, 5.0)))
        links = [(round(rng.uniform(1e8, 2e9)), round(rng.uniform(1e8, 2e9))) for _ in range(nvlink_links)]
        tx_sum = float(sum(tx for tx, _ in links)) if links else None
        rx_sum = float(sum(rx for _, rx in links)) if links else None
        devices.append(
            GpuSample.of(
                index,
                f"GPU-simulated-{index}",
                nvlink_links=links,
                nvlink_tx_bytes_per_s=tx_sum,
                nvlink_rx_bytes_per_s=rx_sum,
                memory_used_bytes=int(H200_MEMORY_BYTES * (0.80 + 0.1 * phase)) + rng.randrange(1 << 20),
                memory_total_bytes=H200_MEMORY_BYTES,
                memory_reserved_bytes=512 * 1024**2,
                utilization_pct=round(load),
                memory_utilization_pct=round(load * 0.6),
                power_w=round(120.0 + 5.6 * load + rng.uniform(-8.0, 8.0), 2),
                power_limit_w=700.0,
                temperature_c=round(38 + load * 0.35),
                sm_clock_mhz=1980 if load > 5 else 345,
                mem_clock_mhz=3201,
                pcie_tx_bytes_per_s=round(rng.uniform(0.5e9, 2.0e9)),
                pcie_rx_bytes_per_s=round(rng.uniform(0.5e9, 2.0e9)),
            )
        )
    return Sample(seq, ts, True, gpus=tuple(devices)).to_wire()


def sample_batch(samples: list[dict[str, Any]]) -> SampleBatch:
    """Wire samples as the app receives them: decoded and flattened once."""
    return batch_from_samples([Sample.from_wire(sample) for sample in samples])


def fleet_batches(
    hosts: int,
    seconds: int,
    *,
    start_ts: float,
    gpus: int = 8,
    first_seq: int = 1,
    seed: int = 0,
    nvlink_links: int = 0,
) -> Iterator[tuple[str, list[SampleRow]]]:
    """(host, flattened rows of one sample) for every second and host, in arrival order (second by second)."""
    rng = random.Random(seed)
    for second in range(seconds):
        seq = first_seq + second
        for index in range(hosts):
            sample = wire_sample(seq, start_ts + second, gpus=gpus, rng=rng, nvlink_links=nvlink_links)
            yield host_name(index), list(BatchRows(sample_batch([sample])))
