"""What happened, in order: host state changes, worker states and exit codes, XIDs, NCCL transports,
pre-flight results, launches and stops, planned-vs-measured numbers, samples an agent lost, an agent
whose sample sequence started again.

An event is a kind, a time, optionally the host / subject (worker id, GPU, check name) / deployment it
belongs to, and a JSON object of details. The writer thread stores the fleet's events in the same
transaction as the samples around them; other callers use `record_event`.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Row, insert, select

from meshdeck.core.errors import InputError
from meshdeck.store import schema
from meshdeck.store.database import Database

EVENT_KINDS = (
    "host_state",  # data: {"state", "reason"}
    "worker_state",  # subject: worker id; data: {"state", "exit_code", "restarts", ...}
    "xid",  # subject: "gpu<i>"; data: {"xid", "message"}
    "nccl_transport",  # subject: worker id; data: the fields the agent parsed from an NCCL_DEBUG=INFO line
    "vllm_startup",  # subject: worker id; data: numbers vLLM logs at startup (weights_gib, kv_cache_tokens, ...)
    "preflight",  # subject: check name; data: {"ok", "detail"}
    "launch",  # deployment started
    "stop",  # deployment finished (stopped, failed, completed, cancelled)
    "deployment",  # subject: what happened to a deployment ("running", "worker_failed", ...); data: {"message", ...}
    "planned_vs_measured",  # data: {"metric", "planned", "measured"}
    "samples_dropped",  # data: {"dropped"}: samples the agent's ring lost before meshdeck read them
    "seq_reset",  # data: {"epoch", "previous_epoch", "previous_seq", "reason"}: the agent's sequence restarted
    "alert",  # an agent alert, passed through
)


@dataclass(frozen=True)
class EventRecord:
    kind: str
    ts: float
    host: str | None = None
    subject: str | None = None
    deployment_id: int | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    id: int | None = None  # set on records read back from the database

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise InputError("event.kind", f"{self.kind!r} is not one of {', '.join(EVENT_KINDS)}")
        if isinstance(self.ts, bool) or not isinstance(self.ts, int | float) or not math.isfinite(self.ts):
            raise InputError("event.ts", f"{self.ts!r} must be a Unix time in seconds")
        if not isinstance(self.data, Mapping):
            raise InputError("event.data", f"must be a mapping, got {type(self.data).__name__}")


def _finite(value: Any) -> Any:
    """JSON has no NaN or Infinity: store them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def encode_data(data: Mapping[str, Any]) -> str:
    return json.dumps(_finite(data), sort_keys=True, separators=(",", ":"), allow_nan=False, default=str)


_INSERT = "INSERT INTO events (ts, kind, host, subject, deployment_id, data) VALUES (?, ?, ?, ?, ?, ?)"


def insert_events(connection: sqlite3.Connection, records: Iterable[EventRecord]) -> int:
    """Insert inside the caller's (raw sqlite3) transaction; returns how many."""
    rows = [(float(r.ts), r.kind, r.host, r.subject, r.deployment_id, encode_data(r.data)) for r in records]
    if rows:
        connection.executemany(_INSERT, rows)
    return len(rows)


def record_event(db: Database, record: EventRecord) -> int:
    """Store one event in its own transaction; returns its id."""
    with db.write() as connection:
        result = connection.execute(
            insert(schema.events).values(
                ts=float(record.ts),
                kind=record.kind,
                host=record.host,
                subject=record.subject,
                deployment_id=record.deployment_id,
                data=encode_data(record.data),
            )
        )
        return result.lastrowid  # the new row's INTEGER PRIMARY KEY (SQLite's rowid)


def _row_to_event(row: Row[Any]) -> EventRecord:
    return EventRecord(
        kind=row.kind,
        ts=row.ts,
        host=row.host,
        subject=row.subject,
        deployment_id=row.deployment_id,
        data=json.loads(row.data),
        id=row.id,
    )


def list_events(
    db: Database,
    *,
    host: str | None = None,
    kinds: Sequence[str] | None = None,
    deployment_id: int | None = None,
    since: float | None = None,
    until: float | None = None,
    limit: int = 10_000,
) -> list[EventRecord]:
    """Events matching every given filter, oldest first (the newest `limit` of them)."""
    table = schema.events
    query = select(table)
    if host is not None:
        query = query.where(table.c.host == host)
    if kinds is not None:
        query = query.where(table.c.kind.in_(list(kinds)))
    if deployment_id is not None:
        query = query.where(table.c.deployment_id == deployment_id)
    if since is not None:
        query = query.where(table.c.ts >= since)
    if until is not None:
        query = query.where(table.c.ts < until)
    query = query.order_by(table.c.ts.desc(), table.c.id.desc()).limit(limit)
    with db.read() as connection:
        rows = list(connection.execute(query))
    return [_row_to_event(row) for row in reversed(rows)]
