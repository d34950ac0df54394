"""A fake `pynvml` that replays an NVML capture (meshdeck_agent.gpu.capture's JSON format).

Only the C library is replaced: every function has the real pynvml name and signature, returns the
real pynvml ctypes structs (c_nvmlMemory_v2_t, c_nvmlUtilization_t, nvmlPciInfo_t, c_nvmlFieldValue_t,
c_nvmlProcessInfo_t; XID events carry c_nvmlEventData_t's field names) and raises the real NVMLError subclasses; the constants are the
real module's. A value the capture lacks raises NVMLError_NotSupported, as the driver would. A function
named in `missing` is absent from the module, as in an older nvidia-ml-py.
"""

from __future__ import annotations

import queue
import types
from typing import Any

import pynvml as real

_NOT_SUPPORTED = real.NVML_ERROR_NOT_SUPPORTED
_ECC_KEYS = {  # (nvmlMemoryErrorType_t, nvmlEccCounterType_t) -> the capture's key
    (real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, real.NVML_VOLATILE_ECC): "ecc_uncorrected_volatile",
    (real.NVML_MEMORY_ERROR_TYPE_CORRECTED, real.NVML_VOLATILE_ECC): "ecc_corrected_volatile",
}


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index


def _need(value: Any) -> Any:
    if value is None:
        raise real.NVMLError(_NOT_SUPPORTED)
    return value


def build(capture: dict[str, Any], missing: tuple[str, ...] = (), init_error: int | None = None) -> types.ModuleType:
    """A module object standing in for pynvml, answering from `capture`."""
    devices = capture["devices"]
    handles = [_Handle(i) for i in range(len(devices))]
    reads = {i: list(d.get("nvlink_reads") or []) for i, d in enumerate(devices)}
    process_reads = {
        key: {i: list(d.get(key + "_reads") or []) for i, d in enumerate(devices)}
        for key in ("processes", "graphics_processes")
    }
    events: queue.Queue[tuple[int, int]] = queue.Queue()
    state = {"initialized": False, "field_calls": 0}
    module = types.ModuleType("pynvml")
    for name in dir(real):
        if name.startswith(("NVML_", "NVMLError", "nvmlEventType", "c_nvml", "nvmlMemory_v", "nvmlPciInfo")):
            setattr(module, name, getattr(real, name))
    module.NVMLError = real.NVMLError

    def device(handle: _Handle) -> dict[str, Any]:
        if not state["initialized"]:
            raise real.NVMLError(real.NVML_ERROR_UNINITIALIZED)
        return devices[handle.index]

    def nvmlInit() -> None:
        if init_error is not None:
            raise real.NVMLError(init_error)
        state["initialized"] = True

    def nvmlShutdown() -> None:
        state["initialized"] = False

    def nvmlSystemGetDriverVersion() -> str:
        return _need(capture.get("driver"))

    def nvmlSystemGetCudaDriverVersion() -> int:
        return _need(capture.get("cuda_driver_version"))

    def nvmlDeviceGetCount() -> int:
        return len(devices)

    def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
        if not 0 <= index < len(handles):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return handles[index]

    def nvmlDeviceGetName(handle: _Handle) -> str:
        return _need(device(handle).get("name"))

    def nvmlDeviceGetUUID(handle: _Handle) -> str:
        return _need(device(handle).get("uuid"))

    def nvmlDeviceGetPciInfo(handle: _Handle) -> Any:
        info = real.nvmlPciInfo_t()
        info.busId = _need(device(handle).get("bus_id")).encode()
        return info

    def nvmlDeviceGetMemoryInfo(handle: _Handle, version: int | None = None) -> Any:
        memory = _need(device(handle).get("memory"))
        if version:
            result = real.c_nvmlMemory_v2_t()
            result.version = version
            result.reserved = memory.get("reserved") or 0
        else:
            result = real.c_nvmlMemory_t()
        result.total, result.free, result.used = memory["total"], memory["free"], memory["used"]
        return result

    def nvmlDeviceGetUtilizationRates(handle: _Handle) -> Any:
        values = _need(device(handle).get("utilization"))
        result = real.c_nvmlUtilization_t()
        result.gpu, result.memory = values["gpu"], values["memory"]
        return result

    def nvmlDeviceGetPowerUsage(handle: _Handle) -> int:
        return _need(device(handle).get("power_mw"))

    def nvmlDeviceGetEnforcedPowerLimit(handle: _Handle) -> int:
        return _need(device(handle).get("power_limit_mw"))

    def nvmlDeviceGetTemperature(handle: _Handle, sensor: int) -> int:
        return _need(device(handle).get("temperature"))

    def nvmlDeviceGetClockInfo(handle: _Handle, clock: int) -> int:
        return _need(device(handle).get("clock_sm" if clock == real.NVML_CLOCK_SM else "clock_mem"))

    def nvmlDeviceGetTotalEccErrors(handle: _Handle, error_type: int, counter_type: int) -> int:
        # a capture holds the volatile counts; the aggregate (lifetime) ones it lacks, as a driver may
        key = _ECC_KEYS.get((error_type, counter_type))
        return _need(device(handle).get(key) if key else None)

    def nvmlDeviceGetRemappedRows(handle: _Handle) -> tuple[int, int, int, int]:
        return tuple(_need(device(handle).get("remapped_rows")))

    def _processes(handle: _Handle, key: str) -> list[Any]:
        # c_nvmlProcessInfo_t as the C library fills it: a memory amount NVML cannot tell (WDDM, some containers)
        # is NVML_VALUE_NOT_AVAILABLE, as older pynvml returns it (newer ones map it to None). A device's
        # `<key>_reads` (a list of successive answers) replays a process list that changes between calls.
        pending = process_reads[key][handle.index]
        listed = (pending.pop(0) if len(pending) > 1 else pending[0]) if pending else device(handle).get(key)
        device(handle)
        result = []
        for process in listed or []:
            info = real.c_nvmlProcessInfo_t()
            info.pid = process["pid"]
            info.usedGpuMemory = (
                real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value if process["used"] is None else process["used"]
            )
            result.append(info)
        return result

    def nvmlDeviceGetComputeRunningProcesses(handle: _Handle) -> list[Any]:
        return _processes(handle, "processes")

    def nvmlDeviceGetGraphicsRunningProcesses(handle: _Handle) -> list[Any]:
        return _processes(handle, "graphics_processes")

    def nvmlDeviceGetPcieThroughput(handle: _Handle, counter: int) -> int:
        return _need(device(handle).get("pcie_tx_kib" if counter == real.NVML_PCIE_UTIL_TX_BYTES else "pcie_rx_kib"))

    def nvmlDeviceGetCurrPcieLinkGeneration(handle: _Handle) -> int:
        return _need(device(handle).get("pcie_gen"))

    def nvmlDeviceGetCurrPcieLinkWidth(handle: _Handle) -> int:
        return _need(device(handle).get("pcie_width"))

    def nvmlDeviceGetArchitecture(handle: _Handle) -> int:
        return _need(device(handle).get("arch"))

    def _link(handle: _Handle, link: int) -> dict[str, Any]:
        for entry in device(handle).get("nvlinks") or []:
            if entry["link"] == link:
                return entry
        raise real.NVMLError(_NOT_SUPPORTED)

    def nvmlDeviceGetNvLinkState(handle: _Handle, link: int) -> int:
        return real.NVML_FEATURE_ENABLED if _link(handle, link)["active"] else real.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(handle: _Handle, link: int) -> Any:
        info = real.nvmlPciInfo_t()
        info.busId = _need(_link(handle, link).get("remote_bus_id")).encode()
        return info

    def nvmlDeviceGetNvLinkRemoteDeviceType(handle: _Handle, link: int) -> int:
        return _need(_link(handle, link).get("remote_type"))

    def nvmlDeviceGetTopologyCommonAncestor(first: _Handle, second: _Handle) -> int:
        return _need((device(first).get("ancestor") or {}).get(str(second.index)))

    def nvmlDeviceGetFieldValues(handle: _Handle, field_ids: list[Any]) -> Any:
        state["field_calls"] += 1
        pending = reads[handle.index]
        if not pending:
            raise real.NVMLError(_NOT_SUPPORTED)
        reading = pending.pop(0) if len(pending) > 1 else pending[0]
        values = (real.c_nvmlFieldValue_t * len(field_ids))()
        for slot, (field_id, scope) in enumerate(field_ids):
            key = "all" if scope == 0xFFFFFFFF else str(scope)
            table = reading["tx_kib" if field_id == real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX else "rx_kib"]
            value = table.get(key)
            values[slot].fieldId, values[slot].scopeId = field_id, scope
            if value is None:
                values[slot].nvmlReturn = _NOT_SUPPORTED
                continue
            values[slot].nvmlReturn = real.NVML_SUCCESS
            values[slot].valueType = real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            values[slot].value.ullVal = int(value)
            values[slot].timestamp = int(reading["timestamp_us"][key])
        return values

    def nvmlEventSetCreate() -> object:
        return object()

    def nvmlDeviceRegisterEvents(handle: _Handle, event_types: int, event_set: object) -> None:
        device(handle)

    def nvmlEventSetWait(event_set: object, timeout_ms: int) -> Any:
        try:
            index, xid = events.get(timeout=timeout_ms / 1000.0)
        except queue.Empty:
            raise real.NVMLError(real.NVML_ERROR_TIMEOUT) from None
        # c_nvmlEventData_t's fields; its `device` is a ctypes pointer, so a plain record carries our handle
        return types.SimpleNamespace(
            device=handles[index],
            eventType=real.nvmlEventTypeXidCriticalError,
            eventData=xid,
            gpuInstanceId=0,
            computeInstanceId=0,
        )

    def nvmlEventSetFree(event_set: object) -> None:
        return None

    for name, function in list(locals().items()):
        if name.startswith("nvml") and callable(function) and name not in missing:
            setattr(module, name, function)
    module.inject_xid = lambda index, xid: events.put((index, xid))  # test hook, not a pynvml name
    module.state = state
    return module
