"""GPU × GPU and GPU ↔ NIC topology, labelled the way `nvidia-smi topo -m` labels it.

    X     the GPU itself
    NV#   a bonded set of # NVLinks (direct, or through the same NVSwitch fabric)
    PIX   at most a single PCIe bridge (same PCIe switch)
    PXB   multiple PCIe bridges, no host bridge
    PHB   through a PCIe host bridge (the CPU)
    NODE  between PCIe host bridges within one NUMA node
    SYS   across the SMP interconnect between NUMA nodes (QPI/UPI/xGMI)

GPU pairs first look for NVLinks (remote PCI ids from NVML); without any, NVML's common-ancestor
level is used. NICs are placed from their PCI paths in sysfs (`/sys/bus/pci/devices/<bdf>` resolves to
`/sys/devices/pci<domain>:<bus>/<root port>/<switch ports>/.../<bdf>`). This matrix is what the planner
reads to keep tensor-parallel groups on NVLink.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

LABEL_ORDER = ("X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS")

# nvmlGpuTopologyLevel_t values (pynvml NVML_TOPOLOGY_*) -> nvidia-smi label
NVML_LEVEL_LABELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def label_rank(label: str) -> int:
    """Lower is closer: X < NV# (more links closer) < PIX < PXB < PHB < NODE < SYS."""
    if label == "X":
        return 0
    if label.startswith("NV"):
        try:
            return 1000 - int(label[2:])
        except ValueError:
            return 1000
    return 2000 + LABEL_ORDER.index(label) if label in LABEL_ORDER else 9999


def normalize_bus_id(bus_id: str) -> str:
    """NVML's '00000000:18:00.0' -> sysfs '0000:18:00.0' (4-hex domain, lower case)."""
    text = bus_id.strip().lower()
    parts = text.split(":")
    if len(parts) == 3 and len(parts[0]) > 4:
        parts[0] = parts[0][-4:]
    return ":".join(parts)


def sysfs_pci_path(root: str, bus_id: str) -> Optional[List[str]]:
    """The chain of PCI components from the host bridge down to `bus_id`, e.g.
    ['pci0000:15', '0000:15:01.0', '0000:16:00.0', '0000:17:00.0', '0000:18:00.0']; None if unknown."""
    link = os.path.join(root, "sys", "bus", "pci", "devices", normalize_bus_id(bus_id))
    return _device_chain(root, link)


def _device_chain(root: str, link: str) -> Optional[List[str]]:
    if not os.path.exists(link):
        return None
    real = os.path.realpath(link)
    devices = os.path.realpath(os.path.join(root, "sys", "devices"))
    if not real.startswith(devices + os.sep):
        return None
    parts = real[len(devices) + 1 :].split(os.sep)
    return parts if parts and parts[0].startswith("pci") else None


def device_pci_chain(root: str, device_link: str) -> Optional[List[str]]:
    """PCI chain of a class device (e.g. /sys/class/infiniband/mlx5_0/device)."""
    return _device_chain(root, device_link)


def numa_node_of(root: str, bus_id: str) -> Optional[int]:
    path = os.path.join(root, "sys", "bus", "pci", "devices", normalize_bus_id(bus_id), "numa_node")
    try:
        with open(path) as handle:
            value = int(handle.read().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def pci_label(
    chain_a: Optional[Sequence[str]], chain_b: Optional[Sequence[str]], numa_a: Optional[int], numa_b: Optional[int]
) -> str:
    """Label for two PCI devices from their chains and NUMA nodes (see module doc)."""
    if not chain_a or not chain_b or chain_a[0] != chain_b[0]:
        # across host bridges: SYS only when both NUMA nodes are known and differ (nvidia-smi shows NODE
        # for a NIC whose numa_node is -1, as on the recorded HGX H100 of tests/fixtures/agent)
        return "SYS" if numa_a is not None and numa_b is not None and numa_a != numa_b else "NODE"
    common = 0
    for left, right in zip(chain_a, chain_b):
        if left != right:
            break
        common += 1
    if common <= 1:
        return "PHB"
    if common >= min(len(chain_a), len(chain_b)):
        return "PIX"  # one device sits under the other (a function of the same card)
    bridges_a = len(chain_a) - common - 1
    bridges_b = len(chain_b) - common - 1
    return "PIX" if bridges_a <= 1 and bridges_b <= 1 and common >= 3 else "PXB"


def gpu_matrix(count: int, nvlinks: Callable[[int, int], int], fallback: Callable[[int, int], str]) -> List[List[str]]:
    """count × count labels: 'X' on the diagonal, 'NV<n>' where n NVLinks join the pair, else fallback."""
    matrix: List[List[str]] = []
    for i in range(count):
        row = []
        for j in range(count):
            if i == j:
                row.append("X")
                continue
            links = nvlinks(i, j)
            row.append("NV%d" % links if links > 0 else fallback(i, j))
        matrix.append(row)
    return matrix


def nvlink_pair_counts(
    gpu_bus_ids: Sequence[str], remote_bus_ids: Sequence[Sequence[Optional[str]]], switch_bus_ids: Sequence[str] = ()
) -> Callable[[int, int], int]:
    """How many NVLinks join GPUs i and j, from each GPU's active links' remote PCI ids.

    A link whose remote is another GPU counts directly. Links to NVSwitches (remote not a GPU, or listed
    in `switch_bus_ids`) put the GPU on the switch fabric; two GPUs on the same switches are joined by
    as many links as the smaller of their switch-link counts (NV18 on an HGX H100 board).
    """
    gpus = [normalize_bus_id(b) for b in gpu_bus_ids]
    index = {bus: i for i, bus in enumerate(gpus)}
    switches = {normalize_bus_id(b) for b in switch_bus_ids}
    direct: Dict[Tuple[int, int], int] = {}  # (from, to) as seen from `from`'s links
    fabric: List[Dict[str, int]] = []
    for i, remotes in enumerate(remote_bus_ids):
        on_switch: Dict[str, int] = {}
        for remote in remotes:
            if not remote:
                continue
            remote = normalize_bus_id(remote)
            if remote in index and remote not in switches:
                direct[(i, index[remote])] = direct.get((i, index[remote]), 0) + 1
            else:
                on_switch[remote] = on_switch.get(remote, 0) + 1
        fabric.append(on_switch)

    def count(i: int, j: int) -> int:
        links = max(direct.get((i, j), 0), direct.get((j, i), 0))
        if links:
            return links
        if i < len(fabric) and j < len(fabric) and set(fabric[i]) & set(fabric[j]):
            return min(sum(fabric[i].values()), sum(fabric[j].values()))
        return 0

    return count


def nic_affinity(
    gpu_chains: Sequence[Optional[Sequence[str]]],
    gpu_numa: Sequence[Optional[int]],
    nics: Sequence[Dict[str, object]],
) -> Dict[str, Dict[str, str]]:
    """{"<gpu index>": {"<nic name>": label}} for every GPU and NIC with a PCI placement.

    `nics` items carry "name", "pci_chain" (list or None) and "numa_node" (int or None).
    """
    result: Dict[str, Dict[str, str]] = {}
    for index, chain in enumerate(gpu_chains):
        labels: Dict[str, str] = {}
        for nic in nics:
            nic_chain = nic.get("pci_chain")
            nic_numa = nic.get("numa_node")
            labels[str(nic["name"])] = pci_label(
                chain,
                nic_chain if isinstance(nic_chain, list) else None,
                gpu_numa[index] if index < len(gpu_numa) else None,
                nic_numa if isinstance(nic_numa, int) else None,
            )
        result[str(index)] = labels
    return result
