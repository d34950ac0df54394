"""CPU and RAM of the server from /proc and /sys, under an injectable root (tests use recorded trees).

CPU busy % is the share of non-idle jiffies between two reads of /proc/stat's aggregate "cpu" line
(idle + iowait count as idle; guest time is already inside user time and is not added twice). RAM
used is MemTotal - MemAvailable from /proc/meminfo, as `free` reports it.
"""

from __future__ import annotations

import os
import platform
from typing import Any, Dict, List, Optional, Tuple

from .wire_sample import HostSample


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def parse_proc_stat_cpu(text: str) -> Optional[Tuple[int, int]]:
    """(busy_jiffies, total_jiffies) from the aggregate 'cpu' line of /proc/stat."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            fields = [int(x) for x in line.split()[1:] if x.isdigit()]
            if len(fields) < 4:
                return None
            user, nice, system, idle = fields[:4]
            iowait = fields[4] if len(fields) > 4 else 0
            irq = fields[5] if len(fields) > 5 else 0
            softirq = fields[6] if len(fields) > 6 else 0
            steal = fields[7] if len(fields) > 7 else 0
            busy = user + nice + system + irq + softirq + steal
            return busy, busy + idle + iowait
    return None


def parse_meminfo(text: str) -> Dict[str, int]:
    """/proc/meminfo as bytes: {'MemTotal': ..., 'MemAvailable': ...}."""
    values: Dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if not parts:
            continue
        try:
            number = int(parts[0])
        except ValueError:
            continue
        values[name.strip()] = number * 1024 if len(parts) > 1 and parts[1] == "kB" else number
    return values


def parse_cpu_list(text: str) -> List[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus: List[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            cpus.extend(range(int(low), int(high) + 1))
        else:
            cpus.append(int(part))
    return cpus


class HostReader:
    """Reads CPU and RAM; keeps the previous /proc/stat reading for the busy %."""

    def __init__(self, root: str = "/") -> None:
        self.root = root
        self._previous: Optional[Tuple[int, int]] = None

    def _path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def read(self) -> HostSample:
        cpu_pct = None
        stat_text = _read(self._path("proc", "stat"))
        current = parse_proc_stat_cpu(stat_text) if stat_text else None
        if current and self._previous:
            busy = current[0] - self._previous[0]
            total = current[1] - self._previous[1]
            if total > 0 and busy >= 0:
                cpu_pct = round(100.0 * busy / total, 2)
        if current:
            self._previous = current
        memory = parse_meminfo(_read(self._path("proc", "meminfo")) or "")
        total_bytes = memory.get("MemTotal")
        available = memory.get("MemAvailable")
        used = total_bytes - available if total_bytes is not None and available is not None else None
        return HostSample.of(cpu_pct=cpu_pct, ram_used_bytes=used, ram_total_bytes=total_bytes)

    def ram_total_bytes(self) -> Optional[int]:
        return parse_meminfo(_read(self._path("proc", "meminfo")) or "").get("MemTotal")

    def cpu_info(self) -> Dict[str, Any]:
        """{"model", "sockets", "cores", "threads", "numa_nodes": [{"node", "cpus"}], "arch"}."""
        text = _read(self._path("proc", "cpuinfo")) or ""
        model = None
        threads = 0
        sockets = set()
        cores = set()
        physical = None
        for line in text.splitlines():
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key == "processor":
                threads += 1
            elif key == "model name" and model is None:
                model = value
            elif key == "physical id":
                physical = value
                sockets.add(value)
            elif key == "core id":
                cores.add((physical, value))
        nodes = []
        node_root = self._path("sys", "devices", "system", "node")
        try:
            names = sorted(n for n in os.listdir(node_root) if n.startswith("node") and n[4:].isdigit())
        except OSError:
            names = []
        for name in sorted(names, key=lambda n: int(n[4:])):
            cpulist = _read(os.path.join(node_root, name, "cpulist"))
            nodes.append({"node": int(name[4:]), "cpus": parse_cpu_list(cpulist) if cpulist else []})
        return {
            "model": model,
            "sockets": len(sockets) or (1 if threads else None),
            "cores": len(cores) or None,
            "threads": threads or os.cpu_count(),
            "numa_nodes": nodes,
            "arch": platform.machine() if self.root == "/" else None,
        }
