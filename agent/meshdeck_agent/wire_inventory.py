"""The `inventory` result as typed records: what a server is made of, decoded once where it arrives.

The agent builds its answer from these records (inventory.assemble) and sends `Inventory.to_wire()`;
the app turns the answer into an `Inventory` with `Inventory.from_wire(obj)`, which checks every field
and raises `InventoryError` (a ValueError) whose `.field` is the path of the first bad one, such as
`gpus[3].memory_total_bytes`. Past that call nothing needs to re-check a type.

    {
      "hostname": "gpu-07",
      "agent": "0.2.0",                      # meshdeck-agent version
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

Labels (topology.py): X, NV<links>, PIX, PXB, PHB, NODE, SYS. A value the hardware or driver does not
report is null; a key an older agent does not send reads as null (as empty for the lists and for
`topology` and `cpu`, which are never null themselves), and keys this side does not know are ignored
(protocol 1 grows compatibly). So `to_wire()` returns exactly what `from_wire()` was given whenever
that held every key and no unknown one: the form the agent sends.

Limits, so that a hostile or broken server cannot make the app hold or draw something absurd:
strings are kept as sent (display code escapes them) but bounded in length and must be encodable
text; integers are never booleans and lie in a stated range; floats are finite; lists are bounded
(at most MAX_GPUS GPUs, MAX_NICS NICs); the matrix is square and has one row per GPU (or none); GPU
indices are unique, and the topology's per-GPU maps name listed GPUs only.

Stdlib only; runs on Python 3.9 (the agent's minimum).
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, TypeVar

MAX_GPUS = 1024
MAX_NICS = 1024
MAX_NVLINKS = 64  # per GPU (NVML_NVLINK_MAX_LINKS is 18 today)
MAX_NUMA_NODES = 1024
MAX_CPUS = 65536  # CPU ids and CPUs per NUMA node
MAX_ADDRESSES = 256  # per NIC
MAX_TEXT = 256  # hostname, names, ids, versions
MAX_REASON = 2048  # gpu_reason: an error text
MAX_BYTES = 1 << 60  # any memory size
MAX_WATTS = 100_000.0
MAX_GBPS = 1_000_000.0
MAX_PCIE_GEN = 64
MAX_PCIE_WIDTH = 1024
MAX_COUNT = 1 << 20  # sockets, cores, threads

GPU_LABEL = re.compile(r"^(?:NV[0-9]{1,3}|PIX|PXB|PHB|NODE|SYS)$")  # between two GPUs, or a GPU and a NIC
_GPU_KEY = re.compile(r"^(?:0|[1-9][0-9]{0,3})$")
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_./:@-]{1,64}$")

T = TypeVar("T")


class InventoryError(ValueError):
    """An inventory that breaks the shape above. `field` is the path of the bad value ("" for the whole
    object), `problem` says what was expected and what came; `str()` is "<path>: <problem>"."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__("%s: %s" % (field or "inventory", problem))
        self.field = field
        self.problem = problem

    @property
    def path(self) -> str:
        """The field as the app names it: "inventory" or "inventory.gpus[3].memory_total_bytes"."""
        return "inventory.%s" % self.field if self.field else "inventory"


# -- decoding helpers: each takes the value and its path, returns it typed or raises InventoryError ---


_JSON_KINDS: Dict[type, str] = {dict: "object", list: "list"}


def _shown(value: Any) -> str:
    """A short, escaped description of a bad value for an error message (never the raw string)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return "a JSON %s" % _JSON_KINDS.get(type(value), type(value).__name__)


def _join(path: str, key: str) -> str:
    return "%s.%s" % (path, key) if path else key


def _key_path(path: str, key: str) -> str:
    """The path of a value under a key the server chose (a NIC name): as is when it is a plain name, else
    escaped in brackets, so that an error message never carries raw control characters."""
    return _join(path, key) if _PLAIN_KEY.match(key) else "%s[%s]" % (path, _shown(key))


def _object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise InventoryError(path, "must be an object, got %s" % _shown(value))
    return value


def _list(value: Any, path: str, limit: int) -> List[Any]:
    if not isinstance(value, list):
        raise InventoryError(path, "must be a list, got %s" % _shown(value))
    if len(value) > limit:
        raise InventoryError(path, "has %d entries; at most %d are allowed" % (len(value), limit))
    return value


def _text(value: Any, path: str, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str):
        raise InventoryError(path, "must be a string, got %s" % _shown(value))
    if len(value) > limit:
        raise InventoryError(path, "is %d characters long; at most %d are allowed" % (len(value), limit))
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InventoryError(path, "is not valid text (it holds an unpaired surrogate)") from None
    return value


def _int(value: Any, path: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InventoryError(path, "must be an integer, got %s" % _shown(value))
    if not low <= value <= high:
        raise InventoryError(path, "must be from %d to %d, got %s" % (low, high, _shown(value)))
    return value


def _float(value: Any, path: str, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InventoryError(path, "must be a number, got %s" % _shown(value))
    if isinstance(value, int):
        if not 0 <= value <= high:
            raise InventoryError(path, "must be from 0 to %g, got %s" % (high, _shown(value)))
        return float(value)
    if not math.isfinite(value) or not 0.0 <= value <= high:
        raise InventoryError(path, "must be a finite number from 0 to %g, got %s" % (high, _shown(value)))
    return value


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise InventoryError(path, "must be true or false, got %s" % _shown(value))
    return value


def _optional(obj: Mapping[str, Any], key: str, path: str, read: Callable[[Any, str], T]) -> Optional[T]:
    value = obj.get(key)
    return None if value is None else read(value, _join(path, key))


def _opt_text(obj: Mapping[str, Any], key: str, path: str, limit: int = MAX_TEXT) -> Optional[str]:
    return _optional(obj, key, path, lambda v, p: _text(v, p, limit))


def _opt_int(obj: Mapping[str, Any], key: str, path: str, low: int, high: int) -> Optional[int]:
    return _optional(obj, key, path, lambda v, p: _int(v, p, low, high))


def _opt_float(obj: Mapping[str, Any], key: str, path: str, high: float) -> Optional[float]:
    return _optional(obj, key, path, lambda v, p: _float(v, p, high))


def _items(obj: Mapping[str, Any], key: str, path: str, limit: int, read: Callable[[Any, str], T]) -> Tuple[T, ...]:
    """A list field (missing: empty), each item read with its own index in the path."""
    if key not in obj:
        return ()
    where = _join(path, key)
    return tuple(read(item, "%s[%d]" % (where, i)) for i, item in enumerate(_list(obj[key], where, limit)))


def _gpu_key(key: Any, path: str, indices: Mapping[int, int]) -> int:
    """A topology map's key: the decimal index of a listed GPU ("0", "7")."""
    if not isinstance(key, str) or not _GPU_KEY.match(key):
        raise InventoryError(path, "key %s is not a GPU index" % _shown(key))
    index = int(key)
    if index not in indices:
        raise InventoryError(path, "key %s names no listed GPU" % _shown(key))
    return index


def _label(value: Any, path: str) -> str:
    text = _text(value, path)
    if not GPU_LABEL.match(text):
        raise InventoryError(path, "%s is not one of NV<n>, PIX, PXB, PHB, NODE, SYS" % _shown(text))
    return text


def _address(value: Any, path: str) -> str:
    text = _text(value, path, 64)
    if "/" not in text:
        raise InventoryError(path, "%s is not an IP address with a prefix (10.0.0.5/24)" % _shown(text))
    try:
        ipaddress.ip_interface(text)
    except ValueError:
        raise InventoryError(path, "%s is not an IP address with a prefix (10.0.0.5/24)" % _shown(text)) from None
    return text


# -- records -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NvLink:
    """One NVLink of a GPU: where it goes (a PCI bus id of a GPU or an NVSwitch) and whether it is up."""

    link: int
    remote_pci_bus_id: Optional[str]
    active: bool
    remote_is_switch: bool = False

    @classmethod
    def from_wire(cls, obj: Any, path: str) -> NvLink:
        obj = _object(obj, path)
        return cls(
            link=_int(obj.get("link"), _join(path, "link"), 0, MAX_NVLINKS - 1),
            remote_pci_bus_id=_opt_text(obj, "remote_pci_bus_id", path),
            active=_bool(obj.get("active", False), _join(path, "active")),
            remote_is_switch=_bool(obj.get("remote_is_switch", False), _join(path, "remote_is_switch")),
        )

    def to_wire(self) -> Dict[str, Any]:
        return {
            "link": self.link,
            "remote_pci_bus_id": self.remote_pci_bus_id,
            "active": self.active,
            "remote_is_switch": self.remote_is_switch,
        }


@dataclass(frozen=True)
class Gpu:
    index: int
    name: Optional[str] = None
    uuid: Optional[str] = None
    pci_bus_id: Optional[str] = None
    memory_total_bytes: Optional[int] = None
    memory_reserved_bytes: Optional[int] = None
    arch: Optional[str] = None
    pcie_gen: Optional[int] = None
    pcie_width: Optional[int] = None
    power_limit_w: Optional[float] = None
    nvlink_links: Tuple[NvLink, ...] = ()
    numa_node: Optional[int] = None

    @property
    def active_nvlinks(self) -> int:
        return sum(1 for link in self.nvlink_links if link.active)

    @classmethod
    def from_wire(cls, obj: Any, path: str) -> Gpu:
        obj = _object(obj, path)
        links = _items(obj, "nvlink_links", path, MAX_NVLINKS, NvLink.from_wire)
        seen = set()
        for i, link in enumerate(links):
            if link.link in seen:
                raise InventoryError("%s.nvlink_links[%d].link" % (path, i), "link %d is listed twice" % link.link)
            seen.add(link.link)
        total = _opt_int(obj, "memory_total_bytes", path, 0, MAX_BYTES)
        reserved = _opt_int(obj, "memory_reserved_bytes", path, 0, MAX_BYTES)
        if total is not None and reserved is not None and reserved > total:
            raise InventoryError(
                _join(path, "memory_reserved_bytes"), "%d is more than memory_total_bytes %d" % (reserved, total)
            )
        return cls(
            index=_int(obj.get("index"), _join(path, "index"), 0, MAX_GPUS - 1),
            name=_opt_text(obj, "name", path),
            uuid=_opt_text(obj, "uuid", path),
            pci_bus_id=_opt_text(obj, "pci_bus_id", path),
            memory_total_bytes=total,
            memory_reserved_bytes=reserved,
            arch=_opt_text(obj, "arch", path),
            pcie_gen=_opt_int(obj, "pcie_gen", path, 0, MAX_PCIE_GEN),
            pcie_width=_opt_int(obj, "pcie_width", path, 0, MAX_PCIE_WIDTH),
            power_limit_w=_opt_float(obj, "power_limit_w", path, MAX_WATTS),
            nvlink_links=links,
            numa_node=_opt_int(obj, "numa_node", path, 0, MAX_NUMA_NODES - 1),
        )

    def to_wire(self) -> Dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "pci_bus_id": self.pci_bus_id,
            "memory_total_bytes": self.memory_total_bytes,
            "memory_reserved_bytes": self.memory_reserved_bytes,
            "arch": self.arch,
            "pcie_gen": self.pcie_gen,
            "pcie_width": self.pcie_width,
            "power_limit_w": self.power_limit_w,
            "nvlink_links": [link.to_wire() for link in self.nvlink_links],
            "numa_node": self.numa_node,
        }


@dataclass(frozen=True)
class Topology:
    """How GPUs reach each other and the NICs. `gpu_nic_affinity` and `nearest_nic` are keyed by GPU
    index and keep the wire's order: ((gpu, ((nic, label), ...)), ...) and ((gpu, nic or None), ...)."""

    matrix: Tuple[Tuple[str, ...], ...] = ()
    gpu_nic_affinity: Tuple[Tuple[int, Tuple[Tuple[str, str], ...]], ...] = ()
    nearest_nic: Tuple[Tuple[int, Optional[str]], ...] = ()

    def affinity(self, gpu: int) -> Dict[str, str]:
        """NIC name -> label for one GPU ({} when the agent placed no NIC for it)."""
        for index, labels in self.gpu_nic_affinity:
            if index == gpu:
                return dict(labels)
        return {}

    def nearest(self, gpu: int) -> Optional[str]:
        for index, nic in self.nearest_nic:
            if index == gpu:
                return nic
        return None

    @classmethod
    def from_wire(cls, obj: Any, path: str, indices: Mapping[int, int]) -> Topology:
        obj = _object(obj, path)
        return cls(
            matrix=cls._matrix(obj.get("matrix", []), _join(path, "matrix"), len(indices)),
            gpu_nic_affinity=cls._affinity(obj.get("gpu_nic_affinity", {}), _join(path, "gpu_nic_affinity"), indices),
            nearest_nic=cls._nearest(obj.get("nearest_nic", {}), _join(path, "nearest_nic"), indices),
        )

    @staticmethod
    def _matrix(value: Any, path: str, gpus: int) -> Tuple[Tuple[str, ...], ...]:
        rows = _list(value, path, MAX_GPUS)
        if rows and len(rows) != gpus:
            raise InventoryError(path, "has %d rows for %d GPUs (one row per GPU, or none)" % (len(rows), gpus))
        matrix = []
        for i, row in enumerate(rows):
            where = "%s[%d]" % (path, i)
            cells = _list(row, where, MAX_GPUS)
            if len(cells) != len(rows):
                raise InventoryError(where, "has %d columns; the matrix is %d × %d" % (len(cells), gpus, gpus))
            codes = []
            for j, cell in enumerate(cells):
                at = "%s[%d]" % (where, j)
                if i == j:
                    if cell != "X":
                        raise InventoryError(at, "a GPU to itself must be 'X', got %s" % _shown(cell))
                    codes.append("X")
                else:
                    codes.append(_label(cell, at))
            matrix.append(tuple(codes))
        return tuple(matrix)

    @staticmethod
    def _affinity(
        value: Any, path: str, indices: Mapping[int, int]
    ) -> Tuple[Tuple[int, Tuple[Tuple[str, str], ...]], ...]:
        rows = _object(value, path)
        if len(rows) > MAX_GPUS:
            raise InventoryError(path, "has %d GPUs; at most %d are allowed" % (len(rows), MAX_GPUS))
        result = []
        for key, labels in rows.items():
            gpu = _gpu_key(key, path, indices)
            where = "%s.%s" % (path, key)
            labels = _object(labels, where)
            if len(labels) > MAX_NICS:
                raise InventoryError(where, "has %d NICs; at most %d are allowed" % (len(labels), MAX_NICS))
            result.append(
                (gpu, tuple((_text(nic, where), _label(code, _key_path(where, nic))) for nic, code in labels.items()))
            )
        return tuple(result)

    @staticmethod
    def _nearest(value: Any, path: str, indices: Mapping[int, int]) -> Tuple[Tuple[int, Optional[str]], ...]:
        rows = _object(value, path)
        if len(rows) > MAX_GPUS:
            raise InventoryError(path, "has %d GPUs; at most %d are allowed" % (len(rows), MAX_GPUS))
        return tuple(
            (_gpu_key(key, path, indices), None if nic is None else _text(nic, "%s.%s" % (path, key)))
            for key, nic in rows.items()
        )

    def to_wire(self) -> Dict[str, Any]:
        return {
            "matrix": [list(row) for row in self.matrix],
            "gpu_nic_affinity": {str(gpu): dict(labels) for gpu, labels in self.gpu_nic_affinity},
            "nearest_nic": {str(gpu): nic for gpu, nic in self.nearest_nic},
        }


@dataclass(frozen=True)
class Nic:
    """A network port: an InfiniBand / RoCE HCA port ("mlx5_0/1", with its `netdev` if it has one) or an
    Ethernet interface. `addresses` are "address/prefix" strings."""

    name: str
    kind: str  # "infiniband" | "roce" | "ethernet" (a newer agent may name another kind)
    rate_gbps: Optional[float] = None
    state: Optional[str] = None
    pci_bus_id: Optional[str] = None
    numa_node: Optional[int] = None
    addresses: Tuple[str, ...] = ()
    netdev: Optional[str] = None

    @property
    def is_rdma(self) -> bool:
        return self.kind in ("infiniband", "roce")

    @classmethod
    def from_wire(cls, obj: Any, path: str) -> Nic:
        obj = _object(obj, path)
        return cls(
            name=_text(obj.get("name"), _join(path, "name")),
            kind=_text(obj.get("kind", "ethernet"), _join(path, "kind")),
            rate_gbps=_opt_float(obj, "rate_gbps", path, MAX_GBPS),
            state=_opt_text(obj, "state", path),
            pci_bus_id=_opt_text(obj, "pci_bus_id", path),
            numa_node=_opt_int(obj, "numa_node", path, 0, MAX_NUMA_NODES - 1),
            addresses=_items(obj, "addresses", path, MAX_ADDRESSES, _address),
            netdev=_opt_text(obj, "netdev", path),
        )

    def to_wire(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "rate_gbps": self.rate_gbps,
            "state": self.state,
            "pci_bus_id": self.pci_bus_id,
            "numa_node": self.numa_node,
            "addresses": list(self.addresses),
            "netdev": self.netdev,
        }


@dataclass(frozen=True)
class NumaNode:
    node: int
    cpus: Tuple[int, ...] = ()

    @classmethod
    def from_wire(cls, obj: Any, path: str) -> NumaNode:
        obj = _object(obj, path)
        return cls(
            node=_int(obj.get("node"), _join(path, "node"), 0, MAX_NUMA_NODES - 1),
            cpus=_items(obj, "cpus", path, MAX_CPUS, lambda v, p: _int(v, p, 0, MAX_CPUS - 1)),
        )

    def to_wire(self) -> Dict[str, Any]:
        return {"node": self.node, "cpus": list(self.cpus)}


@dataclass(frozen=True)
class Cpu:
    model: Optional[str] = None
    sockets: Optional[int] = None
    cores: Optional[int] = None
    threads: Optional[int] = None
    arch: Optional[str] = None
    numa_nodes: Tuple[NumaNode, ...] = ()

    @classmethod
    def from_wire(cls, obj: Any, path: str) -> Cpu:
        obj = _object(obj, path)
        return cls(
            model=_opt_text(obj, "model", path),
            sockets=_opt_int(obj, "sockets", path, 0, MAX_COUNT),
            cores=_opt_int(obj, "cores", path, 0, MAX_COUNT),
            threads=_opt_int(obj, "threads", path, 0, MAX_COUNT),
            arch=_opt_text(obj, "arch", path),
            numa_nodes=_items(obj, "numa_nodes", path, MAX_NUMA_NODES, NumaNode.from_wire),
        )

    def to_wire(self) -> Dict[str, Any]:
        return {
            "model": self.model,
            "sockets": self.sockets,
            "cores": self.cores,
            "threads": self.threads,
            "arch": self.arch,
            "numa_nodes": [node.to_wire() for node in self.numa_nodes],
        }


@dataclass(frozen=True)
class Inventory:
    hostname: Optional[str] = None
    agent: Optional[str] = None
    simulated: bool = False
    driver: Optional[str] = None
    cuda: Optional[str] = None
    gpus: Tuple[Gpu, ...] = ()
    gpu_reason: Optional[str] = None
    topology: Topology = field(default_factory=Topology)
    nics: Tuple[Nic, ...] = ()
    cpu: Cpu = field(default_factory=Cpu)
    ram_total_bytes: Optional[int] = None
    python: Optional[str] = None

    @property
    def gpu_names(self) -> Tuple[str, ...]:
        """The distinct GPU model names, sorted (unnamed GPUs left out)."""
        return tuple(sorted({gpu.name for gpu in self.gpus if gpu.name is not None}))

    @property
    def smallest_gpu_memory_bytes(self) -> Optional[int]:
        """The smallest reported GPU memory: what a uniform layout must fit in (None: none reported)."""
        sizes = [gpu.memory_total_bytes for gpu in self.gpus if gpu.memory_total_bytes]
        return min(sizes) if sizes else None

    @property
    def largest_gpu_memory_bytes(self) -> int:
        return max((gpu.memory_total_bytes or 0 for gpu in self.gpus), default=0)

    @classmethod
    def from_wire(cls, obj: Any) -> Inventory:
        """Decode and check an `inventory` result; raises InventoryError naming the first bad field."""
        obj = _object(obj, "")
        gpus = _items(obj, "gpus", "", MAX_GPUS, Gpu.from_wire)
        indices: Dict[int, int] = {}
        for position, gpu in enumerate(gpus):
            if gpu.index in indices:
                raise InventoryError("gpus[%d].index" % position, "GPU %d is listed twice" % gpu.index)
            indices[gpu.index] = position
        return cls(
            hostname=_opt_text(obj, "hostname", ""),
            agent=_opt_text(obj, "agent", ""),
            simulated=_bool(obj.get("simulated", False), "simulated"),
            driver=_opt_text(obj, "driver", ""),
            cuda=_opt_text(obj, "cuda", ""),
            gpus=gpus,
            gpu_reason=_opt_text(obj, "gpu_reason", "", MAX_REASON),
            topology=Topology.from_wire(obj["topology"], "topology", indices) if "topology" in obj else Topology(),
            nics=_items(obj, "nics", "", MAX_NICS, Nic.from_wire),
            cpu=Cpu.from_wire(obj["cpu"], "cpu") if "cpu" in obj else Cpu(),
            ram_total_bytes=_opt_int(obj, "ram_total_bytes", "", 0, MAX_BYTES),
            python=_opt_text(obj, "python", ""),
        )

    def to_wire(self) -> Dict[str, Any]:
        return {
            "hostname": self.hostname,
            "agent": self.agent,
            "simulated": self.simulated,
            "driver": self.driver,
            "cuda": self.cuda,
            "gpus": [gpu.to_wire() for gpu in self.gpus],
            "gpu_reason": self.gpu_reason,
            "topology": self.topology.to_wire(),
            "nics": [nic.to_wire() for nic in self.nics],
            "cpu": self.cpu.to_wire(),
            "ram_total_bytes": self.ram_total_bytes,
            "python": self.python,
        }


__all__ = [
    "MAX_GPUS",
    "MAX_NICS",
    "Cpu",
    "Gpu",
    "Inventory",
    "InventoryError",
    "Nic",
    "NumaNode",
    "NvLink",
    "Topology",
]
