"""LiveMetrics ingests sample batches (checked and flattened once by the sample gate) and serves chart windows."""

from __future__ import annotations

import math

import numpy as np
from meshdeck.core.samples import HOST, Device
from meshdeck.services.synthetic_samples import sample_batch
from meshdeck.ui.charts.live_metrics import LiveMetrics
from wire_samples import GIB, wire_batch, wire_sample

T0 = 1_764_480_000.0
MEMORY = (Device.gpu(0), "memory_used_bytes")


def test_ingest_keys_series_by_typed_device_and_skips_per_link_nvlink_series() -> None:
    metrics = LiveMetrics()
    metrics.ingest("demo-a", wire_batch(1, T0, gpus=2))
    series = set(metrics.series_ids("demo-a"))
    assert (Device.gpu(1), "memory_used_bytes") in series
    assert (Device.gpu(0), "nvlink_tx_bytes_per_s") in series
    assert (Device.nic("mlx5_0/1"), "rx_bytes_per_s") in series
    assert (Device.worker("w0", "0"), "kv_cache_usage_perc") in series
    assert (HOST, "cpu_pct") in series
    assert not any(device.kind == "nvlink" for device, _ in series)
    assert metrics.gpu_indices("demo-a") == [0, 1]
    assert metrics.devices("demo-a", "worker") == [Device.worker("w0", "0")]
    assert metrics.is_simulated("demo-a")


def test_rates_are_the_agents_own_and_are_never_derived_from_counters_here() -> None:
    metrics = LiveMetrics()
    samples = [wire_sample(seq, T0 + seq, gpus=1) for seq in (1, 2, 3)]
    samples[1]["workers"][0]["metrics"]["generation_tokens_per_s"] = None  # the agent had no rate for seq 2
    metrics.ingest("h", sample_batch(samples))
    key = (Device.worker("w0", "0"), "generation_tokens_per_s")
    times, values = metrics.window("h", [key], 300, T0 + 3)
    assert times.tolist() == [T0 + 1, T0 + 2, T0 + 3]
    assert values[0][0] == 2500.0 and math.isnan(values[0][1]) and values[0][2] == 2500.0


def test_keep_metrics_limits_what_is_stored() -> None:
    metrics = LiveMetrics(keep_metrics=frozenset({"memory_used_bytes", "generation_tokens_per_s"}))
    metrics.ingest("h", wire_batch(2, T0, gpus=2))
    assert {metric for _, metric in metrics.series_ids("h")} == {"memory_used_bytes", "generation_tokens_per_s"}


def test_a_sample_older_than_the_newest_is_counted_and_dropped_so_time_stays_sorted() -> None:
    metrics = LiveMetrics()
    batch = sample_batch([wire_sample(1, T0 + 10), wire_sample(2, T0 + 12), wire_sample(3, T0 + 11)])
    assert metrics.ingest("h", batch) == 2
    times, _ = metrics.window("h", [MEMORY], 300, T0 + 12)
    assert times.tolist() == [T0 + 10, T0 + 12]


def test_a_gap_before_a_batch_is_drawn_as_a_gap_not_a_line_across_it() -> None:
    metrics = LiveMetrics()
    metrics.ingest("h", wire_batch(3, T0, gpus=1))
    metrics.ingest("h", wire_batch(2, T0 + 60, gpus=1), gap_before=True)
    times, values = metrics.window("h", [MEMORY], 300, T0 + 61)
    assert times.tolist() == [T0, T0 + 1, T0 + 2, (T0 + 2 + T0 + 60) / 2, T0 + 60, T0 + 61]
    assert math.isnan(values[0][3]) and not np.isnan(values[0][[0, 1, 2, 4, 5]]).any()


def test_windows_up_to_an_hour_read_every_sample_and_the_day_window_reads_min_max_buckets() -> None:
    metrics = LiveMetrics(coarse_bucket_s=60.0)
    samples = [wire_sample(seq + 1, T0 + seq, gpus=1, memory_used_bytes=100 * GIB) for seq in range(7200)]
    samples[5000]["gpus"][0]["memory_used_bytes"] = 140 * GIB  # one-second spike
    metrics.ingest("h", sample_batch(samples))
    end = metrics.latest_time()
    hour_x, _ = metrics.window("h", [MEMORY], 3600, end)
    assert len(hour_x) == 3601  # both ends of the hour included
    day_x, day_y = metrics.window("h", [MEMORY], 86400, end)
    assert len(day_x) == 2 * 120  # 2 h of 60 s buckets, min and max each
    assert np.nanmax(day_y) == np.float32(140 * GIB)  # the spike survives the buckets


def test_batches_ingested_column_wise_give_the_same_windows_as_sample_by_sample_dicts() -> None:
    """The layout fast path against the rings' own dict appends, with values missing at random, series
    appearing late, a layout change and a clock step back."""
    from array import array

    from meshdeck.core.samples import SampleBatch
    from meshdeck.ui.charts.ring import BucketRing, SeriesRing

    rng = np.random.default_rng(5)
    metrics = LiveMetrics(fine_capacity=64, coarse_bucket_s=10.0, coarse_capacity=32)
    fine: SeriesRing = SeriesRing(64)
    coarse: BucketRing = BucketRing(10.0, 32)
    wide = wire_batch(1, T0, gpus=2)
    narrow = wire_batch(1, T0, gpus=1)
    last = -math.inf
    t = T0
    for step in range(120):
        template = narrow if step % 40 < 10 else wide
        t += 1.0 if step != 70 else -5.0  # one step back: dropped by both
        values = np.asarray(template.values, dtype=np.float64).copy()
        values[rng.random(values.size) < (0.9 if step < 15 else 0.2)] = np.nan
        batch = SampleBatch((step + 1,), (t,), template.series, array("d", values.tolist()))
        metrics.ingest("h", batch)
        if t > last:
            row = {
                key: v for key, v in zip(template.series, values.tolist(), strict=True) if v == v and metrics.wants(key)
            }
            fine.append(t, row)
            coarse.append(t, row)
            last = t
    keys = sorted(set(fine.keys), key=repr)
    assert sorted(metrics.series_ids("h"), key=repr) == keys
    times, got = metrics.window("h", keys, 60, last)
    want_times, want = fine.matrix(keys, last - 60)
    np.testing.assert_array_equal(times, want_times)
    np.testing.assert_array_equal(got, want)
    times, got = metrics.window("h", keys, 86_400, last)
    want_times, want = coarse.envelope(keys, last - 86_400)
    np.testing.assert_array_equal(times, want_times)
    np.testing.assert_array_equal(got, want)
