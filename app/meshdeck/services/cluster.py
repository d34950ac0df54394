"""The one way from agents' inventories to the planner's cluster: the console's planner (view and form),
the launch's planned-vs-measured prediction and `meshdeck plan --topology INVENTORY.json` all call
`cluster_from_inventories`, so they plan on the same ClusterSpec.

A detected node beats typed-in numbers: the GPU model is matched against the catalog
(`catalog.detected_gpu`: HBM and NVLink bandwidths are the datasheet's, not guesses), the GPU × GPU link
matrix is the head's own, and the inter-node bandwidth is the RDMA ports' summed rate (the slowest
host's). Hosts that disagree (different GPU count or model) cannot share one uniform layout: that is an
InputError naming the hosts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from meshdeck_agent.wire_inventory import Inventory

from meshdeck.core.cluster import (
    ClusterSpec,
    default_inter_node_bytes_per_s,
    default_intra_node_link,
    topology_from_codes,
)
from meshdeck.core.errors import InputError
from meshdeck.core.gpu_spec import GpuSpec
from meshdeck.core.inventory_facts import InventoryFacts
from meshdeck.core.units import GBIT
from meshdeck.services.catalog import detected_gpu


def inventory_facts(inventory: Inventory, source: str = "inventory") -> InventoryFacts:
    """What the planner takes from one node's (already decoded) inventory."""
    matrix = inventory.topology.matrix
    rdma = sum((nic.rate_gbps or 0.0) * GBIT for nic in inventory.nics if nic.is_rdma and nic.state in (None, "ACTIVE"))
    names = inventory.gpu_names
    return InventoryFacts(
        gpu_count=len(inventory.gpus),
        gpu_name=names[0] if len(names) == 1 else None,
        gpu_arch=next((gpu.arch for gpu in reversed(inventory.gpus) if gpu.arch is not None), None),
        gpu_memory_bytes=inventory.smallest_gpu_memory_bytes,
        topology=topology_from_codes(matrix, f"{source}: topology.matrix") if matrix else None,
        rdma_bytes_per_s=rdma or None,
        simulated=inventory.simulated,
    )


@dataclass(frozen=True)
class DetectedCluster:
    cluster: ClusterSpec
    hosts: tuple[str, ...]
    facts: Mapping[str, InventoryFacts]
    notes: tuple[str, ...]

    @property
    def simulated(self) -> bool:
        return any(f.simulated for f in self.facts.values())

    @property
    def hosts_without_rdma(self) -> tuple[str, ...]:
        """Hosts whose agents reported no active InfiniBand/RoCE port (a KV transfer or DeepEP needs one)."""
        return tuple(host for host in self.hosts if not self.facts[host].rdma_bytes_per_s)


def cluster_from_inventories(
    inventories: Mapping[str, Inventory],
    hosts: Sequence[str],
    catalog: Sequence[GpuSpec] | None = None,
    *,
    gpu: GpuSpec | None = None,
    field: str = "hosts",
) -> DetectedCluster:
    """A ClusterSpec of `hosts` (in order: the first is the head; one node each) from their inventories.

    `gpu` replaces the detected GPU (the CLI's --gpu). Errors are InputErrors naming `field`.
    """
    if not hosts:
        raise InputError(field, "choose at least one connected host")
    facts = {host: inventory_facts(inventories[host], source=f"{host} inventory") for host in hosts}
    counts = {host: f.gpu_count for host, f in facts.items()}
    if 0 in counts.values():
        empty = [h for h, c in counts.items() if c == 0]
        raise InputError(field, f"{', '.join(empty)} reported no GPUs; the planner needs GPU nodes")
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{h}: {c}" for h, c in counts.items())
        raise InputError(field, f"hosts have different GPU counts ({detail}); choose hosts of one kind")
    names = {f.gpu_name for f in facts.values()}
    if len(names) > 1:
        raise InputError(field, f"hosts have different GPU models ({', '.join(sorted(map(str, names)))})")
    first = facts[hosts[0]]
    if gpu is None:
        memory = min((f.gpu_memory_bytes for f in facts.values() if f.gpu_memory_bytes), default=None)
        gpu = detected_gpu(first.gpu_name, memory, catalog, field=field)
        notes = [f"GPU: {first.gpu_name or 'unnamed'} → {gpu.name}" + (" (assumed bandwidths)" if gpu.assumed else "")]
    else:
        notes = [f"GPU: {gpu.name} (given)"]
    if first.topology is not None:  # the matrix decides per pair; this flag only names the common case
        link = "nvlink" if any(len(island) > 1 for island in first.topology.nvlink_islands) else "pcie"
    else:
        link = default_intra_node_link(gpu)
    rdma = [f.rdma_bytes_per_s for f in facts.values()]
    if all(rdma):
        inter, assumed = float(min(r for r in rdma if r)), False
        if len(hosts) > 1:
            notes.append(f"inter-node: {inter * 8 / 1e9:.0f} Gb/s of RDMA ports per node (slowest host)")
    else:
        inter, assumed = default_inter_node_bytes_per_s(first.gpu_count, link), True
        if len(hosts) > 1:
            notes.append("inter-node bandwidth assumed: some hosts reported no active RDMA port")
    cluster = ClusterSpec(
        nodes=len(hosts),
        gpus_per_node=first.gpu_count,
        gpu=gpu,
        intra_node_link=link,
        inter_node_bytes_per_s=inter,
        inter_node_assumed=assumed,
        topology=first.topology,
    )
    if first.topology is not None:
        notes.append(f"intra-node links: {hosts[0]}'s detected GPU × GPU matrix")
    return DetectedCluster(cluster, tuple(hosts), facts, tuple(notes))
