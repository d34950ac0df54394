"""Fabricated agent samples in the exact wire shape of meshdeck_agent.protocol's SAMPLE: built as the
agent's records (meshdeck_agent.wire_sample) and serialised as the agent's ring serialises them.

Used where a test or benchmark needs many hosts or hours of samples faster than a real simulated
agent produces them (the agent samples at wall-clock pace). Values move like a serving node:
memory near the plan, utilization and links following a load wave. Every sample says
`simulated: true`, as a simulated agent's do.
"""

from __future__ import annotations

import math
from typing import Any

from meshdeck.core.samples import SampleBatch
from meshdeck.services.synthetic_samples import sample_batch
from meshdeck_agent.wire_sample import GpuSample, HostSample, NicSample, Sample, WorkerSample

GIB = 2**30


def wire_sample(
    seq: int,
    ts: float,
    gpus: int = 8,
    nvlinks: int = 18,
    nics: int = 4,
    workers: int = 1,
    memory_used_bytes: float = 120 * GIB,
    phase: float = 0.0,
) -> dict[str, Any]:
    load = 0.5 + 0.45 * math.sin(ts / 60.0 + phase)
    gpu_list = []
    for index in range(gpus):
        wobble = 0.02 * math.sin(ts / 7.0 + index)
        link_rate = 20e9 * load * (1 + wobble)
        gpu_list.append(
            GpuSample.of(
                index,
                f"GPU-{index:08x}-sim",
                nvlink_links=[(link_rate / nvlinks, link_rate * 0.98 / nvlinks)] * nvlinks,
                memory_used_bytes=memory_used_bytes * (1 + wobble / 10),
                memory_total_bytes=143771 * 2**20,
                memory_reserved_bytes=512 * 2**20,
                utilization_pct=100 * load,
                memory_utilization_pct=60 * load,
                power_w=250 + 400 * load,
                power_limit_w=700,
                temperature_c=45 + 25 * load,
                sm_clock_mhz=1980,
                mem_clock_mhz=3201,
                nvlink_tx_bytes_per_s=link_rate,
                nvlink_rx_bytes_per_s=link_rate * 0.98,
                pcie_tx_bytes_per_s=1e9 * load,
                pcie_rx_bytes_per_s=2e9 * load,
                ecc_uncorrected_volatile=0,  # a healthy GPU with ECC on
                ecc_corrected_volatile=0,
            )
        )
    return Sample(
        seq,
        ts,
        True,
        gpus=tuple(gpu_list),
        host=HostSample.of(cpu_pct=30 * load, ram_used_bytes=200 * GIB, ram_total_bytes=2048 * GIB),
        nics=tuple(NicSample(f"mlx5_{n}/1", "infiniband", 40e9 * load, 39e9 * load) for n in range(nics)),
        workers=tuple(
            WorkerSample.of(
                f"w{w}",
                "0",
                {
                    "kv_cache_usage_perc": 0.8 * load,
                    "num_requests_running": round(200 * load),
                    "num_requests_waiting": round(20 * load),
                    "generation_tokens_total": 2500.0 * seq,
                    "prompt_tokens_total": 9000.0 * seq,
                    # the agent's scraper derives the rates (one seq per interval here)
                    "generation_tokens_per_s": 2500.0,
                    "prompt_tokens_per_s": 9000.0,
                },
            )
            for w in range(workers)
        ),
    ).to_wire()


def wire_samples(count: int, start_ts: float, interval_s: float = 1.0, **kwargs: Any) -> list[dict[str, Any]]:
    return [wire_sample(seq + 1, start_ts + seq * interval_s, **kwargs) for seq in range(count)]


def wire_batch(count: int, start_ts: float, interval_s: float = 1.0, **kwargs: Any) -> SampleBatch:
    """`wire_samples` as the console receives them: decoded and flattened by the sample gate's code."""
    return sample_batch(wire_samples(count, start_ts, interval_s, **kwargs))
