"""What the fleet tells its subscribers, named for the console: the ui imports these from services, never
from meshdeck.remote (the layer rule: ui -> services -> remote). Defined in meshdeck.remote.events,
where the host supervisors make them."""

from __future__ import annotations

from meshdeck.remote.events import HOST_STATES as HOST_STATES
from meshdeck.remote.events import AgentEvent as AgentEvent
from meshdeck.remote.events import FleetEvent as FleetEvent
from meshdeck.remote.events import HostStateChanged as HostStateChanged
from meshdeck.remote.events import InventoryReceived as InventoryReceived
from meshdeck.remote.events import SamplesReceived as SamplesReceived
from meshdeck.remote.events import SequenceReset as SequenceReset
