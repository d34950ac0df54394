"""The one flatten: decoded wire samples of one host -> a columnar `SampleBatch` with typed device keys.

Runs once per delivery on the thread that takes the host's events (remote/sample_pump.py), right after
the sample gate; the store and the charts consume the batch as it is. Series keys are interned (one `(Device, metric)` tuple per
series, reused for every sample), so a batch costs one float per reported value plus its column list.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from functools import lru_cache

import numpy as np
from meshdeck_agent.metric_registry import GPU_METRICS, HOST_METRICS, NIC_METRICS, NVLINK_METRICS
from meshdeck_agent.wire_sample import Sample

from meshdeck.core.samples import HOST, Device, SampleBatch, SeriesKey

_GPU_NAMES = tuple(m.name for m in GPU_METRICS)
_LINK_TX, _LINK_RX = (m.name for m in NVLINK_METRICS)  # the (tx, rx) pair of each link
_NIC_TX, _NIC_RX = (m.name for m in NIC_METRICS)
_HOST_KEYS = tuple((HOST, m.name) for m in HOST_METRICS)


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


Shape = tuple[tuple[tuple[int, int], ...], bool, tuple[str, ...], tuple[tuple[str, str, tuple[str, ...]], ...]]


def _shape(sample: Sample) -> Shape:
    """What decides a sample's series keys and their order: its GPUs (index, NVLink links), whether it has
    host values, its NICs, its workers' metrics. Samples of one host nearly always share it."""
    return (
        tuple((gpu.index, len(gpu.nvlink_links)) for gpu in sample.gpus),
        sample.host is not None,
        tuple(nic.name for nic in sample.nics),
        tuple((w.id, w.engine, tuple(metric for metric, _ in w.metrics)) for w in sample.workers),
    )


@lru_cache(maxsize=1024)
def _shape_keys(shape: Shape) -> tuple[SeriesKey, ...]:
    """The series keys of every value a sample of `shape` has (reported or null), in `_values` order."""
    gpus, has_host, nics, workers = shape
    keys: list[SeriesKey] = []
    for index, links in gpus:
        keys += _gpu_keys(index)
        keys += _gpu_link_keys(index, links)
    if has_host:
        keys += _HOST_KEYS
    for name in nics:
        keys += _nic_keys(name)
    for worker_id, engine, metrics in workers:
        device = _worker_device(worker_id, engine)
        keys += ((device, metric) for metric in metrics)
    return tuple(keys)


def _values(sample: Sample) -> list[float | None]:
    """Every value of a sample in `_shape_keys` order, None where it reported none."""
    values: list[float | None] = []
    for gpu in sample.gpus:
        values += gpu.values
        for pair in gpu.nvlink_links:
            values += pair
    if sample.host is not None:
        values += sample.host.values
    for nic in sample.nics:
        values.append(nic.tx_bytes_per_s)
        values.append(nic.rx_bytes_per_s)
    for worker in sample.workers:
        values += (value for _, value in worker.metrics)
    return values


@lru_cache(maxsize=4096)
def _gpu_link_keys(index: int, links: int) -> tuple[SeriesKey, ...]:
    return tuple(key for link in range(links) for key in _link_keys(index, link))


def batch_from_samples(samples: Sequence[Sample]) -> SampleBatch:
    """One batch of `samples` (already in seq order): a column per series any of them reported.

    The columns come from the samples' shape (`_shape`, worked out once per shape and cached): when every
    sample has the one shape, the columns are its keys and the values are copied in whole; otherwise each
    shape's keys are mapped onto the union. A series no sample reported gets no column."""
    shapes = [_shape(sample) for sample in samples]
    if shapes and all(shape == shapes[0] for shape in shapes):
        series = _shape_keys(shapes[0])
        flat = [value for sample in samples for value in _values(sample)]
    else:
        columns: dict[SeriesKey, int] = {}
        placed = [
            ([columns.setdefault(key, len(columns)) for key in _shape_keys(shape)], _values(sample))
            for shape, sample in zip(shapes, samples, strict=True)
        ]
        series = tuple(columns)
        flat = [None] * (len(series) * len(samples))
        for i, (row_columns, values) in enumerate(placed):
            base = i * len(series)
            for column, value in zip(row_columns, values, strict=True):
                if value is not None:
                    flat[base + column] = value
    # None (not reported) becomes NaN in the conversion; a series no sample reported loses its column
    matrix = np.array(flat, dtype=np.float64).reshape(len(samples), len(series))
    reported = ~np.isnan(matrix).all(axis=0)
    if not reported.all():  # a series every sample left null: no column, as if it was never named
        matrix = matrix[:, reported]
        series = tuple(series[column] for column in np.flatnonzero(reported).tolist())
    flattened = array("d")
    flattened.frombytes(matrix.tobytes())
    return SampleBatch(
        seqs=tuple(s.seq for s in samples),
        times=tuple(s.ts for s in samples),
        series=series,
        values=flattened,
        simulated=any(s.simulated for s in samples),
    )
