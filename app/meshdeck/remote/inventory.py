"""The one door for an agent's `inventory` answer into the app: decoded into the typed record here, or
refused with the host and the field named. Everything past it reads `Inventory` attributes."""

from __future__ import annotations

from typing import Any

from meshdeck_agent.wire_inventory import Inventory, InventoryError

from meshdeck.remote.errors import InventoryInvalid


def decode_inventory(host: str, answer: Any) -> Inventory:
    """`answer` as an Inventory; raises InventoryInvalid (a permanent RemoteError) naming host and field."""
    try:
        return Inventory.from_wire(answer)
    except InventoryError as exc:
        raise InventoryInvalid(host, exc.field, exc.problem) from None
