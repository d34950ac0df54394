"""What the planner takes from an agent's `inventory` result (see meshdeck_agent/inventory.py).

A detected node beats typed-in flags: exact GPU memory, the GPU × GPU link matrix and the RDMA
NICs' speed. Only the facts the planner uses are read; anything missing is reported as None so the
caller can fall back to flags. The mapping is untrusted input: every field is checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from meshdeck.core.cluster import NodeTopology, topology_from_codes
from meshdeck.core.errors import InputError
from meshdeck.core.units import GBIT


@dataclass(frozen=True)
class InventoryFacts:
    gpu_count: int
    gpu_name: str | None
    gpu_arch: str | None
    gpu_memory_bytes: int | None  # smallest GPU of the node (what a uniform layout must fit in)
    topology: NodeTopology | None
    rdma_bytes_per_s: float | None  # InfiniBand/RoCE ports, one direction, summed over the node
    simulated: bool


def inventory_facts(inventory: Mapping[str, Any], source: str = "inventory") -> InventoryFacts:
    if not isinstance(inventory, Mapping):
        raise InputError(source, "an inventory must be a JSON object")
    gpus = inventory.get("gpus") or []
    if not isinstance(gpus, list):
        raise InputError(f"{source}: gpus", "must be a list")
    memories = []
    names = set()
    arch = None
    for i, gpu in enumerate(gpus):
        if not isinstance(gpu, Mapping):
            raise InputError(f"{source}: gpus[{i}]", "must be an object")
        memory = gpu.get("memory_total_bytes")
        if memory is not None:
            if isinstance(memory, bool) or not isinstance(memory, int) or memory <= 0:
                raise InputError(
                    f"{source}: gpus[{i}].memory_total_bytes", f"must be a positive integer, got {memory!r}"
                )
            memories.append(memory)
        if isinstance(gpu.get("name"), str):
            names.add(gpu["name"])
        if isinstance(gpu.get("arch"), str):
            arch = gpu["arch"]
    topology = None
    topo = inventory.get("topology")
    matrix = topo.get("matrix") if isinstance(topo, Mapping) else None
    if matrix:
        if not isinstance(matrix, list) or not all(isinstance(row, list) for row in matrix):
            raise InputError(f"{source}: topology.matrix", "must be a list of rows")
        topology = topology_from_codes(matrix, f"{source}: topology.matrix")
    rdma = 0.0
    for nic in inventory.get("nics") or []:
        if (
            isinstance(nic, Mapping)
            and nic.get("kind") in ("infiniband", "roce")
            and nic.get("state") in (None, "ACTIVE")
        ):
            rate = nic.get("rate_gbps")
            if isinstance(rate, int | float) and not isinstance(rate, bool) and rate > 0:
                rdma += rate * GBIT
    return InventoryFacts(
        gpu_count=len(gpus),
        gpu_name=sorted(names)[0] if len(names) == 1 else None,
        gpu_arch=arch,
        gpu_memory_bytes=min(memories) if memories else None,
        topology=topology,
        rdma_bytes_per_s=rdma or None,
        simulated=bool(inventory.get("simulated", False)),
    )
