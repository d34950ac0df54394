"""A whole simulated server for `--simulate`: GPUs (gpu/simulated.py), CPUs, RAM and NICs.

The server matches its GPU type: an HGX-style Hopper/Blackwell/Ampere box has two Xeon sockets and
one InfiniBand NIC per GPU (NDR 400 Gb/s; HDR 200 Gb/s for A100/A800) on the GPU's PCIe switch, plus
a management Ethernet port; a PCIe-card box (L40S, RTX-4090) has two 100 Gb/s RoCE NICs, one per
socket. Load comes from the simulated workers through `activity()` (see traffic.py).
Every inventory and sample says `simulated: true`.
"""

from __future__ import annotations

import random
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from .. import inventory as inventory_shape
from ..gpu.catalog import MIB, SimulateSpec
from ..gpu.processes import RawGpuProcesses
from ..gpu.simulated import SimulatedGpus, gpu_bus_id, numa_node
from ..machine import Reading
from ..wire_sample import HostSample, NicSample
from .traffic import SimWorkerActivity, machine_load

GIB = 1024 * MIB


class SimulatedMachine:
    simulated = True

    def __init__(
        self, spec: SimulateSpec, seed: int = 0, activity: Optional[Callable[[], List[SimWorkerActivity]]] = None
    ) -> None:
        self.spec = spec
        self.seed = seed
        self.gpus = SimulatedGpus(spec, seed)
        self.activity = activity or (lambda: [])
        self._rng = random.Random(seed + 1)
        self._lock = threading.Lock()
        gpu = spec.gpu
        self.threads = 224 if gpu.nic_per_gpu else 128
        self.ram_total = (2048 if gpu.arch in ("hopper", "blackwell") else 1024 if gpu.nic_per_gpu else 512) * GIB
        self.nics = self._nic_inventory()

    def start(self) -> None:
        """Nothing runs in the background for a simulated server."""

    def close(self) -> None:
        """Nothing to release."""

    def _nic_inventory(self) -> List[Dict[str, Any]]:
        gpu = self.spec.gpu
        nics: List[Dict[str, Any]] = []
        if gpu.nic_per_gpu:
            for index in range(self.spec.count):
                bus = gpu_bus_id(index)
                domain, bus_number = bus.split(":")[0][-4:].lower(), int(bus.split(":")[1], 16) + 1
                nics.append(
                    {
                        "name": "mlx5_%d/1" % index,
                        "kind": "infiniband",
                        "rate_gbps": float(gpu.nic_gbps),
                        "state": "ACTIVE",
                        "pci_bus_id": "%s:%02x:00.0" % (domain, bus_number),
                        "numa_node": numa_node(index, self.spec.count),
                        "netdev": None,  # a simulated fabric has no IP interface, so no addresses
                        "addresses": [],
                        "gpu": index,
                    }
                )
        else:
            for socket_index in range(2):
                nics.append(
                    {
                        "name": "mlx5_%d/1" % socket_index,
                        "kind": "roce",
                        "rate_gbps": float(gpu.nic_gbps),
                        "state": "ACTIVE",
                        "pci_bus_id": "0000:%02x:00.0" % (0x41 + 0x80 * socket_index),
                        "numa_node": socket_index,
                        "netdev": None,
                        "addresses": [],
                        "gpu": None,
                    }
                )
        nics.append(
            {
                "name": "eth0",
                "kind": "ethernet",
                "rate_gbps": 100.0 if gpu.nic_per_gpu else 25.0,
                "state": "UP",
                "pci_bus_id": "0000:03:00.0",
                "numa_node": 0,
                "addresses": [],  # simulated: the real interfaces' addresses are not this server's
                "gpu": None,
            }
        )
        return nics

    def _affinity(self) -> Dict[str, Dict[str, str]]:
        affinity: Dict[str, Dict[str, str]] = {}
        for index in range(self.spec.count):
            node = numa_node(index, self.spec.count)
            labels = {}
            for nic in self.nics:
                if nic["gpu"] == index:
                    labels[nic["name"]] = "PIX"
                else:
                    labels[nic["name"]] = "NODE" if nic["numa_node"] == node else "SYS"
            affinity[str(index)] = labels
        return affinity

    def inventory(self) -> Dict[str, Any]:
        gpu = self.spec.gpu
        hopper_class = gpu.arch in ("hopper", "blackwell")
        cores = self.threads // 2
        cpu = {
            "model": "Intel(R) Xeon(R) Platinum 8480+" if hopper_class else "AMD EPYC 7763 64-Core Processor",
            "sockets": 2,
            "cores": cores,
            "threads": self.threads,
            "arch": "x86_64",
            "numa_nodes": [{"node": n, "cpus": list(range(n * cores // 2, (n + 1) * cores // 2))} for n in range(2)],
        }
        record = inventory_shape.assemble(
            simulated=True,
            driver="570.172.08",
            cuda="12.8",
            gpus=self.gpus.inventory(),
            gpu_reason=None,
            matrix=self.gpus.matrix(),
            affinity=self._affinity(),
            nics=self.nics,
            cpu=cpu,
            ram_total_bytes=self.ram_total,
        )
        return record.to_wire()

    def gpu_processes(self) -> Tuple[List[RawGpuProcesses], Optional[str]]:
        """The simulated workers' processes per GPU (the `processes` answer, marked simulated by the daemon)."""
        with self._lock:
            load = machine_load(self.activity(), self.spec.count)
            return self.gpus.running_processes(load.gpus), None

    def read(self, now: float) -> Reading:
        with self._lock:
            load = machine_load(self.activity(), self.spec.count)
            gpus = self.gpus.read(now, load.gpus)
            rng = self._rng
            held = sum(g.held_bytes for g in load.gpus.values())
            cpu_pct = 1.5 + 100.0 * load.busy_cpu_threads / self.threads + abs(rng.gauss(0, 0.4))
            ram_used = 38 * GIB + int(held * 0.04) + int(abs(rng.gauss(0, 1)) * 64 * MIB)
            host = HostSample.of(
                cpu_pct=round(min(100.0, cpu_pct), 2),
                ram_used_bytes=min(self.ram_total, ram_used),
                ram_total_bytes=self.ram_total,
            )
            nics = []
            for nic in self.nics:
                if nic["kind"] == "ethernet":
                    tx = 40_000 + abs(rng.gauss(0, 1)) * 20_000
                    rx = 60_000 + abs(rng.gauss(0, 1)) * 20_000
                elif nic["gpu"] is not None:
                    traffic = load.network_bytes_per_s.get(nic["gpu"], 0.0)
                    tx = traffic * (1 + rng.gauss(0, 0.02)) + abs(rng.gauss(0, 1)) * 300
                    rx = traffic * (1 + rng.gauss(0, 0.02)) + abs(rng.gauss(0, 1)) * 300
                else:
                    traffic = sum(
                        v
                        for g, v in load.network_bytes_per_s.items()
                        if numa_node(g, self.spec.count) == nic["numa_node"]
                    )
                    tx = traffic * (1 + rng.gauss(0, 0.02)) + abs(rng.gauss(0, 1)) * 300
                    rx = traffic * (1 + rng.gauss(0, 0.02)) + abs(rng.gauss(0, 1)) * 300
                cap = (nic["rate_gbps"] or 0) * 1e9 / 8
                nics.append(
                    NicSample(nic["name"], nic["kind"], round(min(cap, max(0.0, tx))), round(min(cap, max(0.0, rx))))
                )
            return Reading(tuple(gpus), host, tuple(nics))
