"""InfiniBand / RoCE and Ethernet traffic from sysfs, under an injectable root.

- InfiniBand and RoCE ports: /sys/class/infiniband/<hca>/ports/<n>/counters/port_xmit_data and
  port_rcv_data count data octets divided by 4 (the IBTA PortCounters unit), so bytes = value × 4.
  `link_layer` says InfiniBand or Ethernet (= RoCE); `rate` reads like "400 Gb/sec (4X NDR)".
  Ports are named "<hca>/<port>" (mlx5_0/1), as NCCL_IB_HCA names them.
- Ethernet: /sys/class/net/<if>/statistics/{tx,rx}_bytes for interfaces backed by a device
  (virtual ones — lo, bridges, veth, bonds — are skipped so traffic is not counted twice; IPoIB
  interfaces (type 32) are skipped because their traffic is already in the IB port counters).

Rates are counter deltas over the wall time between two reads; a counter that went backwards
(reset, 32-bit wrap on old kernels) gives null for that interval rather than a fake spike.

The inventory also gives each NIC's IP addresses (ifaddrs.py): Ethernet entries their own, IB/RoCE
ports those of their `netdev` (the IPoIB or RoCE interface of that port), so the launcher can match
the head's address to a subnet.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .ifaddrs import Addresses, interface_addresses
from .topology import device_pci_chain
from .wire_sample import NicSample

ARPHRD_INFINIBAND = 32


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _read_int(path: str) -> Optional[int]:
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None


def parse_ib_rate(text: Optional[str]) -> Optional[float]:
    """'400 Gb/sec (4X NDR)' -> 400.0; '2.5 Gb/sec (1X SDR)' -> 2.5."""
    if not text:
        return None
    match = re.match(r"\s*([0-9.]+)\s*Gb/sec", text)
    return float(match.group(1)) if match else None


def parse_ib_state(text: Optional[str]) -> Optional[str]:
    """'4: ACTIVE' -> 'ACTIVE'."""
    if not text:
        return None
    return text.split(":", 1)[1].strip() if ":" in text else text.strip()


class NetReader:
    """Inventory and per-interval rates of the server's InfiniBand/RoCE ports and Ethernet NICs."""

    def __init__(
        self,
        root: str = "/",
        clock: Callable[[], float] = time.monotonic,
        addresses: Optional[Callable[[], Addresses]] = None,
    ) -> None:
        self.root = root
        self._clock = clock
        self._addresses = addresses or (lambda: interface_addresses(root))
        self._previous: Dict[str, Tuple[float, int, int]] = {}

    def _ib_root(self) -> str:
        return os.path.join(self.root, "sys", "class", "infiniband")

    def _net_root(self) -> str:
        return os.path.join(self.root, "sys", "class", "net")

    def _ib_ports(self) -> List[Tuple[str, str, str]]:
        """(name, hca, port dir) for every IB/RoCE port."""
        ports: List[Tuple[str, str, str]] = []
        try:
            hcas = sorted(os.listdir(self._ib_root()))
        except OSError:
            return ports
        for hca in hcas:
            port_root = os.path.join(self._ib_root(), hca, "ports")
            try:
                numbers = sorted(os.listdir(port_root), key=lambda p: int(p) if p.isdigit() else 0)
            except OSError:
                continue
            for number in numbers:
                ports.append(("%s/%s" % (hca, number), hca, os.path.join(port_root, number)))
        return ports

    def _ethernet(self) -> List[Tuple[str, str]]:
        interfaces: List[Tuple[str, str]] = []
        try:
            names = sorted(os.listdir(self._net_root()))
        except OSError:
            return interfaces
        for name in names:
            directory = os.path.join(self._net_root(), name)
            if name == "lo" or not os.path.exists(os.path.join(directory, "device")):
                continue
            if _read_int(os.path.join(directory, "type")) == ARPHRD_INFINIBAND:
                continue
            interfaces.append((name, directory))
        return interfaces

    def _ib_netdev(self, hca: str, port_dir: str) -> Optional[str]:
        """The network interface of an IB/RoCE port: gid_attrs/ndevs/0 (RoCE), else the HCA's one netdev,
        else the one whose dev_port is this port's number - 1 (IPoIB on a dual-port HCA)."""
        name = _read(os.path.join(port_dir, "gid_attrs", "ndevs", "0"))
        if name and os.path.isdir(os.path.join(self._net_root(), name)):
            return name
        try:
            candidates = sorted(os.listdir(os.path.join(self._ib_root(), hca, "device", "net")))
        except OSError:
            return None
        if len(candidates) == 1:
            return candidates[0]
        port = os.path.basename(port_dir)
        for candidate in candidates:
            dev_port = _read_int(os.path.join(self._net_root(), candidate, "dev_port"))
            if dev_port is not None and port.isdigit() and dev_port + 1 == int(port):
                return candidate
        return None

    def inventory(self) -> List[Dict[str, Any]]:
        """[{"name", "kind", "rate_gbps", "state", "pci_bus_id", "pci_chain", "numa_node", "addresses"}]
        (IB/RoCE ports also "netdev": their interface or null; "addresses" are that interface's)."""
        nics: List[Dict[str, Any]] = []
        addresses = self._addresses()
        for name, hca, port_dir in self._ib_ports():
            layer = (_read(os.path.join(port_dir, "link_layer")) or "InfiniBand").lower()
            chain = device_pci_chain(self.root, os.path.join(self._ib_root(), hca, "device"))
            netdev = self._ib_netdev(hca, port_dir)
            nics.append(
                {
                    "name": name,
                    "kind": "roce" if layer == "ethernet" else "infiniband",
                    "rate_gbps": parse_ib_rate(_read(os.path.join(port_dir, "rate"))),
                    "state": parse_ib_state(_read(os.path.join(port_dir, "state"))),
                    "pci_bus_id": chain[-1] if chain else None,
                    "pci_chain": chain,
                    "numa_node": _read_int(os.path.join(self._ib_root(), hca, "device", "numa_node")),
                    "netdev": netdev,
                    "addresses": list(addresses.get(netdev, [])) if netdev else [],
                }
            )
        for name, directory in self._ethernet():
            speed = _read_int(os.path.join(directory, "speed"))
            chain = device_pci_chain(self.root, os.path.join(directory, "device"))
            nics.append(
                {
                    "name": name,
                    "kind": "ethernet",
                    "rate_gbps": speed / 1000.0 if speed is not None and speed > 0 else None,
                    "state": (_read(os.path.join(directory, "operstate")) or "unknown").upper(),
                    "pci_bus_id": chain[-1] if chain else None,
                    "pci_chain": chain,
                    "numa_node": _read_int(os.path.join(directory, "device", "numa_node")),
                    "addresses": list(addresses.get(name, [])),
                }
            )
        for nic in nics:
            if isinstance(nic.get("numa_node"), int) and nic["numa_node"] < 0:
                nic["numa_node"] = None
        return nics

    def counters(self) -> List[Tuple[str, str, Optional[int], Optional[int]]]:
        """(name, kind, tx_bytes, rx_bytes) cumulative, None where unreadable."""
        rows = []
        for name, _hca, port_dir in self._ib_ports():
            layer = (_read(os.path.join(port_dir, "link_layer")) or "InfiniBand").lower()
            tx = _read_int(os.path.join(port_dir, "counters", "port_xmit_data"))
            rx = _read_int(os.path.join(port_dir, "counters", "port_rcv_data"))
            rows.append(
                (
                    name,
                    "roce" if layer == "ethernet" else "infiniband",
                    tx * 4 if tx is not None else None,
                    rx * 4 if rx is not None else None,
                )
            )
        for name, directory in self._ethernet():
            rows.append(
                (
                    name,
                    "ethernet",
                    _read_int(os.path.join(directory, "statistics", "tx_bytes")),
                    _read_int(os.path.join(directory, "statistics", "rx_bytes")),
                )
            )
        return rows

    def read(self) -> List[NicSample]:
        """One record per port; its rates are None on the first read."""
        now = self._clock()
        result = []
        current: Dict[str, Tuple[float, int, int]] = {}
        for name, kind, tx, rx in self.counters():
            tx_rate = rx_rate = None
            previous = self._previous.get(name)
            if previous and tx is not None and rx is not None:
                elapsed = now - previous[0]
                if elapsed > 0:
                    if tx >= previous[1]:
                        tx_rate = round((tx - previous[1]) / elapsed, 1)
                    if rx >= previous[2]:
                        rx_rate = round((rx - previous[2]) / elapsed, 1)
            if tx is not None and rx is not None:
                current[name] = (now, tx, rx)
            result.append(NicSample(name, kind, tx_rate, rx_rate))
        self._previous = current
        return result
