"""ECC counters past the boundary: the one flatten gives each GPU's volatile ECC counts their own series,
with the registry's unit and kind, and a GPU without ECC gets no series at all (never a 0)."""

from __future__ import annotations

import math

from meshdeck.core.samples import Device
from meshdeck.remote.sample_batch import batch_from_samples
from meshdeck.services import metrics
from meshdeck_agent.wire_sample import GpuSample, Sample

TS = 1_764_482_400.0


def _sample(seq: int, *gpus: GpuSample) -> Sample:
    return Sample.from_wire(Sample(seq, TS + seq, False, gpus=gpus).to_wire())


def test_each_gpus_ecc_counts_are_flattened_as_its_series_and_a_gpu_without_ecc_has_none():
    with_ecc = GpuSample.of(0, "GPU-a", power_w=300.0, ecc_uncorrected_volatile=1, ecc_corrected_volatile=12)
    without = GpuSample.of(1, "GPU-b", power_w=280.0)  # NVML said NOT_SUPPORTED: null on the wire
    batch = batch_from_samples([_sample(1, with_ecc, without), _sample(2, with_ecc, without)])
    values = dict(batch.row(1))
    assert values[(Device.gpu(0), "ecc_uncorrected_volatile")] == 1.0
    assert values[(Device.gpu(0), "ecc_corrected_volatile")] == 12.0
    assert (Device.gpu(1), "ecc_uncorrected_volatile") not in batch.series
    assert (Device.gpu(1), "ecc_corrected_volatile") not in batch.series
    assert values[(Device.gpu(1), "power_w")] == 280.0


def test_ecc_counts_reported_by_one_sample_only_are_nan_in_the_others():
    counted = GpuSample.of(0, "GPU-a", ecc_uncorrected_volatile=3, power_w=1.0)
    unread = GpuSample.of(0, "GPU-a", power_w=1.0)  # the NVML call failed this time
    batch = batch_from_samples([_sample(1, counted), _sample(2, unread)])
    column = batch.series.index((Device.gpu(0), "ecc_uncorrected_volatile"))
    assert batch.values[column] == 3.0 and math.isnan(batch.values[batch.width + column])


def test_ecc_series_are_counters_in_errors():
    for name in ("ecc_uncorrected_volatile", "ecc_corrected_volatile"):
        assert metrics.series_unit("gpu3", name) == "errors"
        assert metrics.metric_of("gpu", name).kind == metrics.COUNTER
