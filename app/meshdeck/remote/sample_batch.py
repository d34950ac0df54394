"""The one flatten: decoded wire samples of one host -> a columnar `SampleBatch` with typed device keys.

Runs once per delivery on the host's supervisor thread, right after the sample gate; the store and
the charts consume the batch as it is. Series keys are interned (one `(Device, metric)` tuple per
series, reused for every sample), so a batch costs one float per reported value plus its column list.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Sequence
from functools import lru_cache

from meshdeck_agent.metric_registry import GPU_METRICS, HOST_METRICS, NIC_METRICS, NVLINK_METRICS
from meshdeck_agent.wire_sample import Sample

from meshdeck.core.samples import HOST, Device, SampleBatch, SeriesKey

_GPU_NAMES = tuple(m.name for m in GPU_METRICS)
_LINK_TX, _LINK_RX = (m.name for m in NVLINK_METRICS)  # the (tx, rx) pair of each link
_NIC_TX, _NIC_RX = (m.name for m in NIC_METRICS)
_HOST_KEYS = tuple((HOST, m.name) for m in HOST_METRICS)
_NAN = array("d", [math.nan])


@lru_cache(maxsize=4096)
def _gpu_keys(index: int) -> tuple[SeriesKey, ...]:
    device = Device.gpu(index)
    return tuple((device, name) for name in _GPU_NAMES)


@lru_cache(maxsize=65536)
def _link_keys(index: int, link: int) -> tuple[SeriesKey, SeriesKey]:
    device = Device.nvlink(index, link)
    return (device, _LINK_TX), (device, _LINK_RX)


@lru_cache(maxsize=4096)
def _nic_keys(name: str) -> tuple[SeriesKey, SeriesKey]:
    device = Device.nic(name)
    return (device, _NIC_TX), (device, _NIC_RX)


@lru_cache(maxsize=4096)
def _worker_device(worker_id: str, engine: str) -> Device:
    return Device.worker(worker_id, engine)


def reported_values(sample: Sample) -> Iterator[tuple[SeriesKey, float]]:
    """Every number a sample reports, with its series key; nulls are skipped."""
    for gpu in sample.gpus:
        for key, value in zip(_gpu_keys(gpu.index), gpu.values, strict=True):
            if value is not None:
                yield key, value
        for link, (tx, rx) in enumerate(gpu.nvlink_links):
            tx_key, rx_key = _link_keys(gpu.index, link)
            if tx is not None:
                yield tx_key, tx
            if rx is not None:
                yield rx_key, rx
    if sample.host is not None:
        for key, value in zip(_HOST_KEYS, sample.host.values, strict=True):
            if value is not None:
                yield key, value
    for nic in sample.nics:
        tx_key, rx_key = _nic_keys(nic.name)
        if nic.tx_bytes_per_s is not None:
            yield tx_key, nic.tx_bytes_per_s
        if nic.rx_bytes_per_s is not None:
            yield rx_key, nic.rx_bytes_per_s
    for worker in sample.workers:
        device = _worker_device(worker.id, worker.engine)
        for metric, value in worker.metrics:
            yield (device, metric), value


def batch_from_samples(samples: Sequence[Sample]) -> SampleBatch:
    """One batch of `samples` (already in seq order): a column per series any of them reported."""
    columns: dict[SeriesKey, int] = {}
    cells: list[list[tuple[int, float]]] = []
    for sample in samples:
        row = []
        for key, value in reported_values(sample):
            column = columns.get(key)
            if column is None:
                column = columns[key] = len(columns)
            row.append((column, value))
        cells.append(row)
    width = len(columns)
    values = _NAN * (width * len(samples))
    for i, row in enumerate(cells):
        base = i * width
        for column, value in row:
            values[base + column] = value
    return SampleBatch(
        seqs=tuple(s.seq for s in samples),
        times=tuple(s.ts for s in samples),
        series=tuple(columns),
        values=values,
        simulated=any(s.simulated for s in samples),
    )
