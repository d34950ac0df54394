"""What a host supervisor reports, as plain frozen values on one thread-safe queue.

The store's writer thread and the UI's Qt bridge both consume these; neither talks to a host
directly. Samples arrive in `seq` order per host, backfill included, never duplicated, already
checked and flattened (a SampleBatch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from meshdeck_agent.wire_inventory import Inventory

from meshdeck.core.samples import SampleBatch

HOST_STATES = ("disconnected", "connecting", "bootstrapping", "connected", "degraded", "failed")


@dataclass(frozen=True)
class HostStateChanged:
    host: str
    state: str  # one of HOST_STATES
    reason: str = ""  # why, for degraded / failed / disconnected
    ts: float = 0.0
    # The error behind a failed/disconnected state (a meshdeck.remote.errors.RemoteError), so a UI can
    # act on its type: e.g. show a HostKeyUnknown's fingerprint and offer to accept it.
    error: Exception | None = field(default=None, compare=False)
    # When the supervisor tries again (time.time()), for a host that waits between attempts: the reason then
    # ends in retry_note(); a view counts down from `retry_at` instead of showing a delay that never moves.
    retry_at: float | None = None

    @property
    def cause(self) -> str:
        """The reason without its "(retrying in N s)" note."""
        note = self.reason.rfind(RETRY_NOTE)
        return self.reason[:note] if self.retry_at is not None and note >= 0 else self.reason


RETRY_NOTE = " (retrying in "


def retry_note(seconds: float) -> str:
    """What a waiting host's reason ends with: ' (retrying in 29.3 s)'."""
    return f"{RETRY_NOTE}{seconds:.1f} s)"


@dataclass(frozen=True)
class SamplesReceived:
    host: str
    batch: SampleBatch  # the samples, checked and flattened once (core.samples), seq ascending
    dropped: int = 0  # samples the agent's ring lost before we could read them
    backfill: bool = False  # True when these came from samples.read after a reconnect
    epoch: str | None = None  # the agent's sequence epoch these seqs belong to (None: an agent without epochs)
    refused: int = 0  # samples refused at the boundary since the last delivery (malformed or out of range)
    skipped_before: int = 0  # samples a slow consumer shed right before these (the console's live view)


@dataclass(frozen=True)
class SequenceReset:
    """The agent's sample sequence started again (new state dir: a wiped cache, a reinstalled server, a
    fresh demo), so the seq the supervisor held means nothing there: it now reads that agent's ring from
    the start. Not a loss: nothing is counted as dropped for it."""

    host: str
    epoch: str | None  # the agent's new epoch (None: an agent without epochs, detected by its seqs)
    previous_epoch: str | None
    previous_seq: int  # the last seq delivered from the old sequence
    reason: str
    ts: float = 0.0


@dataclass(frozen=True)
class AgentEvent:
    """A `worker`, `log` or `alert` notification from the agent, passed through unchanged."""

    host: str
    event: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class InventoryReceived:
    host: str
    inventory: Inventory  # decoded and checked where it arrived (remote.inventory.decode_inventory)


FleetEvent = HostStateChanged | SamplesReceived | AgentEvent | InventoryReceived | SequenceReset
