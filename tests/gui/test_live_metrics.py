"""LiveMetrics ingests wire samples (protocol.py's SAMPLE) and serves chart windows."""

from __future__ import annotations

import math

import numpy as np
from meshdeck.ui.charts.live_metrics import LiveMetrics, gpu_index, rate_metric
from wire_samples import GIB, wire_sample, wire_samples


def test_ingest_names_series_like_flatten_sample_and_skips_per_link_nvlink_rows() -> None:
    metrics = LiveMetrics()
    metrics.ingest("demo-a", [wire_sample(1, 1000.0, gpus=2)])
    series = set(metrics.series_ids("demo-a"))
    assert ("gpu1", "memory_used_bytes") in series
    assert ("gpu0", "nvlink_tx_bytes_per_s") in series
    assert ("nic:mlx5_0/1", "rx_bytes_per_s") in series
    assert ("worker:w0/engine:0", "kv_cache_usage_perc") in series
    assert ("host", "cpu_pct") in series
    assert not any("/nvlink" in device for device, _ in series)
    assert metrics.gpu_indices("demo-a") == [0, 1]
    assert metrics.is_simulated("demo-a")


def test_counters_become_rates_between_samples_and_a_reset_leaves_a_gap() -> None:
    metrics = LiveMetrics()
    samples = wire_samples(3, 1000.0, gpus=1)
    reset = wire_sample(4, 1003.0, gpus=1)
    reset["workers"][0]["metrics"]["generation_tokens_total"] = 10.0  # engine restarted
    metrics.ingest("h", [*samples, reset])
    times, values = metrics.window("h", [("worker:w0/engine:0", rate_metric("generation_tokens_total"))], 300, 1003.0)
    assert times.tolist() == [1000.0, 1001.0, 1002.0, 1003.0]
    assert math.isnan(values[0][0])  # no previous sample
    assert values[0][1:3].tolist() == [2500.0, 2500.0]  # 2500 tokens per seq, one seq per second
    assert math.isnan(values[0][3])


def test_keep_metrics_limits_what_is_stored() -> None:
    metrics = LiveMetrics(keep_metrics=frozenset({"memory_used_bytes", "generation_tokens_per_s"}))
    metrics.ingest("h", wire_samples(2, 1.0, gpus=2))
    assert {metric for _, metric in metrics.series_ids("h")} == {"memory_used_bytes", "generation_tokens_per_s"}


def test_a_sample_older_than_the_newest_is_counted_and_dropped_so_time_stays_sorted() -> None:
    metrics = LiveMetrics()
    kept = metrics.ingest("h", [wire_sample(1, 10.0), wire_sample(2, 12.0), wire_sample(3, 11.0)])
    assert kept == 2
    times, _ = metrics.window("h", [("gpu0", "memory_used_bytes")], 300, 12.0)
    assert times.tolist() == [10.0, 12.0]


def test_samples_without_a_numeric_ts_are_ignored() -> None:
    metrics = LiveMetrics()
    assert metrics.ingest("h", [{"seq": 1, "ts": None}, {"seq": 2, "ts": True}]) == 0


def test_windows_up_to_an_hour_read_every_sample_and_the_day_window_reads_min_max_buckets() -> None:
    metrics = LiveMetrics(coarse_bucket_s=60.0)
    samples = wire_samples(7200, 0.0, gpus=1, memory_used_bytes=100 * GIB)
    samples[5000]["gpus"][0]["memory_used_bytes"] = 140 * GIB  # one-second spike
    metrics.ingest("h", samples)
    end = metrics.latest_time()
    hour_x, _ = metrics.window("h", [("gpu0", "memory_used_bytes")], 3600, end)
    assert len(hour_x) == 3601  # both ends of the hour included
    day_x, day_y = metrics.window("h", [("gpu0", "memory_used_bytes")], 86400, end)
    assert len(day_x) == 2 * 120  # 2 h of 60 s buckets, min and max each
    assert np.nanmax(day_y) == np.float32(140 * GIB)  # the spike survives the buckets


def test_gpu_index_reads_only_plain_gpu_devices() -> None:
    assert gpu_index("gpu12") == 12
    assert gpu_index("gpu1/nvlink3") is None
    assert gpu_index("worker:gpu1") is None
