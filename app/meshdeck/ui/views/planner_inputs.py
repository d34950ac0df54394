"""The planner's cluster from what the connected hosts reported (no Qt here; tested on its own).

A detected node beats typed-in numbers: the GPU model is matched against the catalog
(`services.catalog.detected_gpu`, as the CLI and the launch's prediction do: HBM and NVLink
bandwidths are the datasheet's, not guesses), the GPU × GPU link matrix is the node's own,
and the inter-node bandwidth is the RDMA ports' summed rate. Hosts that disagree (different GPU
count or model) cannot share one uniform layout: that is an error naming the hosts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from meshdeck.core.cluster import ClusterSpec, default_inter_node_bytes_per_s
from meshdeck.core.errors import InputError
from meshdeck.core.gpu_spec import GpuSpec
from meshdeck.core.inventory_facts import InventoryFacts, inventory_facts
from meshdeck.services.catalog import detected_gpu


@dataclass(frozen=True)
class DetectedCluster:
    cluster: ClusterSpec
    hosts: tuple[str, ...]
    facts: Mapping[str, InventoryFacts]
    notes: tuple[str, ...]

    @property
    def simulated(self) -> bool:
        return any(f.simulated for f in self.facts.values())


def detected_cluster(
    inventories: Mapping[str, Mapping[str, Any]], hosts: Sequence[str], catalog: Sequence[GpuSpec]
) -> DetectedCluster:
    """A ClusterSpec of `hosts` (in order: the first is the head) from their agents' inventories."""
    if not hosts:
        raise InputError("hosts", "choose at least one connected host")
    facts = {host: inventory_facts(inventories[host], source=f"{host} inventory") for host in hosts}
    counts = {host: f.gpu_count for host, f in facts.items()}
    if 0 in counts.values():
        empty = [h for h, c in counts.items() if c == 0]
        raise InputError("hosts", f"{', '.join(empty)} reported no GPUs; the planner needs GPU nodes")
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{h}: {c}" for h, c in counts.items())
        raise InputError("hosts", f"hosts have different GPU counts ({detail}); choose hosts of one kind")
    names = {f.gpu_name for f in facts.values()}
    if len(names) > 1:
        raise InputError("hosts", f"hosts have different GPU models ({', '.join(sorted(map(str, names)))})")
    first = facts[hosts[0]]
    memory = min((f.gpu_memory_bytes for f in facts.values() if f.gpu_memory_bytes), default=None)
    gpu = detected_gpu(first.gpu_name, memory, catalog, field="hosts")
    notes = [f"GPU: {first.gpu_name or 'unnamed'} → {gpu.name}" + (" (assumed bandwidths)" if gpu.assumed else "")]
    rdma = [f.rdma_bytes_per_s for f in facts.values()]
    if first.topology is not None:  # the matrix decides per pair; this flag only names the common case
        has_nvlink = any(len(island) > 1 for island in first.topology.nvlink_islands)
    else:
        has_nvlink = gpu.has_nvlink
    link = "nvlink" if has_nvlink else "pcie"
    if len(hosts) > 1 and all(rdma):
        inter, assumed = float(min(r for r in rdma if r)), False
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
