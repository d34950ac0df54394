"""What was launched, how it went, and what it measured: deployment records that can be compared.

A record holds the profile it came from (name, version and the YAML text as it was then), the launch
plan (per-node argv and env, ports, layout), the planner's prediction, start and stop times, the
outcome and the numbers vLLM reported at startup per worker. The deploy service calls the four
`record_*` functions as the deployment goes; `events` of the deployment land in the events table.
Secrets never go in the database: node env values whose keys look secret are masked here, whatever
the caller passed (the recorder masks the plan and the profile's text before).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from sqlalchemy import Connection, insert, select, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from meshdeck.core.errors import InputError
from meshdeck.core.secret_env import masked_env
from meshdeck.store import schema
from meshdeck.store.database import Database
from meshdeck.store.events import EventRecord, encode_data


@dataclass(frozen=True)
class DeploymentNode:
    host: str
    name: str
    role: str
    stage: int
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class DeploymentRecord:
    id: int
    key: str
    name: str
    engine: str
    model: str
    state: str
    reason: str
    started_at: float
    finished_at: float | None
    profile_name: str | None = None
    profile_version: int | None = None
    profile_yaml: str | None = None
    plan: Mapping[str, Any] = field(default_factory=dict)
    planned: Mapping[str, Any] | None = None
    workers: tuple[Mapping[str, Any], ...] = ()
    nodes: tuple[DeploymentNode, ...] = ()
    measured: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # worker -> numbers

    @property
    def duration_s(self) -> float | None:
        return None if self.finished_at is None else self.finished_at - self.started_at


def _json(value: Any) -> str:
    return encode_data(value) if isinstance(value, Mapping) else json.dumps(value, separators=(",", ":"), default=str)


def _deployment_id(connection: Connection, key: str) -> int:
    found = connection.execute(select(schema.deployments.c.id).where(schema.deployments.c.key == key)).scalar()
    if found is None:
        raise InputError("deployment", f"no deployment {key!r} recorded")
    return int(found)


def record_deployment_started(
    db: Database,
    *,
    key: str,
    name: str,
    engine: str,
    nodes: Sequence[DeploymentNode],
    model: str = "",
    plan: Mapping[str, Any] | None = None,
    planned: Mapping[str, Any] | None = None,
    profile_name: str | None = None,
    profile_version: int | None = None,
    profile_yaml: str | None = None,
    started_at: float | None = None,
    state: str = "starting",
) -> int:
    """Record a launch (and a `launch` event); returns the record's id. A key already recorded is refused."""
    started = time.time() if started_at is None else started_at
    with db.write() as connection:
        if connection.execute(select(schema.deployments.c.id).where(schema.deployments.c.key == key)).first():
            raise InputError("deployment", f"deployment {key!r} is already recorded")
        result = connection.execute(
            insert(schema.deployments).values(
                key=key,
                name=name,
                engine=engine,
                model=model,
                profile_name=profile_name,
                profile_version=profile_version,
                profile_yaml=profile_yaml,
                plan=_json(dict(plan or {})),
                planned=None if planned is None else _json(dict(planned)),
                state=state,
                reason="",
                started_at=started,
                workers="[]",
            )
        )
        deployment_id = result.lastrowid  # the new row's INTEGER PRIMARY KEY (SQLite's rowid)
        if nodes:
            connection.execute(
                insert(schema.deployment_nodes),
                [
                    {
                        "deployment_id": deployment_id,
                        "position": position,
                        "host": node.host,
                        "name": node.name,
                        "role": node.role,
                        "stage": node.stage,
                        "argv": json.dumps(list(node.argv)),
                        "env": json.dumps(dict(masked_env(node.env)), sort_keys=True),
                    }
                    for position, node in enumerate(nodes)
                ],
            )
        _insert_event(connection, deployment_id, EventRecord("launch", started, subject=key, data={"name": name}))
    return deployment_id


def _insert_event(connection: Connection, deployment_id: int, record: EventRecord) -> None:
    connection.execute(
        insert(schema.events).values(
            ts=float(record.ts),
            kind=record.kind,
            host=record.host,
            subject=record.subject,
            deployment_id=deployment_id,
            data=encode_data(record.data),
        )
    )


def record_deployment_event(
    db: Database,
    key: str,
    what: str,
    message: str = "",
    data: Mapping[str, Any] | None = None,
    *,
    host: str | None = None,
    ts: float | None = None,
) -> None:
    """Something that happened to a deployment ("running", "worker_failed", "restarting", ...)."""
    record = EventRecord(
        "deployment",
        time.time() if ts is None else ts,
        host=host,
        subject=what,
        data={"message": message, **dict(data or {})},
    )
    with db.write() as connection:
        _insert_event(connection, _deployment_id(connection, key), record)


def record_deployment_finished(
    db: Database,
    key: str,
    *,
    state: str,
    reason: str = "",
    workers: Sequence[Mapping[str, Any]] = (),
    finished_at: float | None = None,
) -> None:
    """The outcome (completed / failed / stopped / cancelled) and the workers' last states (a `stop` event)."""
    finished = time.time() if finished_at is None else finished_at
    with db.write() as connection:
        deployment_id = _deployment_id(connection, key)
        connection.execute(
            update(schema.deployments)
            .where(schema.deployments.c.id == deployment_id)
            .values(state=state, reason=reason, finished_at=finished, workers=_json([dict(w) for w in workers]))
        )
        _insert_event(
            connection,
            deployment_id,
            EventRecord("stop", finished, subject=key, data={"state": state, "reason": reason}),
        )


def record_deployment_state(db: Database, key: str, state: str, reason: str = "") -> None:
    """The current state while it runs (starting → running → degraded ...); no finish time."""
    with db.write() as connection:
        deployment_id = _deployment_id(connection, key)
        connection.execute(
            update(schema.deployments)
            .where(schema.deployments.c.id == deployment_id)
            .values(state=state, reason=reason)
        )


def record_measured(
    db: Database, key: str, worker: str, measured: Mapping[str, Any], *, measured_at: float | None = None
) -> None:
    """Numbers a worker reported (vLLM's KV cache tokens, weights GiB, ...); later reports of the same
    worker are merged over earlier ones."""
    now = time.time() if measured_at is None else measured_at
    with db.write() as connection:
        deployment_id = _deployment_id(connection, key)
        table = schema.deployment_measurements
        before = connection.execute(
            select(table.c.measured).where(table.c.deployment_id == deployment_id, table.c.worker == worker)
        ).scalar()
        merged = {**(json.loads(before) if before else {}), **dict(measured)}
        statement = sqlite_insert(table).values(
            deployment_id=deployment_id, worker=worker, measured=encode_data(merged), measured_at=now
        )
        connection.execute(
            statement.on_conflict_do_update(
                index_elements=["deployment_id", "worker"],
                set_={"measured": statement.excluded.measured, "measured_at": statement.excluded.measured_at},
            )
        )


def _load(connection: Connection, row: Any) -> DeploymentRecord:
    nodes = tuple(
        DeploymentNode(n.host, n.name, n.role, n.stage, tuple(json.loads(n.argv)), tuple(json.loads(n.env).items()))
        for n in connection.execute(
            select(schema.deployment_nodes)
            .where(schema.deployment_nodes.c.deployment_id == row.id)
            .order_by(schema.deployment_nodes.c.position)
        )
    )
    table = schema.deployment_measurements
    measured = {
        m.worker: json.loads(m.measured)
        for m in connection.execute(select(table).where(table.c.deployment_id == row.id).order_by(table.c.worker))
    }
    return DeploymentRecord(
        id=row.id,
        key=row.key,
        name=row.name,
        engine=row.engine,
        model=row.model,
        state=row.state,
        reason=row.reason,
        started_at=row.started_at,
        finished_at=row.finished_at,
        profile_name=row.profile_name,
        profile_version=row.profile_version,
        profile_yaml=row.profile_yaml,
        plan=json.loads(row.plan),
        planned=None if row.planned is None else json.loads(row.planned),
        workers=tuple(json.loads(row.workers)),
        nodes=nodes,
        measured=measured,
    )


def get_deployment(db: Database, key: str) -> DeploymentRecord:
    with db.read() as connection:
        row = connection.execute(select(schema.deployments).where(schema.deployments.c.key == key)).first()
        if row is None:
            raise InputError("deployment", f"no deployment {key!r} recorded")
        return _load(connection, row)


def list_deployments(
    db: Database, *, profile_name: str | None = None, name: str | None = None, limit: int = 100
) -> list[DeploymentRecord]:
    """The most recent deployments first."""
    table = schema.deployments
    query = select(table)
    if profile_name is not None:
        query = query.where(table.c.profile_name == profile_name)
    if name is not None:
        query = query.where(table.c.name == name)
    query = query.order_by(table.c.started_at.desc(), table.c.id.desc()).limit(limit)
    with db.read() as connection:
        return [_load(connection, row) for row in connection.execute(query).all()]


@dataclass(frozen=True)
class MetricComparison:
    """One number across deployments: what the plan predicted and what was measured, per deployment key."""

    metric: str
    planned: dict[str, float | None]
    measured: dict[str, float | None]


def compare_deployments(db: Database, keys: Sequence[str]) -> list[MetricComparison]:
    """Planned vs measured, side by side for several deployments: one row per number either side has
    (the recorder stores the prediction under the names vLLM's startup numbers use).

    For a number several workers report (one per DP engine or node) the smallest is shown: it is the
    one that limits the deployment (e.g. the KV cache tokens of the tightest engine).
    """
    if not keys:
        raise InputError("deployments", "name at least one deployment to compare")
    records = [get_deployment(db, key) for key in keys]
    metrics: dict[str, None] = {}
    for record in records:
        for numbers in (record.planned or {}, *record.measured.values()):
            for name, value in numbers.items():
                if _numeric(value):
                    metrics.setdefault(name, None)
    rows = []
    for metric in metrics:
        planned: dict[str, float | None] = {}
        measured: dict[str, float | None] = {}
        for record in records:
            value = (record.planned or {}).get(metric)
            planned[record.key] = float(value) if _numeric(value) else None
            values = [float(n[metric]) for n in record.measured.values() if _numeric(n.get(metric))]
            measured[record.key] = min(values) if values else None
        rows.append(MetricComparison(metric, planned, measured))
    return rows


def _numeric(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)
