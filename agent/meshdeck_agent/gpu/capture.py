"""`meshdeck-agent capture-nvml`: record what NVML answers on a real GPU server, as a test fixture.

The capture holds the raw return values of every NVML call the backend makes (through the same
guarded `Nvml.call`), with `reads` successive NVLink field-value readings so rates can be replayed.
tests/fakes/fake_pynvml.py replays a capture with the real pynvml structs, so the NVML backend is
tested against what a real driver said. Missing values stay null, as the backend would see them.

    {"format": 1, "captured_at": .., "driver": "570.172.08", "cuda_driver_version": 12080,
     "nvml_reason": null, "devices": [{
        "name", "uuid", "bus_id", "arch", "pcie_gen", "pcie_width", "power_limit_mw",
        "memory": {"total", "reserved", "free", "used"} | null, "utilization": {"gpu", "memory"},
        "power_mw", "temperature", "clock_sm", "clock_mem", "ecc_uncorrected_volatile", "ecc_corrected_volatile",
        "remapped_rows": [corr, unc, pending, failure] | null, "processes": [{"pid", "used"}],
        "graphics_processes": [{"pid", "used"}],   # "used": null where NVML says NVML_VALUE_NOT_AVAILABLE
        "pcie_tx_kib", "pcie_rx_kib",
        "nvlinks": [{"link", "active", "remote_bus_id", "remote_type"}],
        "nvlink_reads": [{"timestamp_us": {..}, "tx_kib": {"<link>|all": ..}, "rx_kib": {..}}],
        "ancestor": {"<other index>": level}}]}
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Dict, List, Optional

from .nvml import ALL_LINKS_SCOPE, ECC_COUNTS, Nvml, NvmlGpus, _text, field_value
from .processes import nvml_bytes


def _struct(value: Any, fields: List[str]) -> Optional[Dict[str, Any]]:
    if value is None:
        return None
    return {name: getattr(value, name, None) for name in fields}


def capture(nvml: Nvml, reads: int = 3, interval_s: float = 1.0) -> Dict[str, Any]:
    gpus = NvmlGpus(nvml)
    handles = gpus.handles()
    memory_v2 = nvml.constant("nvmlMemory_v2")
    volatile = nvml.constant("NVML_VOLATILE_ECC", 0)
    ecc_types = [(metric, nvml.constant(error_type, value)) for metric, error_type, value in ECC_COUNTS]
    devices: List[Dict[str, Any]] = []
    for index, handle in enumerate(handles):
        links = []
        for entry in gpus.nvlinks(index, handle):
            remote_type = nvml.call("nvmlDeviceGetNvLinkRemoteDeviceType", handle, entry.link)
            links.append(
                {
                    "link": entry.link,
                    "active": entry.active,
                    "remote_bus_id": entry.remote_pci_bus_id,
                    "remote_type": remote_type,
                }
            )
        remapped = nvml.call("nvmlDeviceGetRemappedRows", handle)
        processes = nvml.call("nvmlDeviceGetComputeRunningProcesses", handle) or []
        graphics = nvml.call("nvmlDeviceGetGraphicsRunningProcesses", handle) or []
        devices.append(
            {
                "name": _text(nvml.call("nvmlDeviceGetName", handle)),
                "uuid": _text(nvml.call("nvmlDeviceGetUUID", handle)),
                "bus_id": gpus.bus_id(handle),
                "arch": nvml.call("nvmlDeviceGetArchitecture", handle),
                "pcie_gen": nvml.call("nvmlDeviceGetCurrPcieLinkGeneration", handle),
                "pcie_width": nvml.call("nvmlDeviceGetCurrPcieLinkWidth", handle),
                "power_limit_mw": nvml.call("nvmlDeviceGetEnforcedPowerLimit", handle),
                "memory": _struct(
                    nvml.call("nvmlDeviceGetMemoryInfo", handle, version=memory_v2),
                    ["total", "reserved", "free", "used"],
                ),
                "utilization": _struct(nvml.call("nvmlDeviceGetUtilizationRates", handle), ["gpu", "memory"]),
                "power_mw": nvml.call("nvmlDeviceGetPowerUsage", handle),
                "temperature": nvml.call("nvmlDeviceGetTemperature", handle, nvml.constant("NVML_TEMPERATURE_GPU", 0)),
                "clock_sm": nvml.call("nvmlDeviceGetClockInfo", handle, nvml.constant("NVML_CLOCK_SM", 1)),
                "clock_mem": nvml.call("nvmlDeviceGetClockInfo", handle, nvml.constant("NVML_CLOCK_MEM", 2)),
                **{
                    metric: nvml.call("nvmlDeviceGetTotalEccErrors", handle, error_type, volatile)
                    for metric, error_type in ecc_types
                },
                "remapped_rows": list(remapped) if remapped else None,
                "processes": [{"pid": p.pid, "used": nvml_bytes(getattr(p, "usedGpuMemory", None))} for p in processes],
                "graphics_processes": [
                    {"pid": p.pid, "used": nvml_bytes(getattr(p, "usedGpuMemory", None))} for p in graphics
                ],
                "pcie_tx_kib": nvml.call(
                    "nvmlDeviceGetPcieThroughput", handle, nvml.constant("NVML_PCIE_UTIL_TX_BYTES", 0)
                ),
                "pcie_rx_kib": nvml.call(
                    "nvmlDeviceGetPcieThroughput", handle, nvml.constant("NVML_PCIE_UTIL_RX_BYTES", 1)
                ),
                "nvlinks": links,
                "nvlink_reads": [],
                "ancestor": {
                    str(other): nvml.call("nvmlDeviceGetTopologyCommonAncestor", handle, handles[other])
                    for other in range(len(handles))
                    if other != index
                },
            }
        )
    tx_id = nvml.constant("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", 138)
    rx_id = nvml.constant("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", 139)
    for read in range(reads):
        for index, handle in enumerate(handles):
            active = [link["link"] for link in devices[index]["nvlinks"] if link["active"]]
            if not active:
                continue
            scopes = [*active, ALL_LINKS_SCOPE]
            requests = [(tx_id, s) for s in scopes] + [(rx_id, s) for s in scopes]
            fields = nvml.call("nvmlDeviceGetFieldValues", handle, requests) or []
            reading: Dict[str, Dict[str, Any]] = {"timestamp_us": {}, "tx_kib": {}, "rx_kib": {}}
            for (field_id, scope), field in zip(requests, fields):
                key = "all" if scope == ALL_LINKS_SCOPE else str(scope)
                reading["tx_kib" if field_id == tx_id else "rx_kib"][key] = field_value(field)
                reading["timestamp_us"][key] = getattr(field, "timestamp", None)
            devices[index]["nvlink_reads"].append(reading)
        if read + 1 < reads:
            time.sleep(interval_s)
    return {
        "format": 1,
        "captured_at": time.time(),
        "driver": gpus.driver_version(),
        "cuda_driver_version": nvml.call("nvmlSystemGetCudaDriverVersion"),
        "nvml_reason": nvml.reason,
        "devices": devices,
    }


def main(out: Optional[str], reads: int, interval_s: float) -> int:
    nvml = Nvml()
    result = json.dumps(capture(nvml, reads, interval_s), indent=1, sort_keys=True)
    nvml.shutdown()
    if out:
        with open(out, "w") as handle:
            handle.write(result + "\n")
    else:
        sys.stdout.write(result + "\n")
    return 0
