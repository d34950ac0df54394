"""Fabricated sysfs/procfs trees in the real kernel layout, shaped after recorded `nvidia-smi topo -m`
outputs (tests/fixtures/agent/nvidia-smi_topo-m_*), plus NVML captures for the same machines.

A PCI device is a directory under /sys/devices/pci<domain>:<bus>/<root port>/<switch ports>/<bdf>,
with /sys/bus/pci/devices/<bdf> a relative symlink to it and a `numa_node` file (-1 = unknown), as
the kernel lays them out. Class devices (/sys/class/infiniband/<hca>, /sys/class/net/<if>) link to
their PCI device with a `device` symlink. The IB port files follow the procfs fixture
(tests/fakes/agent_sysfs_procfs), which is a real tree.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def pci_device(root: Path, chain: list[str], numa: int | None) -> Path:
    """Create /sys/devices/<chain...> and the /sys/bus/pci/devices link for its last element."""
    device = root / "sys" / "devices" / Path(*chain)
    device.mkdir(parents=True, exist_ok=True)
    _write(device / "numa_node", f"{-1 if numa is None else numa}\n")
    bus = root / "sys" / "bus" / "pci" / "devices"
    bus.mkdir(parents=True, exist_ok=True)
    link = bus / chain[-1]
    if not link.exists():
        os.symlink(os.path.relpath(device, bus), link)
    return device


def ib_port(
    root: Path,
    hca: str,
    device: Path,
    *,
    layer: str = "InfiniBand",
    rate: str = "400 Gb/sec (4X NDR)",
    tx: int = 0,
    rx: int = 0,
) -> None:
    base = root / "sys" / "class" / "infiniband" / hca
    base.mkdir(parents=True, exist_ok=True)
    if not (base / "device").exists():
        os.symlink(os.path.relpath(device, base), base / "device")
    port = base / "ports" / "1"
    _write(port / "link_layer", layer + "\n")
    _write(port / "rate", rate + "\n")
    _write(port / "state", "4: ACTIVE\n")
    _write(port / "phys_state", "5: LinkUp\n")
    set_ib_counters(root, hca, tx, rx)


def set_ib_counters(root: Path, hca: str, tx_words: int, rx_words: int) -> None:
    counters = root / "sys" / "class" / "infiniband" / hca / "ports" / "1" / "counters"
    _write(counters / "port_xmit_data", f"{tx_words}\n")
    _write(counters / "port_rcv_data", f"{rx_words}\n")


def net_interface(
    root: Path, name: str, device: Path | None, *, speed: int = 100000, kind: int = 1, tx: int = 0, rx: int = 0
) -> None:
    base = root / "sys" / "class" / "net" / name
    base.mkdir(parents=True, exist_ok=True)
    if device is not None and not (base / "device").exists():
        os.symlink(os.path.relpath(device, base), base / "device")
    _write(base / "speed", f"{speed}\n")
    _write(base / "operstate", "up\n")
    _write(base / "type", f"{kind}\n")
    set_net_counters(root, name, tx, rx)


def set_net_counters(root: Path, name: str, tx: int, rx: int) -> None:
    stats = root / "sys" / "class" / "net" / name / "statistics"
    _write(stats / "tx_bytes", f"{tx}\n")
    _write(stats / "rx_bytes", f"{rx}\n")


def proc_files(
    root: Path,
    *,
    busy: int = 1000,
    idle: int = 9000,
    mem_total_kb: int = 2113929216,
    mem_available_kb: int = 2013929216,
) -> None:
    _write(root / "proc" / "stat", f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\nintr 0\n")
    _write(
        root / "proc" / "meminfo",
        f"MemTotal:       {mem_total_kb} kB\nMemFree:         1000 kB\nMemAvailable:   {mem_available_kb} kB\n"
        "HugePages_Total:       0\n",
    )
    cpuinfo = ""
    for cpu in range(4):
        cpuinfo += (
            f"processor\t: {cpu}\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nphysical id\t: {cpu // 2}\n"
            f"core id\t\t: {cpu % 2}\n\n"
        )
    _write(root / "proc" / "cpuinfo", cpuinfo)
    _write(root / "sys" / "devices" / "system" / "node" / "node0" / "cpulist", "0-1\n")
    _write(root / "sys" / "devices" / "system" / "node" / "node1" / "cpulist", "2-3\n")


def _switch_chain(host_bus: int, slot: int) -> list[str]:
    """pci0000:HB / root port / switch upstream / switch downstream `slot`."""
    bus = host_bus
    return [
        f"pci0000:{bus:02x}",
        f"0000:{bus:02x}:01.0",
        "0000:%02x:00.0" % (bus + 1),
        f"0000:{bus + 2:02x}:{slot:02x}.0",
    ]


# -- nvidia-smi_topo-m_h100_8gpu_nvswitch_6nic_princeton-della.txt ---------------------------------
DELLA_GPU_HOSTS = (0x15, 0x27, 0x37, 0x59, 0x95, 0xA7, 0xB7, 0xD7)
DELLA_NIC_GPU = (0, 0, 3, 4, 4, 6)  # NIC i sits on the PCIe switch of this GPU (PIX in the fixture)


def della_tree(root: Path) -> dict[str, Any]:
    """8×H100 on NVSwitches, 6 NICs; GPUs know their NUMA node, the NICs do not (-1)."""
    gpus = []
    for index, host in enumerate(DELLA_GPU_HOSTS):
        chain = [*_switch_chain(host, 0), "0000:%02x:00.0" % (host + 3)]
        pci_device(root, chain, 0 if index < 4 else 1)
        gpus.append("00000000:%02X:00.0" % (host + 3))
    for nic, gpu in enumerate(DELLA_NIC_GPU):
        host = DELLA_GPU_HOSTS[gpu]
        slot = 1 + sum(1 for earlier in DELLA_NIC_GPU[:nic] if earlier == gpu)
        chain = [*_switch_chain(host, slot), f"0000:{host + 3 + slot:02x}:00.0"]
        device = pci_device(root, chain, None)
        ib_port(root, f"mlx5_{nic}", device)
    proc_files(root)
    return {"gpu_bus_ids": gpus, "nics": [f"mlx5_{n}/1" for n in range(6)]}


def nvswitch_capture(bus_ids: list[str], links: int = 18, switches: int = 4) -> dict[str, Any]:
    switch_ids = ["00000000:%02X:00.0" % (0x05 + s) for s in range(switches)]
    return _capture(
        bus_ids,
        lambda i: [
            {"link": n, "active": True, "remote_bus_id": switch_ids[n % switches], "remote_type": 2}
            for n in range(links)
        ],
    )


# -- nvidia-smi_topo-m_h100_4gpu_nv6_4nic_nccl-issue1617_excerpt.txt -------------------------------
NV6_NUMA = (3, 1, 7, 5)
NV6_HOSTS = (0x10, 0x30, 0x50, 0x70)


def nv6_tree(root: Path) -> dict[str, Any]:
    """4×H100 joined directly by 6 NVLinks per pair; NIC i on GPU i's switch; one NUMA node each."""
    gpus = []
    for index, host in enumerate(NV6_HOSTS):
        pci_device(root, [*_switch_chain(host, 0), "0000:%02x:00.0" % (host + 3)], NV6_NUMA[index])
        gpus.append("00000000:%02X:00.0" % (host + 3))
        device = pci_device(root, [*_switch_chain(host, 1), "0000:%02x:00.0" % (host + 4)], NV6_NUMA[index])
        ib_port(root, f"mlx5_{index}", device)
    proc_files(root)
    return {"gpu_bus_ids": gpus, "nics": [f"mlx5_{n}/1" for n in range(4)]}


def direct_capture(bus_ids: list[str], per_peer: int = 6) -> dict[str, Any]:
    def links(index: int) -> list[dict[str, Any]]:
        peers = [b for j, b in enumerate(bus_ids) if j != index]
        return [
            {"link": n, "active": True, "remote_bus_id": peers[n // per_peer], "remote_type": 0}
            for n in range(per_peer * len(peers))
        ]

    return _capture(bus_ids, links)


# -- nvidia-smi_topo-m_pcie-only_5gpu_club3090-issue46.txt -----------------------------------------
def pcie_only_tree(root: Path) -> dict[str, Any]:
    """5 GPUs, no NVLink: GPU0 alone on NUMA 1; GPU1+2 and GPU3+4 share a host bridge each on NUMA 0."""
    placements = [
        ["pci0000:80", "0000:80:01.0", "0000:81:00.0"],
        ["pci0000:00", "0000:00:01.0", "0000:01:00.0"],
        ["pci0000:00", "0000:00:03.0", "0000:02:00.0"],
        ["pci0000:40", "0000:40:01.0", "0000:41:00.0"],
        ["pci0000:40", "0000:40:03.0", "0000:42:00.0"],
    ]
    numa = [1, 0, 0, 0, 0]
    gpus = []
    for chain, node in zip(placements, numa, strict=False):
        pci_device(root, chain, node)
        gpus.append("00000000:" + chain[-1][5:].upper())
    proc_files(root)
    return {"gpu_bus_ids": gpus, "nics": []}


def _capture(bus_ids: list[str], links: Any) -> dict[str, Any]:
    devices = []
    for index, bus in enumerate(bus_ids):
        devices.append(
            {
                "name": "NVIDIA H100 80GB HBM3",
                "uuid": f"GPU-00000000-0000-0000-0000-{index:012d}",
                "bus_id": bus,
                "arch": 9,
                "pcie_gen": 5,
                "pcie_width": 16,
                "power_limit_mw": 700000,
                "memory": {"total": 85520809984, "reserved": 343932928, "free": 85174779904, "used": 2097152},
                "utilization": {"gpu": 0, "memory": 0},
                "power_mw": 72020,
                "temperature": 33,
                "clock_sm": 345,
                "clock_mem": 2619,
                "ecc_uncorrected_volatile": 0,
                "ecc_corrected_volatile": 0,
                "remapped_rows": [0, 0, 0, 0],
                "processes": [],
                "pcie_tx_kib": 0,
                "pcie_rx_kib": 0,
                "nvlinks": links(index),
                "nvlink_reads": [],
                "ancestor": {},
            }
        )
    return {"format": 1, "driver": "545.23.08", "cuda_driver_version": 12030, "nvml_reason": None, "devices": devices}


def parse_topo_matrix(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """Column names and {row name: labels} from `nvidia-smi topo -m` output (tabs or spaces)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = lines[0].split()
    columns = [c for c in header if c.startswith(("GPU", "NIC")) and c[3:].isdigit()]
    rows: dict[str, list[str]] = {}
    for line in lines[1:]:
        parts = line.split()
        if parts and parts[0] in columns:
            rows[parts[0]] = parts[1 : 1 + len(columns)]
    return columns, rows
