"""What `meshdeck hosts list` says of each stored host's state: from the store without connecting, or asked now.

    recorded = recorded_states(db, ["gpu-a", "gpu-b"])          # no connection: what was recorded, and when
    asked = asked_states(fleet, ["gpu-a", "gpu-b"], db)        # every host at once, bounded

Recorded: the console and `meshdeck record` store every host's state changes (`host_state` events) and its
samples (the newest sample's time per host, `ingest_state`). A host whose newest record (sample or state) is
at most FRESH_S old says what it was then — "connected" while its samples arrive — and anything older is
"unknown" with when it was last seen: nobody is recording it now, and the store cannot say more.

Asked: every host added to the fleet at once and given `timeout_s` to connect, with the short SSH connect
timeout of the `deployments` commands (`deployments.hosts.reach`, `query_settings`): a host that answered
is "connected", one whose try failed is "unreachable" (why: refused, timed out, host key, login, …), and
one still on its way when the time is up is "unknown" — never waited for longer. Connecting may start the
agent on the server, as `deployments list` does.

States: connected, degraded (connected, samples stalled), connecting, unreachable, unknown.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from meshdeck.core.text import printable
from meshdeck.services.deployments import hosts as deploy_hosts
from meshdeck.services.fleet import FleetService
from meshdeck.store.database import Database
from meshdeck.store.events import list_events
from meshdeck.store.ingest import ingest_positions

FRESH_S = 60.0  # a record at most this old says what the host is now
ASK_TIMEOUT_S = 15.0  # `hosts list --connect`: each host's time to connect, all at once
_WORDS = {
    "connected": "connected",
    "degraded": "degraded",
    "connecting": "connecting",
    "bootstrapping": "connecting",
    "failed": "unreachable",
    "disconnected": "unreachable",
}


@dataclass(frozen=True)
class HostState:
    state: str  # connected | degraded | connecting | unreachable | unknown
    reason: str = ""  # one line, escaped
    seen_at: float | None = None  # recorded: the newest sample or state change; None: asked now, or never seen


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} days"


def recorded_states(db: Database, names: Iterable[str], *, now: float | None = None) -> dict[str, HostState]:
    """Each host's state as the store recorded it (one read of the ingest positions, one indexed read of
    the newest `host_state` event per host)."""
    now = time.time() if now is None else now
    positions = ingest_positions(db)
    states: dict[str, HostState] = {}
    for name in names:
        position = positions.get(name)
        sample_at = position.last_ts_ms / 1000 if position is not None and position.last_ts_ms >= 0 else None
        events = list_events(db, host=name, kinds=["host_state"], limit=1)
        event = events[-1] if events else None
        event_at = event.ts if event is not None else None
        seen = max((t for t in (sample_at, event_at) if t is not None), default=None)
        if seen is None:
            states[name] = HostState("unknown", "nothing recorded: the console or `meshdeck record` records it")
            continue
        if event is not None and event_at is not None and (sample_at is None or event_at >= sample_at):
            word = _WORDS.get(str(event.data.get("state")), "unknown")
            why = printable(str(event.data.get("reason") or ""), 200)
        else:
            word, why = "connected", "samples arriving"
        if now - seen > FRESH_S:
            was = f"{word}: {why}" if why and word != "connected" else word
            states[name] = HostState("unknown", f"last recorded {_age(now - seen)} ago ({was})", seen)
        else:
            states[name] = HostState(word, why, seen)
    return states


def asked_states(
    fleet: FleetService, names: Iterable[str], db: Database, *, timeout_s: float = ASK_TIMEOUT_S
) -> dict[str, HostState]:
    """Each host asked now, all at once, for at most `timeout_s` (see the module doc)."""
    names = list(dict.fromkeys(names))
    unreached = deploy_hosts.reach(fleet, names, db, timeout_s)
    states: dict[str, HostState] = {}
    for name in names:
        status = fleet.status(name)
        if name not in unreached:
            states[name] = HostState(_WORDS.get(status.state, "connected"), "")
        elif status.state == "failed" or (status.state == "disconnected" and status.reason):  # its try failed
            states[name] = HostState("unreachable", unreached[name])
        else:
            states[name] = HostState("unknown", f"no answer within {timeout_s:g} s ({printable(status.state)})")
    return states
