"""The app reads units from the agent's metric registry (services.metrics): every series a host reports
has the registry's unit, the history export carries it, and a metric the registry lacks still flows
through decode, flatten, store and export, unitless."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from meshdeck.core.samples import DEVICE_KINDS, Device
from meshdeck.remote.sample_batch import batch_from_samples
from meshdeck.services import metrics
from meshdeck.services.history import export_history
from meshdeck.services.synthetic_samples import wire_sample
from meshdeck.store.database import open_database
from meshdeck.store.writer import SampleWriter
from meshdeck_agent.wire_sample import Sample

TS = 1_764_482_400.0


def test_the_registry_scopes_are_the_device_kinds_of_the_series_keys():
    assert set(metrics.SCOPES) == set(DEVICE_KINDS)


def test_a_stored_series_name_has_its_metric_registry_unit():
    assert metrics.series_unit("gpu3", "memory_used_bytes") == "bytes"
    assert metrics.series_unit("gpu3/nvlink7", "nvlink_tx_bytes_per_s") == "bytes/s"
    assert metrics.series_unit("host", "cpu_pct") == "%"
    assert metrics.series_unit("nic:mlx5_0/1", "rx_bytes_per_s") == "bytes/s"
    assert metrics.series_unit("worker:w1/engine:0", "kv_cache_usage_perc") == "ratio"
    assert metrics.series_unit("worker:w1", "ttft_p99_s") == "s"
    assert metrics.series_unit("gpu3", "cpu_pct") == ""  # a host metric on a GPU is not registered
    assert metrics.series_unit("not a device", "power_w") == ""
    assert metrics.metric_of("worker", "prompt_tokens_total").kind == metrics.COUNTER


def _sample_with_a_new_worker_metric(seq: int) -> dict:
    sample = wire_sample(seq, TS + seq, gpus=1)
    sample["workers"] = [{"id": "w1", "engine": "", "metrics": {"vllm_next_thing": 7.0, "num_requests_running": 3}}]
    return sample


def test_a_metric_the_registry_lacks_is_decoded_flattened_stored_and_exported_unitless(tmp_path: Path):
    batch = batch_from_samples([Sample.from_wire(_sample_with_a_new_worker_metric(s)) for s in (1, 2)])
    assert (Device.worker("w1"), "vllm_next_thing") in batch.series
    with open_database(tmp_path / "m.db") as db:
        with SampleWriter(db) as writer:
            writer.submit_samples("gpu-a", batch)
        out = io.StringIO()
        export_history(db, out, host="gpu-a", device="worker:w1")
    units = {(row["metric"], row["unit"]) for row in csv.DictReader(io.StringIO(out.getvalue()))}
    assert units == {("vllm_next_thing", ""), ("num_requests_running", "requests")}


def test_every_series_a_synthetic_host_reports_is_registered():
    batch = batch_from_samples([Sample.from_wire(wire_sample(1, TS, gpus=2))])
    assert batch.series and all(metrics.is_registered(device.kind, metric) for device, metric in batch.series)
