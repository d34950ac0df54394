"""A server as the sampler sees it: `inventory()` once, `read()` every interval.

`RealMachine` joins NVML (gpu/nvml.py), /proc (host.py) and sysfs (net.py, topology.py) under an
injectable root. `SimulatedMachine` (sim/machine.py) answers the same two calls for `--simulate`.
`read` answers a `Reading`: the sample's records (wire_sample.py) of its GPUs, host and NICs;
`gpu_processes` the processes on each GPU, for the `processes` request.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Protocol, Tuple

from . import inventory as inventory_shape
from .gpu.nvml import Nvml, NvmlGpus
from .gpu.processes import RawGpuProcesses
from .gpu.xid import XidWatcher
from .host import HostReader
from .net import NetReader
from .topology import NVML_LEVEL_LABELS, gpu_matrix, nic_affinity, numa_node_of, nvlink_pair_counts, sysfs_pci_path
from .wire_inventory import Inventory
from .wire_sample import GpuSample, HostSample, NicSample, XidEvent

if TYPE_CHECKING:  # loaded only for --simulate (build_machine)
    from .gpu.catalog import SimulateSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reading:
    """What a machine measured at one instant; the sampler adds the time, the workers and the seq."""

    gpus: Tuple[GpuSample, ...] = ()
    host: Optional[HostSample] = None
    nics: Tuple[NicSample, ...] = ()


class Machine(Protocol):
    """What the daemon, the sampler and the exporter need of a server, real or simulated."""

    @property
    def simulated(self) -> bool: ...

    @property
    def spec(self) -> Optional[SimulateSpec]:
        """The simulated server's GPUs and layout; None on a real server."""

    def start(self) -> None: ...

    def close(self) -> None: ...

    def inventory(self) -> Dict[str, Any]: ...

    def read(self, now: float) -> Reading: ...

    def gpu_processes(self) -> Tuple[List[RawGpuProcesses], Optional[str]]:
        """Per GPU, the processes on it (gpu/processes.py), and why no GPU is listed (None when some are)."""


class RealMachine:
    simulated = False
    spec: Optional[SimulateSpec] = None

    def __init__(
        self, root: str = "/", nvml_module: Any = None, on_alert: Optional[Callable[[Dict[str, Any]], None]] = None
    ) -> None:
        self.root = root
        self.nvml = Nvml(nvml_module)
        self.gpus = NvmlGpus(self.nvml)
        self.host = HostReader(root)
        self.net = NetReader(root)
        self._inventory: Optional[Dict[str, Any]] = None
        self._lock = threading.Lock()
        self._xid: Optional[XidWatcher] = None
        self._on_alert = on_alert

    def start(self) -> None:
        """Start background collection (XID events)."""
        handles = self.gpus.handles()
        if handles:
            self._xid = XidWatcher(self.nvml, handles, self._xid_event)
            if not self._xid.start():
                self._xid = None

    def _xid_event(self, index: int, event: Dict[str, Any]) -> None:
        self.gpus.add_xid(index, XidEvent(int(event["xid"]), event.get("ts")))
        if self._on_alert is not None:
            self._on_alert({"kind": "xid", "gpu": index, "xid": event.get("xid"), "ts": event.get("ts")})

    def inventory(self) -> Dict[str, Any]:
        """The `inventory` answer (wire form of wire_inventory.Inventory), built once."""
        with self._lock:
            if self._inventory is None:
                self._inventory = self._build_inventory().to_wire()
            return self._inventory

    def _build_inventory(self) -> Inventory:
        gpus = []
        chains = []
        numa = []
        for gpu in self.gpus.inventory():
            bus = gpu.pci_bus_id
            gpu = replace(gpu, numa_node=numa_node_of(self.root, bus) if bus else None)
            gpus.append(gpu)
            chains.append(sysfs_pci_path(self.root, bus) if bus else None)
            numa.append(gpu.numa_node)
        remotes = [[link.remote_pci_bus_id for link in g.nvlink_links if link.active] for g in gpus]
        switches = [
            link.remote_pci_bus_id
            for g in gpus
            for link in g.nvlink_links
            if link.remote_is_switch and link.remote_pci_bus_id
        ]
        pairs = nvlink_pair_counts([g.pci_bus_id or "" for g in gpus], remotes, switches)

        def fallback(i: int, j: int) -> str:
            level = self.gpus.ancestor_label(i, j)
            if isinstance(level, int) and level in NVML_LEVEL_LABELS:
                return NVML_LEVEL_LABELS[level]
            from .topology import pci_label

            return pci_label(chains[i], chains[j], numa[i], numa[j])

        matrix = gpu_matrix(len(gpus), pairs, fallback)
        nics = self.net.inventory()
        affinity = nic_affinity(chains, numa, nics)
        return inventory_shape.assemble(
            simulated=False,
            driver=self.gpus.driver_version(),
            cuda=self.gpus.cuda_version(),
            gpus=gpus,
            gpu_reason=self.nvml.reason if not gpus else None,
            matrix=matrix,
            affinity=affinity,
            nics=nics,
            cpu=self.host.cpu_info(),
            ram_total_bytes=self.host.ram_total_bytes(),
        )

    def read(self, now: float) -> Reading:
        return Reading(tuple(self.gpus.read()), self.host.read(), tuple(self.net.read()))

    def gpu_processes(self) -> Tuple[List[RawGpuProcesses], Optional[str]]:
        gpus = self.gpus.running_processes()
        return gpus, (self.nvml.reason if not gpus else None)

    def close(self) -> None:
        if self._xid is not None:
            self._xid.stop()
        self.nvml.shutdown()


def build_machine(
    simulate: Optional[str],
    seed: int = 0,
    activity: Optional[Callable[[], List[Any]]] = None,
    on_alert: Optional[Callable[[Dict[str, Any]], None]] = None,
) -> Machine:
    """The machine for `--simulate SPEC` (SimulatedMachine) or the real one."""
    from .gpu.catalog import parse_simulate

    spec = parse_simulate(simulate)
    if spec is None:
        return RealMachine(on_alert=on_alert)
    from .sim.machine import SimulatedMachine

    return SimulatedMachine(spec, seed=seed, activity=activity)
