"""What the planner takes from one node an agent described (meshdeck_agent.wire_inventory.Inventory).

A detected node beats typed-in flags: exact GPU memory, the GPU × GPU link matrix and the RDMA NICs'
speed. `services.cluster.inventory_facts` fills this from a decoded inventory (core may not import the
agent's records); anything the node did not report is None so the caller can fall back to flags.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshdeck.core.cluster import NodeTopology


@dataclass(frozen=True)
class InventoryFacts:
    gpu_count: int
    gpu_name: str | None
    gpu_arch: str | None
    gpu_memory_bytes: int | None  # smallest GPU of the node (what a uniform layout must fit in)
    topology: NodeTopology | None
    rdma_bytes_per_s: float | None  # InfiniBand/RoCE ports, one direction, summed over the node
    simulated: bool
