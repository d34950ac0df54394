"""LatestValues keeps the newest value of a few series per host, without history: a GPU's ECC counts, which
the fleet view shows and no chart draws."""

from __future__ import annotations

import math

from meshdeck.core.samples import Device
from meshdeck.services.synthetic_samples import sample_batch
from meshdeck.ui.charts.latest_values import LatestValues
from meshdeck.ui.charts.live_metrics import LiveMetrics
from wire_samples import wire_sample

T0 = 1_764_480_000.0
ECC = frozenset({"ecc_uncorrected_volatile", "ecc_corrected_volatile"})


def _sample(seq: int, **per_gpu: tuple[int | None, int | None]) -> dict:
    sample = wire_sample(seq, T0 + seq, gpus=4, nvlinks=1, nics=1, workers=0)
    for gpu in sample["gpus"]:
        uncorrected, corrected = per_gpu.get(f"gpu{gpu['index']}", (0, 0))
        gpu.update(ecc_uncorrected_volatile=uncorrected, ecc_corrected_volatile=corrected)
    return sample


def test_only_the_newest_sample_counts_and_a_series_it_left_out_is_no_data() -> None:
    latest = LatestValues(ECC)
    latest.ingest("h", sample_batch([_sample(1, gpu2=(1, 3)), _sample(2, gpu2=(2, 3), gpu3=(None, None))]))
    uncorrected = latest.gpu_values("h", "ecc_uncorrected_volatile", (0, 1, 2, 3, 7))
    assert uncorrected[:3].tolist() == [0.0, 0.0, 2.0] and math.isnan(uncorrected[3]) and math.isnan(uncorrected[4])
    assert latest.gpu_values("h", "ecc_corrected_volatile", (2,)).tolist() == [3.0]
    assert math.isnan(latest.gpu_values("other", "ecc_corrected_volatile", (0,))[0])  # a host never seen


def test_a_host_version_moves_only_when_its_newest_values_change() -> None:
    latest = LatestValues(ECC)
    assert latest.host_version("h") == 0
    latest.ingest("h", sample_batch([_sample(1)]))
    first = latest.host_version("h")
    latest.ingest("h", sample_batch([_sample(2)]))  # the same counts a second later
    assert latest.host_version("h") == first > 0
    latest.ingest("h", sample_batch([_sample(3, gpu1=(0, 1))]))
    assert latest.host_version("h") > first and latest.host_version("other") == 0


def test_it_wants_its_metrics_of_a_gpu_and_the_live_rings_keep_none_of_them() -> None:
    latest, live = LatestValues(ECC), LiveMetrics(keep_metrics=frozenset({"power_w"}))
    assert latest.wants((Device.gpu(3), "ecc_uncorrected_volatile"))
    assert not latest.wants((Device.gpu(3), "power_w")) and not live.wants((Device.gpu(3), "ecc_corrected_volatile"))
    batch = sample_batch([_sample(1, gpu0=(1, 0))])
    latest.ingest("h", batch)
    live.ingest("h", batch)
    assert latest.gpu_values("h", "ecc_uncorrected_volatile", (0,)).tolist() == [1.0]
    assert {metric for _, metric in live.series_ids("h")} == {"power_w"}
