"""The cluster a plan is made for: nodes × GPUs, how GPUs inside a node talk, how nodes talk.

Intra-node links come either from a flag (`nvlink` for an HGX/NVSwitch board, `xgmi` for an AMD
Instinct board, `pcie` for cards in slots) or from a detected topology matrix (`nvidia-smi topo -m` text,
or an agent inventory), which can show partial NVLink (pairs, quads) that a single flag cannot. Every
pair of GPUs then has a link class — NVLink, Infinity Fabric, PCIe or network — which is what the traffic
model and the warnings use.

Infinity Fabric (xGMI) differs from NVSwitch NVLink: the 8 GPUs of an MI300X/MI325X/MI355X board are
fully connected by one direct link per pair (7 per GPU), so a collective over n GPUs of a node runs on
n − 1 links of one GPU, not on its whole bandwidth (resources/gpus-amd-SOURCES.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

from meshdeck.core.errors import InputError
from meshdeck.core.gpu_spec import GpuSpec
from meshdeck.core.units import GB, GBIT

# Per NVLink lane, one direction: NVLink 3/4 (A100, H100/H200) 25 GB/s; NVLink 5 (B200) 50 GB/s.
_NVLINK_LANE_BYTES_PER_S = {"blackwell": 50 * GB}
_NVLINK_LANE_DEFAULT = 25 * GB
_PCIE_CODES = ("PIX", "PXB", "PHB", "NODE", "SYS")
_NV_CODE = re.compile(r"^NV(\d+)$")


class LinkClass(StrEnum):
    """Where bytes between two ranks travel. Ordered from fastest to slowest."""

    LOCAL = "local"  # same GPU: no traffic
    NVLINK = "nvlink"
    INFINITY_FABRIC = "xgmi"  # AMD Instinct GPU-to-GPU links (a board has either this or NVLink)
    PCIE = "pcie"
    NETWORK = "network"


LINK_ORDER = {
    LinkClass.LOCAL: 0,
    LinkClass.NVLINK: 1,
    LinkClass.INFINITY_FABRIC: 1,
    LinkClass.PCIE: 2,
    LinkClass.NETWORK: 3,
}
# The links a node's GPUs share memory-speed traffic over (what "TP inside a node" relies on).
SCALE_UP_LINKS = frozenset({LinkClass.NVLINK, LinkClass.INFINITY_FABRIC})


def slowest(links: Sequence[LinkClass]) -> LinkClass:
    return max(links, key=LINK_ORDER.__getitem__, default=LinkClass.LOCAL)


@dataclass(frozen=True)
class NodeTopology:
    """GPU-to-GPU link codes of one node, as `nvidia-smi topo -m` prints them (X, NV18, PIX, SYS, ...)."""

    codes: tuple[tuple[str, ...], ...]

    @property
    def gpu_count(self) -> int:
        return len(self.codes)

    def nvlink_lanes(self, a: int, b: int) -> int:
        match = _NV_CODE.match(self.codes[a][b])
        return int(match.group(1)) if match else 0

    def link_class(self, a: int, b: int) -> LinkClass:
        if a == b:
            return LinkClass.LOCAL
        return LinkClass.NVLINK if self.nvlink_lanes(a, b) else LinkClass.PCIE

    def crosses_cpu_socket(self, a: int, b: int) -> bool:
        return self.codes[a][b] == "SYS"

    @cached_property
    def nvlink_islands(self) -> tuple[frozenset[int], ...]:
        """Groups of GPUs joined by NVLink (directly or through other GPUs of the group)."""
        seen: set[int] = set()
        islands: list[frozenset[int]] = []
        for start in range(self.gpu_count):
            if start in seen:
                continue
            stack, island = [start], {start}
            while stack:
                here = stack.pop()
                for other in range(self.gpu_count):
                    if other not in island and self.nvlink_lanes(here, other):
                        island.add(other)
                        stack.append(other)
            seen |= island
            islands.append(frozenset(island))
        return tuple(islands)

    @cached_property
    def fully_nvlinked(self) -> bool:
        n = self.gpu_count
        return all(self.nvlink_lanes(a, b) for a in range(n) for b in range(n) if a != b)


def topology_from_codes(rows: Sequence[Sequence[str]], source: str = "topology") -> NodeTopology:
    """Validate a square matrix of link codes."""
    n = len(rows)
    if n == 0:
        raise InputError(source, "the topology matrix has no GPU rows")
    codes: list[tuple[str, ...]] = []
    for i, row in enumerate(rows):
        if len(row) != n:
            raise InputError(source, f"row GPU{i} has {len(row)} GPU columns, expected {n}")
        clean = tuple(str(c).strip().upper() for c in row)
        for j, code in enumerate(clean):
            if i == j:
                if code != "X":
                    raise InputError(source, f"GPU{i} to itself must be X, got {code!r}")
            elif not (_NV_CODE.match(code) or code in _PCIE_CODES):
                raise InputError(source, f"GPU{i}-GPU{j} link {code!r} is not one of NV<n>, {', '.join(_PCIE_CODES)}")
        codes.append(clean)
    return NodeTopology(tuple(codes))


_GPU_TOKEN = re.compile(r"^GPU(\d+)$")


def parse_nvidia_smi_topology(text: str, source: str = "topology") -> NodeTopology:
    """Parse the GPU block of `nvidia-smi topo -m` (tabs or pasted spaces; NIC columns ignored)."""
    header: list[str] | None = None
    rows: dict[int, list[str]] = {}
    for line in text.splitlines():
        tokens = line.split()
        if not tokens:
            continue
        if header is None and tokens[0] == "GPU0" and len(tokens) > 1 and not _is_code(tokens[1]):
            header = tokens
            continue
        match = _GPU_TOKEN.match(tokens[0])
        if header is not None and match and len(tokens) > 1 and _is_code(tokens[1]):
            gpu_columns = sum(1 for t in header if _GPU_TOKEN.match(t))
            rows[int(match.group(1))] = tokens[1 : 1 + gpu_columns]
    if header is None or not rows:
        raise InputError(source, "no `nvidia-smi topo -m` GPU matrix found (expected a GPU0 GPU1 ... header)")
    ordered = [rows.get(i) for i in range(len(rows))]
    if any(row is None for row in ordered):
        raise InputError(source, f"GPU rows are not numbered 0..{len(rows) - 1}")
    return topology_from_codes([row for row in ordered if row is not None], source)


def _is_code(token: str) -> bool:
    return token == "X" or token in _PCIE_CODES or bool(_NV_CODE.match(token))


INTRA_NODE_LINKS = ("nvlink", "xgmi", "pcie")
_INTRA_NODE_LINK_CLASS = {"nvlink": LinkClass.NVLINK, "xgmi": LinkClass.INFINITY_FABRIC, "pcie": LinkClass.PCIE}


def default_intra_node_link(gpu: GpuSpec) -> str:
    """The --intra-node-link a board of this GPU has when nothing else says: nvlink, xgmi or pcie."""
    if gpu.has_nvlink:
        return "nvlink"
    return "xgmi" if gpu.has_infinity_fabric else "pcie"


@dataclass(frozen=True)
class ClusterSpec:
    """nodes × gpus_per_node GPUs of one type. inter_node_bytes_per_s is per node, one direction."""

    nodes: int
    gpus_per_node: int
    gpu: GpuSpec
    intra_node_link: str = "nvlink"
    inter_node_bytes_per_s: float = 0.0
    inter_node_assumed: bool = True
    topology: NodeTopology | None = None

    def __post_init__(self) -> None:
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or not 1 <= self.nodes <= 4096:
            raise InputError("--nodes", f"must be an integer from 1 to 4096, got {self.nodes!r}")
        if (
            isinstance(self.gpus_per_node, bool)
            or not isinstance(self.gpus_per_node, int)
            or not 1 <= self.gpus_per_node <= 64
        ):
            raise InputError("--gpus-per-node", f"must be an integer from 1 to 64, got {self.gpus_per_node!r}")
        if self.intra_node_link not in INTRA_NODE_LINKS:
            raise InputError("--intra-node-link", f"{self.intra_node_link!r}; allowed: {', '.join(INTRA_NODE_LINKS)}")
        if self.intra_node_link == "xgmi" and not self.gpu.has_infinity_fabric:
            raise InputError(
                "--intra-node-link",
                f"xgmi (AMD Infinity Fabric) needs an AMD Instinct GPU with known links (MI300X, MI325X, MI355X), "
                f"not {self.gpu.name}; allowed for it: nvlink, pcie",
            )
        if self.intra_node_link == "nvlink" and self.gpu.vendor == "amd":
            raise InputError("--intra-node-link", f"{self.gpu.name} has no NVLink; allowed for it: xgmi, pcie")
        if not self.inter_node_bytes_per_s > 0:
            raise InputError("--inter-node-gbps", "must be positive")
        if self.topology is not None and self.topology.gpu_count != self.gpus_per_node:
            raise InputError(
                "--topology",
                f"describes {self.topology.gpu_count} GPUs per node but --gpus-per-node is {self.gpus_per_node}",
            )

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def intra_link(self, a: int, b: int) -> LinkClass:
        """Link class between two GPUs of the same node."""
        if a == b:
            return LinkClass.LOCAL
        if self.topology is not None:
            return self.topology.link_class(a, b)
        return self.intra_node_link_class

    @property
    def intra_node_link_class(self) -> LinkClass:
        """The link class the --intra-node-link flag names (a topology matrix can refine it per pair)."""
        return _INTRA_NODE_LINK_CLASS[self.intra_node_link]

    @cached_property
    def nvlink_per_direction_bytes_per_s(self) -> float:
        """NVLink bandwidth one GPU can send, one direction (half of NVIDIA's bidirectional figure)."""
        if self.topology is not None:
            lane = _NVLINK_LANE_BYTES_PER_S.get(self.gpu.arch, _NVLINK_LANE_DEFAULT)
            lanes = max(
                (
                    sum(self.topology.nvlink_lanes(a, b) for b in range(self.gpus_per_node))
                    for a in range(self.gpus_per_node)
                ),
                default=0,
            )
            if lanes:
                per_gpu: float = lanes * lane
                # NVSwitch boards list NV18 to every peer but the GPU has 18 lanes in total.
                if self.topology.fully_nvlinked and self.gpu.nvlink_bytes_per_s:
                    per_gpu = min(per_gpu, self.gpu.nvlink_bytes_per_s / 2)
                return per_gpu
        if self.gpu.nvlink_bytes_per_s:
            return self.gpu.nvlink_bytes_per_s / 2
        # --intra-node-link nvlink on a GPU the catalog lists without NVLink (or unknown): assume NVLink 3.
        return 12 * _NVLINK_LANE_DEFAULT

    def link_bytes_per_s(self, link: LinkClass, group_size: int = 0) -> float:
        """Bandwidth one GPU gets on a link class, one direction, in a collective over `group_size` GPUs.

        Only Infinity Fabric depends on the group: one direct link per peer, so n GPUs of a node use n − 1
        links of each (0: every link of the GPU).
        """
        if link is LinkClass.NVLINK:
            return self.nvlink_per_direction_bytes_per_s
        if link is LinkClass.INFINITY_FABRIC:
            links = self.gpu.infinity_fabric_links
            peers = min(group_size - 1, links, self.gpus_per_node - 1) if group_size > 1 else links
            return max(peers, 1) * self.gpu.infinity_fabric_link_bytes_per_s
        if link is LinkClass.PCIE:
            return self.gpu.pcie_bytes_per_s
        if link is LinkClass.NETWORK:
            return self.inter_node_bytes_per_s / self.gpus_per_node
        return float("inf")


def default_inter_node_bytes_per_s(gpus_per_node: int, intra_node_link: str) -> float:
    """Typical fabric when the user gives none: one 400 Gb/s NIC per GPU on NVLink (HGX) and Infinity Fabric
    (AMD Instinct UBB) boards, else 2×100 Gb/s."""
    if intra_node_link in ("nvlink", "xgmi"):
        return 400 * GBIT * gpus_per_node
    return 200 * GBIT
