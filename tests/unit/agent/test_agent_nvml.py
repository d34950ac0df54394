"""The NVML backend on a fake pynvml that replays a capture with the real pynvml structs and errors."""

from __future__ import annotations

import copy
import json
import logging
import time
from pathlib import Path

import pynvml
import pytest
from fake_pynvml import build
from meshdeck_agent.gpu.capture import capture
from meshdeck_agent.gpu.nvml import Nvml, NvmlGpus
from meshdeck_agent.machine import RealMachine
from meshdeck_agent.protocol import Sample

DELLA = json.loads((Path(__file__).resolve().parents[2] / "fakes" / "nvml_capture_h100_della.json").read_text())
GB = 1e9


def _gpus(capture_data=DELLA, **kwargs) -> NvmlGpus:
    return NvmlGpus(Nvml(build(copy.deepcopy(capture_data), **kwargs)))


def test_inventory_reads_name_uuid_bus_memory_v2_links_and_pcie():
    gpus = _gpus()
    [gpu] = gpus.inventory()
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.uuid == "GPU-10f35015-e921-bfab-2eb8-4e9b6664d5f1"
    assert gpu.pci_bus_id == "00000000:19:00.0"
    assert gpu.memory_total_bytes == 81559 * 2**20 and gpu.memory_reserved_bytes == 328 * 2**20
    assert gpu.arch == "hopper" and (gpu.pcie_gen, gpu.pcie_width) == (5, 16)
    assert gpu.power_limit_w == 700.0
    assert len(gpu.nvlink_links) == 18 and all(link.active and link.remote_is_switch for link in gpu.nvlink_links)
    assert gpus.driver_version() == "545.23.08" and gpus.cuda_version() == "12.3"


def test_a_sample_converts_units_and_rates_nvlink_counters_over_their_timestamps():
    gpus = _gpus()
    first = gpus.read()[0]
    assert first.value("nvlink_tx_bytes_per_s") is None  # a rate needs two readings
    second = gpus.read()[0]
    assert second.value("memory_used_bytes") == 2 * 2**20 and second.value("power_w") == pytest.approx(72.02)
    assert second.value("temperature_c") == 33 and (second.value("sm_clock_mhz"), second.value("mem_clock_mhz")) == (
        345,
        2619,
    )
    assert second.value("pcie_tx_bytes_per_s") == 1953 * 1024 and second.value("pcie_rx_bytes_per_s") == 4882 * 1024
    assert len(second.nvlink_links) == 18
    assert second.nvlink_links[0][0] == pytest.approx(10 * GB, rel=1e-3)
    assert second.nvlink_links[17][1] == pytest.approx(5 * GB, rel=1e-3)
    assert second.value("nvlink_tx_bytes_per_s") == pytest.approx(180 * GB, rel=1e-3)
    assert second.value("ecc_uncorrected_volatile") == 0 and second.remapped_rows_pending is False
    assert second.processes == ()
    (decoded,) = Sample.from_wire(Sample(1, 1_764_480_000.0, False, gpus=(second,)).to_wire()).gpus  # on the wire
    assert decoded.nvlink_links[3][0] == pytest.approx(10 * GB, rel=1e-3)
    assert decoded.value("power_w") == pytest.approx(72.02)


def test_without_the_all_links_scope_the_total_is_the_sum_of_links():
    data = copy.deepcopy(DELLA)
    for reading in data["devices"][0]["nvlink_reads"]:
        del reading["tx_kib"]["all"], reading["rx_kib"]["all"]
    gpus = _gpus(data)
    gpus.read()
    sample = gpus.read()[0]
    assert sample.value("nvlink_tx_bytes_per_s") == pytest.approx(18 * 10 * GB, rel=1e-3)
    assert sample.value("nvlink_rx_bytes_per_s") == pytest.approx(18 * 5 * GB, rel=1e-3)


def test_a_function_the_bindings_lack_is_logged_once_and_its_values_stay_empty(caplog):
    gpus = _gpus(missing=("nvmlDeviceGetRemappedRows", "nvmlDeviceGetMemoryInfo"))
    with caplog.at_level(logging.INFO, logger="meshdeck_agent.gpu.nvml"):
        for _ in range(3):
            sample = gpus.read()[0]
    assert sample.remapped_rows_pending is None and sample.value("memory_used_bytes") is None
    assert sample.value("power_w") == pytest.approx(72.02)
    assert sum("nvmlDeviceGetRemappedRows" in r.message for r in caplog.records) == 1


def test_unsupported_values_read_as_null_not_errors():
    data = copy.deepcopy(DELLA)
    data["devices"][0]["temperature"] = None
    data["devices"][0]["remapped_rows"] = None
    sample = _gpus(data).read()[0]
    assert sample.value("temperature_c") is None and sample.remapped_rows_failure is None


def test_no_nvml_library_means_zero_gpus_and_a_reason_in_the_inventory(tmp_path):
    module = build(DELLA, init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    machine = RealMachine(root=str(tmp_path), nvml_module=module)
    inventory = machine.inventory()
    assert inventory["gpus"] == [] and "NVML Shared Library Not Found" in inventory["gpu_reason"]
    assert machine.read(0.0).gpus == ()


def test_xid_events_reach_the_next_sample_and_raise_an_alert(tmp_path):
    module = build(copy.deepcopy(DELLA))
    alerts = []
    machine = RealMachine(root=str(tmp_path), nvml_module=module, on_alert=alerts.append)
    machine.start()
    try:
        module.inject_xid(0, 79)
        deadline = time.monotonic() + 10
        while not alerts and time.monotonic() < deadline:
            time.sleep(0.05)
        assert alerts and alerts[0]["xid"] == 79 and alerts[0]["gpu"] == 0
        sample = machine.read(0.0).gpus[0]
        assert [e.xid for e in sample.xid_events] == [79]
        assert machine.read(0.0).gpus[0].xid_events == ()
    finally:
        machine.close()


def _with_ecc(uncorrected: int | None, corrected: int | None) -> dict:
    """DELLA with its volatile ECC counts replaced (None: the driver answers NVML_ERROR_NOT_SUPPORTED)."""
    data = copy.deepcopy(DELLA)
    data["devices"][0]["ecc_uncorrected_volatile"] = uncorrected
    data["devices"][0]["ecc_corrected_volatile"] = corrected
    return data


def test_volatile_ecc_errors_are_read_per_gpu_uncorrected_and_corrected_apart():
    sample = _gpus(_with_ecc(2, 17)).read()[0]
    assert sample.value("ecc_uncorrected_volatile") == 2 and sample.value("ecc_corrected_volatile") == 17
    wire = Sample(1, 1_764_480_000.0, False, gpus=(sample,)).to_wire()["gpus"][0]
    assert (wire["ecc_uncorrected_volatile"], wire["ecc_corrected_volatile"]) == (2, 17)


def test_a_gpu_without_ecc_reports_its_ecc_counts_missing_never_zero():
    sample = _gpus(_with_ecc(None, None)).read()[0]
    assert sample.value("ecc_uncorrected_volatile") is None and sample.value("ecc_corrected_volatile") is None
    assert sample.value("power_w") == pytest.approx(72.02)  # the rest of the GPU still reads
    wire = json.loads(json.dumps(Sample(1, 1_764_480_000.0, False, gpus=(sample,)).to_wire()))
    assert wire["gpus"][0]["ecc_uncorrected_volatile"] is None
    (decoded,) = Sample.from_wire(wire).gpus
    assert decoded.value("ecc_uncorrected_volatile") is None and decoded.value("ecc_corrected_volatile") is None


def test_a_capture_taken_before_corrected_ecc_was_recorded_reads_it_as_missing():
    data = copy.deepcopy(DELLA)
    del data["devices"][0]["ecc_corrected_volatile"]
    sample = _gpus(data).read()[0]
    assert sample.value("ecc_corrected_volatile") is None and sample.value("ecc_uncorrected_volatile") == 0


def test_capture_records_what_the_fake_answers_and_replays_the_same_inventory():
    recorded = capture(Nvml(build(copy.deepcopy(DELLA))), reads=3, interval_s=0.0)
    assert recorded["driver"] == "545.23.08" and len(recorded["devices"][0]["nvlinks"]) == 18
    assert recorded["devices"][0]["memory"]["reserved"] == 328 * 2**20
    device = recorded["devices"][0]
    assert (device["ecc_uncorrected_volatile"], device["ecc_corrected_volatile"]) == (0, 0)
    assert _gpus(recorded).inventory() == _gpus().inventory()
