"""Asking an agent for its inventory from a use-case (a launch, a pre-flight): the answer is decoded into
the typed record at once, and a malformed one is an InputError naming the host and the field, so the
launch stops with one line instead of failing somewhere downstream."""

from __future__ import annotations

from typing import Any, Protocol

from meshdeck_agent.wire_inventory import Gpu, Inventory, InventoryError, Nic, Topology

from meshdeck.core.errors import InputError

# The records are re-exported for the ui, which reads inventories but imports nothing from the agent package.
__all__ = [
    "INVENTORY_TIMEOUT_S",
    "AgentCaller",
    "Gpu",
    "Inventory",
    "Nic",
    "Topology",
    "describe_gpus",
    "fetch_inventory",
]

INVENTORY_TIMEOUT_S = 60.0


class AgentCaller(Protocol):
    def call(
        self, host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None
    ) -> Any: ...


def fetch_inventory(caller: AgentCaller, host: str, timeout: float = INVENTORY_TIMEOUT_S) -> Inventory:
    """`host`'s inventory through `caller` (the fleet); RemoteErrors of the call pass through unchanged."""
    answer = caller.call(host, "inventory", {}, timeout=timeout)
    try:
        return Inventory.from_wire(answer)
    except InventoryError as exc:
        raise InputError(f"host {host}: {exc.path}", exc.problem) from None


def describe_gpus(inventory: Inventory) -> str:
    """ "8× NVIDIA H200 140 GiB" (the largest GPU's memory), or "no GPUs": a host in one phrase."""
    if not inventory.gpus:
        return "no GPUs"
    memory = inventory.largest_gpu_memory_bytes
    return f"{len(inventory.gpus)}× {', '.join(inventory.gpu_names) or 'GPU'} {memory / 2**30:.0f} GiB"
