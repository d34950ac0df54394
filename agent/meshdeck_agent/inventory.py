"""The `inventory` result: what a server is made of. The planner and the console read this shape.

    {
      "hostname": "gpu-07",
      "agent": "0.1.0",                      # meshdeck-agent version
      "simulated": false,                    # true for every --simulate agent
      "driver": "570.172.08" | null,         # NVIDIA driver (NVML)
      "cuda": "12.8" | null,                 # CUDA version the driver supports
      "gpus": [{
          "index": 0, "name": "NVIDIA H200", "uuid": "GPU-...", "pci_bus_id": "00000000:18:00.0",
          "memory_total_bytes": .., "memory_reserved_bytes": .., "arch": "hopper" | null,
          "pcie_gen": 5, "pcie_width": 16, "power_limit_w": 700.0,
          "nvlink_links": [{"link": 0, "remote_pci_bus_id": "00000000:05:00.0", "active": true,
                            "remote_is_switch": true}],
          "numa_node": 0 | null}],
      "gpu_reason": null | "why there are no GPUs (NVML missing, no driver, ...)",
      "topology": {
          "matrix": [["X", "NV18", ...], ...],     # GPU × GPU, labels as `nvidia-smi topo -m`
          "gpu_nic_affinity": {"0": {"mlx5_0/1": "PIX", "mlx5_1/1": "NODE", "eth0": "SYS"}, ...},
          "nearest_nic": {"0": "mlx5_0/1", ...}    # closest NIC per GPU (ties: first by name)
      },
      "nics": [{"name": "mlx5_0/1", "kind": "infiniband" | "roce" | "ethernet", "rate_gbps": 400.0,
                "state": "ACTIVE", "pci_bus_id": "0000:19:00.0", "numa_node": 0 | null,
                "addresses": ["10.0.0.5/24", "fe80::1/64"],   # IPv4/IPv6 with prefix ([] when none)
                "netdev": "ib0" | null}],                      # IB/RoCE ports only: their interface
      "cpu": {"model": "...", "sockets": 2, "cores": 112, "threads": 224, "arch": "x86_64",
              "numa_nodes": [{"node": 0, "cpus": [0, 1, ...]}]},
      "ram_total_bytes": ..,
      "python": "3.11.7"
    }

Labels (see topology.py): X, NV<links>, PIX, PXB, PHB, NODE, SYS. Any value may be null when the
hardware or driver does not report it.
"""

from __future__ import annotations

import platform
import socket
from typing import Any, Dict, List, Optional

from . import __version__
from .topology import label_rank


def nearest_nics(affinity: Dict[str, Dict[str, str]]) -> Dict[str, Optional[str]]:
    nearest: Dict[str, Optional[str]] = {}
    for gpu, labels in affinity.items():
        best = sorted(labels.items(), key=lambda item: (label_rank(item[1]), item[0]))
        nearest[gpu] = best[0][0] if best else None
    return nearest


def assemble(
    *,
    simulated: bool,
    driver: Optional[str],
    cuda: Optional[str],
    gpus: List[Dict[str, Any]],
    gpu_reason: Optional[str],
    matrix: List[List[str]],
    affinity: Dict[str, Dict[str, str]],
    nics: List[Dict[str, Any]],
    cpu: Dict[str, Any],
    ram_total_bytes: Optional[int],
) -> Dict[str, Any]:
    public_nics = [{k: v for k, v in nic.items() if k != "pci_chain"} for nic in nics]
    return {
        "hostname": socket.gethostname(),
        "agent": __version__,
        "simulated": simulated,
        "driver": driver,
        "cuda": cuda,
        "gpus": gpus,
        "gpu_reason": gpu_reason,
        "topology": {"matrix": matrix, "gpu_nic_affinity": affinity, "nearest_nic": nearest_nics(affinity)},
        "nics": public_nics,
        "cpu": cpu,
        "ram_total_bytes": ram_total_bytes,
        "python": platform.python_version(),
    }
