"""The Slurm jobs meshdeck submitted: one row per deployment, so `deployments list|stop|logs` find a job after
the app that submitted it is gone, and its state after the job left squeue is the last one seen.

`states_seen` keeps Slurm's states in the order they were observed (each once per change), with the reason
Slurm gave while it was pending; a row is closed (`ended_at`) at the first final state. Values come from
meshdeck's own parsers (core/slurm_state.py) and its submit path, and are validated again here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Row, insert, select, update

from meshdeck.core.errors import InputError
from meshdeck.core.slurm_state import FINAL_STATES, JOB_STATES
from meshdeck.store import schema
from meshdeck.store.database import Database

MAX_STATES_SEEN = 64


@dataclass(frozen=True)
class SlurmJobRecord:
    """A submitted job: `deployment` is meshdeck's id (its worker ids and samples carry it), `cluster` the login
    host's name, `output` the job's output file on the cluster (absolute, from scontrol), `options` the
    partition/account/qos/time it asked for."""

    deployment: str
    cluster: str
    job_id: int
    profile: str
    engine: str
    nodes: int
    state: str = "PENDING"
    reason: str | None = None
    submitted_at: float = field(default_factory=time.time)
    options: Mapping[str, str] = field(default_factory=dict)
    output: str | None = None
    serving_port: int | None = None
    states_seen: tuple[str, ...] = ()
    node_names: tuple[str, ...] = ()
    updated_at: float = 0.0
    ended_at: float | None = None

    def __post_init__(self) -> None:
        if self.state not in JOB_STATES:
            raise InputError("slurm_job.state", f"{self.state!r} is not a Slurm job state")
        if not isinstance(self.job_id, int) or isinstance(self.job_id, bool) or self.job_id <= 0:
            raise InputError("slurm_job.job_id", f"{self.job_id!r} is not a Slurm job id")
        if not 1 <= self.nodes <= 4096:
            raise InputError("slurm_job.nodes", f"{self.nodes!r} must be 1-4096")

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


def add_slurm_job(db: Database, record: SlurmJobRecord) -> SlurmJobRecord:
    """Store a job just submitted (its first state is what squeue said, or PENDING)."""
    seen = record.states_seen or (record.state,)
    values = {
        "deployment": record.deployment,
        "cluster": record.cluster,
        "job_id": record.job_id,
        "profile": record.profile,
        "engine": record.engine,
        "submitted_at": float(record.submitted_at),
        "nodes": record.nodes,
        "options": json.dumps(dict(record.options), sort_keys=True),
        "output": record.output,
        "serving_port": record.serving_port,
        "state": record.state,
        "reason": record.reason,
        "states_seen": json.dumps(list(seen)),
        "node_names": json.dumps(list(record.node_names)),
        "updated_at": time.time(),
        "ended_at": time.time() if record.final else None,
    }
    with db.write() as connection:
        connection.execute(insert(schema.slurm_jobs).values(**values))
    return _read(db, record.deployment)


def note_state(
    db: Database,
    deployment: str,
    state: str,
    reason: str | None,
    *,
    node_names: Sequence[str] | None = None,
    output: str | None = None,
) -> tuple[SlurmJobRecord, bool]:
    """Record the state Slurm reports now; returns the record and whether the state (or the pending reason)
    changed. A closed row is not reopened: a final state is the job's last word."""
    if state not in JOB_STATES:
        raise InputError("slurm_job.state", f"{state!r} is not a Slurm job state")
    with db.write() as connection:
        row = connection.execute(select(schema.slurm_jobs).where(schema.slurm_jobs.c.deployment == deployment)).first()
        if row is None:
            raise InputError("deployment", f"no Slurm job is recorded for {deployment!r}")
        current = _row_to_record(row)
        if current.final:
            return current, False
        changed = state != current.state or reason != current.reason
        seen = list(current.states_seen)
        if not seen or seen[-1] != state:
            seen = [*seen, state][-MAX_STATES_SEEN:]
        values: dict[str, Any] = {"state": state, "reason": reason, "states_seen": json.dumps(seen)}
        values["updated_at"] = time.time()
        if state in FINAL_STATES:
            values["ended_at"] = time.time()
        if node_names:
            values["node_names"] = json.dumps(list(node_names))
        if output:
            values["output"] = output
        connection.execute(
            update(schema.slurm_jobs).where(schema.slurm_jobs.c.deployment == deployment).values(**values)
        )
    return _read(db, deployment), changed


def find_slurm_job(db: Database, deployment: str) -> SlurmJobRecord | None:
    with db.read() as connection:
        row = connection.execute(select(schema.slurm_jobs).where(schema.slurm_jobs.c.deployment == deployment)).first()
    return None if row is None else _row_to_record(row)


def list_slurm_jobs(db: Database, *, open_only: bool = False, limit: int = 500) -> list[SlurmJobRecord]:
    """Jobs newest first (at most `limit`); `open_only`: those not seen in a final state yet."""
    query = select(schema.slurm_jobs).order_by(schema.slurm_jobs.c.submitted_at.desc()).limit(limit)
    if open_only:
        query = query.where(schema.slurm_jobs.c.ended_at.is_(None))
    with db.read() as connection:
        return [_row_to_record(row) for row in connection.execute(query)]


def _read(db: Database, deployment: str) -> SlurmJobRecord:
    found = find_slurm_job(db, deployment)
    if found is None:
        raise InputError("deployment", f"no Slurm job is recorded for {deployment!r}")
    return found


def _row_to_record(row: Row[Any]) -> SlurmJobRecord:
    values = row._asdict()
    values["options"] = json.loads(values["options"] or "{}")
    values["states_seen"] = tuple(json.loads(values["states_seen"] or "[]"))
    values["node_names"] = tuple(json.loads(values["node_names"] or "[]"))
    return SlurmJobRecord(**values)
