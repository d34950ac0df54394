"""The agent's `inventory` answer, assembled from the readers into the one record that defines its shape
(wire_inventory.Inventory; the shape is documented there). Readers hand in plain values; this module
only joins them and adds what the host itself says (hostname, agent and Python versions)."""

from __future__ import annotations

import platform
import socket
from typing import Any, Dict, Mapping, Optional, Sequence

from . import __version__
from .topology import label_rank
from .wire_inventory import Cpu, Gpu, Inventory, Nic, NumaNode, Topology


def nearest_nics(affinity: Mapping[str, Mapping[str, str]]) -> Dict[str, Optional[str]]:
    nearest: Dict[str, Optional[str]] = {}
    for gpu, labels in affinity.items():
        best = sorted(labels.items(), key=lambda item: (label_rank(item[1]), item[0]))
        nearest[gpu] = best[0][0] if best else None
    return nearest


def nic_record(nic: Mapping[str, Any]) -> Nic:
    """A reader's NIC (net.NetReader.inventory, or the simulated server's) as the record; its private
    keys (`pci_chain`, the simulated `gpu`) stay behind."""
    return Nic(
        name=nic["name"],
        kind=nic["kind"],
        rate_gbps=nic.get("rate_gbps"),
        state=nic.get("state"),
        pci_bus_id=nic.get("pci_bus_id"),
        numa_node=nic.get("numa_node"),
        addresses=tuple(nic.get("addresses") or ()),
        netdev=nic.get("netdev"),
    )


def cpu_record(cpu: Mapping[str, Any]) -> Cpu:
    """host.HostReader.cpu_info() (or the simulated server's) as the record."""
    return Cpu(
        model=cpu.get("model"),
        sockets=cpu.get("sockets"),
        cores=cpu.get("cores"),
        threads=cpu.get("threads"),
        arch=cpu.get("arch"),
        numa_nodes=tuple(NumaNode(node["node"], tuple(node["cpus"])) for node in cpu.get("numa_nodes") or ()),
    )


def assemble(
    *,
    simulated: bool,
    driver: Optional[str],
    cuda: Optional[str],
    gpus: Sequence[Gpu],
    gpu_reason: Optional[str],
    matrix: Sequence[Sequence[str]],
    affinity: Mapping[str, Mapping[str, str]],
    nics: Sequence[Mapping[str, Any]],
    cpu: Mapping[str, Any],
    ram_total_bytes: Optional[int],
) -> Inventory:
    nearest = nearest_nics(affinity)
    return Inventory(
        hostname=socket.gethostname(),
        agent=__version__,
        simulated=simulated,
        driver=driver,
        cuda=cuda,
        gpus=tuple(gpus),
        gpu_reason=gpu_reason,
        topology=Topology(
            matrix=tuple(tuple(row) for row in matrix),
            gpu_nic_affinity=tuple((int(gpu), tuple(labels.items())) for gpu, labels in affinity.items()),
            nearest_nic=tuple((int(gpu), nic) for gpu, nic in nearest.items()),
        ),
        nics=tuple(nic_record(nic) for nic in nics),
        cpu=cpu_record(cpu),
        ram_total_bytes=ram_total_bytes,
        python=platform.python_version(),
    )
