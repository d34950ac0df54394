"""The NVML backend: everything the agent knows about real NVIDIA GPUs comes through `Nvml.call`.

One guarded entry (after nvitop's libnvml): the first call imports `pynvml` (nvidia-ml-py, vendored in
the zipapp) and runs nvmlInit; if either fails the backend reports zero GPUs and a reason instead of
raising. A function this driver lacks is logged once and reads as missing (None) from then on; any
other NVML error reads as None for that value only. Nothing here raises into the sampler.

Per GPU and sample: memory v2 (used/total/reserved), utilization, power and limit, temperature,
SM/memory clocks, volatile ECC errors (uncorrected and corrected), remapped rows, compute processes with
their memory (NVML_VALUE_NOT_AVAILABLE reads as unknown: gpu/processes.py `nvml_bytes`), NVLink data
throughput per link from the field values NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX (cumulative KiB
counters with a microsecond timestamp each: rate = Δvalue·1024 / Δtimestamp), PCIe TX/RX throughput
(NVML reports KiB/s over a 20 ms window), and XID events collected by `XidWatcher`.
`running_processes` lists each GPU's compute and graphics processes for the `processes` answer.
The link total uses the all-links scope (scopeId = UINT32_MAX) when the driver answers it, else the
sum of the per-link rates: some drivers answer every per-link scope with the GPU-wide counter, and
adding those would multiply the total by the link count.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from ..wire_inventory import Gpu, NvLink
from ..wire_sample import MAX_XID_EVENTS, GpuProcess, GpuSample, XidEvent
from .processes import COMPUTE, GRAPHICS, RawGpuProcesses, merge, nvml_bytes

log = logging.getLogger(__name__)

ALL_LINKS_SCOPE = 0xFFFFFFFF
# The volatile ECC counts a sample carries: (metric, nvmlMemoryErrorType_t constant, its value in NVML)
ECC_COUNTS = (
    ("ecc_uncorrected_volatile", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
    ("ecc_corrected_volatile", "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0),
)
_ARCH_NAMES = {
    2: "kepler",
    3: "maxwell",
    4: "pascal",
    5: "volta",
    6: "turing",
    7: "ampere",
    8: "ada",
    9: "hopper",
    10: "blackwell",
    13: "rubin",
}
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _text(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def handle_key(handle: Any) -> int:
    """A hashable identity for an NVML device handle (ctypes pointer in real pynvml, any object in fakes)."""
    try:
        return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)
    except (ctypes.ArgumentError, TypeError):
        return id(handle)


def field_value(field: Any) -> Optional[float]:
    """The number inside a c_nvmlFieldValue_t, picked by its valueType; None if NVML failed it."""
    if getattr(field, "nvmlReturn", 1) != 0:
        return None
    member = _VALUE_MEMBERS.get(getattr(field, "valueType", 3), "ullVal")
    value = getattr(field.value, member, None)
    return float(value) if isinstance(value, (int, float)) else None


class Nvml:
    """The only way into NVML. `module` injects a fake pynvml in tests."""

    def __init__(self, module: Any = None) -> None:
        self._module = module
        self._lock = threading.RLock()
        self._initialized = False
        self._failed_reason: Optional[str] = None
        self._missing: Set[str] = set()
        self._logged_errors: Set[Tuple[str, int]] = set()

    def _init(self) -> bool:
        if self._initialized:
            return True
        if self._failed_reason is not None:
            return False
        with self._lock:
            if self._initialized or self._failed_reason is not None:
                return self._initialized
            module = self._module
            if module is None:
                try:
                    import pynvml
                except ImportError as exc:
                    self._failed_reason = "nvidia-ml-py (pynvml) is not importable: %s" % exc
                    log.warning("NVML unavailable: %s", self._failed_reason)
                    return False
                module = pynvml
            try:
                module.nvmlInit()
            except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
                self._failed_reason = "nvmlInit failed: %s (no NVIDIA driver on this server?)" % exc
                log.warning("NVML unavailable: %s", self._failed_reason)
                return False
            self._module = module
            self._initialized = True
            return True

    @property
    def available(self) -> bool:
        return self._init()

    @property
    def reason(self) -> Optional[str]:
        self._init()
        return self._failed_reason

    @property
    def module(self) -> Any:
        return self._module if self._init() else None

    def constant(self, name: str, default: Any = None) -> Any:
        module = self.module
        return getattr(module, name, default) if module is not None else default

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """module.name(*args) or None; a missing function is logged once, errors never escape."""
        return self.try_call(name, *args, **kwargs)[1]

    def try_call(self, name: str, *args: Any, **kwargs: Any) -> Tuple[bool, Any]:
        """(True, result) or (False, None): for functions whose success returns None."""
        if not self._init() or name in self._missing:
            return False, None
        function: Optional[Callable[..., Any]] = getattr(self._module, name, None)
        if function is None:
            self._missing.add(name)
            log.info("NVML function %s is not in this pynvml; its values stay empty", name)
            return False, None
        try:
            return True, function(*args, **kwargs)
        except Exception as exc:
            code = getattr(exc, "value", -1)
            function_not_found = self.constant("NVML_ERROR_FUNCTION_NOT_FOUND", 13)
            if code == function_not_found:
                self._missing.add(name)
                log.info("NVML function %s is not in this driver; its values stay empty", name)
            elif (name, code) not in self._logged_errors:
                self._logged_errors.add((name, code))
                log.debug("NVML %s failed: %s", name, exc)
            return False, None

    def shutdown(self) -> None:
        with self._lock:
            if self._initialized:
                self.call("nvmlShutdown")
                self._initialized = False


class NvmlGpus:
    """Inventory and samples of every GPU NVML sees."""

    def __init__(self, nvml: Nvml) -> None:
        self.nvml = nvml
        self._handles: Optional[List[Any]] = None
        self._link_ids: Dict[int, List[int]] = {}
        self._previous_fields: Dict[Tuple[int, int, int], Tuple[float, int]] = {}
        self._xid_pending: Dict[int, List[XidEvent]] = {}
        self._xid_lock = threading.Lock()
        self._uuids: Dict[int, Optional[str]] = {}

    # -- discovery -------------------------------------------------------------------------------

    def handles(self) -> List[Any]:
        if self._handles is None:
            count = self.nvml.call("nvmlDeviceGetCount") if self.nvml.available else None
            handles = []
            for index in range(int(count or 0)):
                handle = self.nvml.call("nvmlDeviceGetHandleByIndex", index)
                if handle is None:
                    break
                handles.append(handle)
            self._handles = handles
        return self._handles

    @property
    def count(self) -> int:
        return len(self.handles())

    def driver_version(self) -> Optional[str]:
        return _text(self.nvml.call("nvmlSystemGetDriverVersion"))

    def cuda_version(self) -> Optional[str]:
        version = self.nvml.call("nvmlSystemGetCudaDriverVersion")
        if not isinstance(version, int) or version <= 0:
            return None
        return "%d.%d" % (version // 1000, (version % 1000) // 10)

    def bus_id(self, handle: Any) -> Optional[str]:
        pci = self.nvml.call("nvmlDeviceGetPciInfo", handle)
        if pci is None:
            return None
        return _text(getattr(pci, "busId", None) or getattr(pci, "busIdLegacy", None))

    def nvlinks(self, index: int, handle: Any) -> List[NvLink]:
        max_links = int(self.nvml.constant("NVML_NVLINK_MAX_LINKS", 18))
        enabled = self.nvml.constant("NVML_FEATURE_ENABLED", 1)
        links = []
        for link in range(max_links):
            state = self.nvml.call("nvmlDeviceGetNvLinkState", handle, link)
            if state is None:
                continue
            remote = self.nvml.call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            remote_type = self.nvml.call("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
            links.append(
                NvLink(
                    link=link,
                    remote_pci_bus_id=_text(getattr(remote, "busId", None)) if remote is not None else None,
                    active=state == enabled,
                    remote_is_switch=remote_type == self.nvml.constant("NVML_NVLINK_DEVICE_TYPE_SWITCH", 2),
                )
            )
        self._link_ids[index] = [entry.link for entry in links if entry.active]
        return links

    def inventory(self) -> List[Gpu]:
        gpus = []
        memory_v2 = self.nvml.constant("nvmlMemory_v2")
        for index, handle in enumerate(self.handles()):
            memory = self.nvml.call("nvmlDeviceGetMemoryInfo", handle, version=memory_v2) if memory_v2 else None
            if memory is None:
                memory = self.nvml.call("nvmlDeviceGetMemoryInfo", handle)
            power_limit = self.nvml.call("nvmlDeviceGetEnforcedPowerLimit", handle)
            arch = self.nvml.call("nvmlDeviceGetArchitecture", handle)
            gpus.append(
                Gpu(
                    index=index,
                    name=_text(self.nvml.call("nvmlDeviceGetName", handle)),
                    uuid=_text(self.nvml.call("nvmlDeviceGetUUID", handle)),
                    pci_bus_id=self.bus_id(handle),
                    memory_total_bytes=getattr(memory, "total", None),
                    memory_reserved_bytes=getattr(memory, "reserved", None),
                    arch=_ARCH_NAMES.get(arch) if isinstance(arch, int) else None,
                    pcie_gen=self.nvml.call("nvmlDeviceGetCurrPcieLinkGeneration", handle),
                    pcie_width=self.nvml.call("nvmlDeviceGetCurrPcieLinkWidth", handle),
                    nvlink_links=tuple(self.nvlinks(index, handle)),
                    numa_node=None,
                    power_limit_w=power_limit / 1000.0 if isinstance(power_limit, (int, float)) else None,
                )
            )
        return gpus

    def ancestor_label(self, i: int, j: int) -> Optional[int]:
        handles = self.handles()
        label = self.nvml.call("nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j])
        return label if isinstance(label, int) else None

    # -- samples ---------------------------------------------------------------------------------

    def _rate(self, key: Tuple[int, int, int], field: Any) -> Optional[float]:
        value = field_value(field)
        timestamp = getattr(field, "timestamp", None)
        if value is None or not isinstance(timestamp, int):
            return None
        previous = self._previous_fields.get(key)
        self._previous_fields[key] = (value, timestamp)
        if previous is None or timestamp <= previous[1] or value < previous[0]:
            return None
        return (value - previous[0]) * 1024.0 / ((timestamp - previous[1]) / 1e6)

    def _nvlink(self, index: int, handle: Any) -> Tuple[Optional[float], Optional[float], List[Tuple[Any, Any]]]:
        if index not in self._link_ids:
            self.nvlinks(index, handle)
        links = self._link_ids.get(index) or []
        if not links:
            return None, None, []
        tx_id = self.nvml.constant("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", 138)
        rx_id = self.nvml.constant("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", 139)
        requests = [(tx_id, link) for link in links] + [(rx_id, link) for link in links]
        requests += [(tx_id, ALL_LINKS_SCOPE), (rx_id, ALL_LINKS_SCOPE)]
        fields = self.nvml.call("nvmlDeviceGetFieldValues", handle, requests)
        if fields is None:
            return None, None, []
        rates = [self._rate((index, field_id, scope), field) for (field_id, scope), field in zip(requests, fields)]
        count = len(links)
        per_link: List[Tuple[Any, Any]] = []
        max_link = max(links)
        by_link = {link: (rates[i], rates[count + i]) for i, link in enumerate(links)}
        for link in range(max_link + 1):
            tx, rx = by_link.get(link, (None, None))
            per_link.append((round(tx) if tx is not None else None, round(rx) if rx is not None else None))
        total_tx, total_rx = rates[-2], rates[-1]
        if total_tx is None and all(r is not None for r in rates[:count]):
            total_tx = sum(r for r in rates[:count] if r is not None)
        if total_rx is None and all(r is not None for r in rates[count : 2 * count]):
            total_rx = sum(r for r in rates[count : 2 * count] if r is not None)
        return total_tx, total_rx, per_link

    def read(self) -> List[GpuSample]:
        call = self.nvml.call
        memory_v2 = self.nvml.constant("nvmlMemory_v2")
        temperature_sensor = self.nvml.constant("NVML_TEMPERATURE_GPU", 0)
        samples = []
        for index, handle in enumerate(self.handles()):
            memory = call("nvmlDeviceGetMemoryInfo", handle, version=memory_v2) if memory_v2 else None
            if memory is None:
                memory = call("nvmlDeviceGetMemoryInfo", handle)
            utilization = call("nvmlDeviceGetUtilizationRates", handle)
            power = call("nvmlDeviceGetPowerUsage", handle)
            limit = call("nvmlDeviceGetEnforcedPowerLimit", handle)
            remapped = call("nvmlDeviceGetRemappedRows", handle)
            pcie_tx = call("nvmlDeviceGetPcieThroughput", handle, self.nvml.constant("NVML_PCIE_UTIL_TX_BYTES", 0))
            pcie_rx = call("nvmlDeviceGetPcieThroughput", handle, self.nvml.constant("NVML_PCIE_UTIL_RX_BYTES", 1))
            processes = call("nvmlDeviceGetComputeRunningProcesses", handle) or []
            nvlink_tx, nvlink_rx, per_link = self._nvlink(index, handle)
            with self._xid_lock:
                xids = self._xid_pending.pop(index, [])
            samples.append(
                GpuSample.of(
                    index,
                    self._uuid(index, handle),
                    nvlink_links=per_link,
                    xid_events=xids,
                    processes=(GpuProcess(p.pid, nvml_bytes(getattr(p, "usedGpuMemory", None))) for p in processes),
                    **self._ecc(handle),
                    remapped_rows_correctable=remapped[0] if remapped else None,
                    remapped_rows_uncorrectable=remapped[1] if remapped else None,
                    remapped_rows_pending=bool(remapped[2]) if remapped else None,
                    remapped_rows_failure=bool(remapped[3]) if remapped else None,
                    memory_used_bytes=getattr(memory, "used", None),
                    memory_total_bytes=getattr(memory, "total", None),
                    memory_reserved_bytes=getattr(memory, "reserved", None),
                    utilization_pct=getattr(utilization, "gpu", None),
                    memory_utilization_pct=getattr(utilization, "memory", None),
                    power_w=power / 1000.0 if isinstance(power, (int, float)) else None,
                    power_limit_w=limit / 1000.0 if isinstance(limit, (int, float)) else None,
                    temperature_c=call("nvmlDeviceGetTemperature", handle, temperature_sensor),
                    sm_clock_mhz=call("nvmlDeviceGetClockInfo", handle, self.nvml.constant("NVML_CLOCK_SM", 1)),
                    mem_clock_mhz=call("nvmlDeviceGetClockInfo", handle, self.nvml.constant("NVML_CLOCK_MEM", 2)),
                    nvlink_tx_bytes_per_s=round(nvlink_tx) if nvlink_tx is not None else None,
                    nvlink_rx_bytes_per_s=round(nvlink_rx) if nvlink_rx is not None else None,
                    pcie_tx_bytes_per_s=pcie_tx * 1024 if isinstance(pcie_tx, int) else None,
                    pcie_rx_bytes_per_s=pcie_rx * 1024 if isinstance(pcie_rx, int) else None,
                )
            )
        return samples

    def running_processes(self) -> List[RawGpuProcesses]:
        """Per GPU, the processes NVML lists on it: compute (CUDA) and graphics, with their GPU memory (None
        where NVML says NVML_VALUE_NOT_AVAILABLE). A list this driver or pynvml lacks reads as empty."""
        gpus = []
        for index, handle in enumerate(self.handles()):
            lists = {
                COMPUTE: self.nvml.call("nvmlDeviceGetComputeRunningProcesses", handle) or [],
                GRAPHICS: self.nvml.call("nvmlDeviceGetGraphicsRunningProcesses", handle) or [],
            }
            gpus.append(merge(index, self._uuid(index, handle), lists))
        return gpus

    def _ecc(self, handle: Any) -> Dict[str, Optional[float]]:
        """The volatile ECC error counts (ECC_COUNTS). A GPU without ECC, or with ECC off, answers
        NVML_ERROR_NOT_SUPPORTED: None, so the app shows "no data", never a reassuring 0."""
        volatile = self.nvml.constant("NVML_VOLATILE_ECC", 0)
        counts: Dict[str, Optional[float]] = {}
        for metric, error_type, value in ECC_COUNTS:
            count = self.nvml.call(
                "nvmlDeviceGetTotalEccErrors", handle, self.nvml.constant(error_type, value), volatile
            )
            counts[metric] = count if isinstance(count, int) else None
        return counts

    def _uuid(self, index: int, handle: Any) -> Optional[str]:
        if self._uuids.get(index) is None:
            self._uuids[index] = _text(self.nvml.call("nvmlDeviceGetUUID", handle))
        return self._uuids[index]

    def add_xid(self, index: int, event: XidEvent) -> None:
        with self._xid_lock:
            pending = self._xid_pending.setdefault(index, [])
            if len(pending) < MAX_XID_EVENTS:
                pending.append(event)
