"""Deployments as the agents run them — found, and stopped — for `meshdeck deployments` and the console alike.

    found = survey_deployments(fleet, ["gpu-a", "gpu-b"])         # every host's workers.list, asked at once
    found.deployments, found.unanswered                           # grouped; host -> why it could not be asked
    snapshots = find_deployments(fleet, ["gpu-a", "gpu-b"])       # just the deployments
    outcome = stop_found(fleet, snapshot, db=db, grace_s=10.0)    # parts in reverse start order, then its record

Every worker meshdeck starts is named after its deployment (`deploy_model.worker_name`), so the agents
alone say which deployments exist, whoever launched them: the CLI, the console, an earlier session.
Stopping one stops each part, the last stage first; a part that cannot be stopped (its host is
unreachable) is reported and the others are still stopped. When every part stopped, the deployment's
stored record (the CLI and the console record each launch) is closed as stopped by request, as
`DeployService.stop` does for the deployments it tracks; a record already closed keeps its outcome, and
one whose parts had all ended before the stop is closed with what they say (completed / failed).
Hosts are asked in parallel; one that cannot be asked (unreachable, no answer, a malformed answer) is
named in `unanswered` and never hides or delays the others beyond the call timeout.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from meshdeck_agent.protocol import ProtocolError, WorkerRecord, worker_records_from_wire

from meshdeck.core.errors import InputError
from meshdeck.core.text import printable
from meshdeck.services.deploy_model import DeploymentSnapshot, Fleet, WorkerSnapshot, discover, summarize
from meshdeck.store.database import Database
from meshdeck.store.deployments import get_deployment, record_deployment_event, record_deployment_finished

log = logging.getLogger(__name__)

LIST_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0
STOPPED_REASON = "stopped by request"


MAX_PARALLEL_HOSTS = 16


@dataclass(frozen=True)
class DeploymentSurvey:
    """What the hosts said: the deployments found, and each host that could not be asked, with why."""

    deployments: list[DeploymentSnapshot]
    unanswered: dict[str, str] = field(default_factory=dict)


def survey_deployments(fleet: Fleet, hosts: Iterable[str], timeout_s: float = LIST_TIMEOUT_S) -> DeploymentSurvey:
    """The deployments whose parts run (or ran) on `hosts`, oldest first, every host asked at once. A host
    that cannot be asked is named in `unanswered` (its parts are then missing from the snapshots)."""
    names = list(dict.fromkeys(hosts))
    if not names:
        return DeploymentSurvey([])
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_HOSTS, len(names)), thread_name_prefix="workers.list") as pool:
        answers = dict(zip(names, pool.map(lambda host: _listing(fleet, host, timeout_s), names), strict=True))
    listings = {host: records for host, records in answers.items() if not isinstance(records, str)}
    unanswered = {host: why for host, why in answers.items() if isinstance(why, str)}
    return DeploymentSurvey(discover(listings), unanswered)


def find_deployments(fleet: Fleet, hosts: Iterable[str], timeout_s: float = LIST_TIMEOUT_S) -> list[DeploymentSnapshot]:
    """`survey_deployments` without the hosts that could not be asked."""
    return survey_deployments(fleet, hosts, timeout_s).deployments


def _listing(fleet: Fleet, host: str, timeout_s: float) -> list[WorkerRecord] | str:
    """The host's worker records, or why they could not be read (one line, escaped)."""
    try:
        reply = fleet.call(host, "workers.list", timeout=timeout_s)
    except Exception as exc:
        log.info("%s: workers.list failed: %s", host, exc)
        return printable(str(exc) or type(exc).__name__)
    try:
        return worker_records_from_wire(reply)
    except ProtocolError as exc:
        log.warning("%s: malformed answer to workers.list: %s", host, printable(exc.message))
        return f"malformed answer to workers.list: {printable(exc.message)}"


@dataclass(frozen=True)
class PartStopped:
    worker: WorkerSnapshot
    state: str | None  # what its agent answered (stopped, or exited / failed if it had ended); None: not reached
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {**self.worker.as_dict(), "state": self.state or self.worker.state}


@dataclass(frozen=True)
class FoundStopped:
    deployment_id: str
    parts: tuple[PartStopped, ...]
    record_closed: bool  # its stored record was closed now (False: none stored, already closed, or a part failed)

    @property
    def failures(self) -> list[PartStopped]:
        return [part for part in self.parts if part.error]


def stop_found(
    fleet: Fleet,
    deployment: DeploymentSnapshot,
    *,
    db: Database | None = None,
    grace_s: float = STOP_GRACE_S,
    on_part: Callable[[PartStopped], None] | None = None,
) -> FoundStopped:
    """Stop every part of a deployment found on the agents, the last stage first; then close its record."""
    parts: list[PartStopped] = []
    for worker in sorted(deployment.workers, key=lambda w: (w.stage, w.command), reverse=True):
        params = {"id": worker.worker_id, "grace_s": grace_s}
        try:
            reply = fleet.call(worker.host, "workers.stop", params, timeout=STOP_TIMEOUT_S)
            part = PartStopped(worker, WorkerRecord.from_wire(reply, "workers.stop").state)
        except ProtocolError as exc:  # it may well be stopped, but its agent does not say so
            part = PartStopped(worker, None, f"malformed answer to workers.stop: {printable(exc.message)}")
        except Exception as exc:  # an unreachable node: say so, keep stopping the others
            log.warning("stopping %s on %s: %s", worker.worker_id, worker.host, exc)
            part = PartStopped(worker, None, printable(f"{type(exc).__name__}: {exc}"))
        parts.append(part)
        if on_part is not None:
            on_part(part)
    closed = False
    if db is not None and not any(part.error for part in parts):
        closed = close_record(db, deployment.id, parts)
    return FoundStopped(deployment.id, tuple(parts), closed)


def close_record(db: Database, deployment_id: str, parts: list[PartStopped]) -> bool:
    """Close the stored record of a deployment whose parts were just stopped; False when there is none
    open. "stopped" when a part was stopped now; else (all had ended) what the parts' states say."""
    try:
        record = get_deployment(db, deployment_id)
    except InputError:  # launched without a store (a benchmark run) or by another machine's meshdeck
        return False
    if record.finished_at is not None:
        return False
    if any(part.state == "stopped" for part in parts):
        state, reason = "stopped", STOPPED_REASON
    else:
        state = summarize(replace(part.worker, state=part.state or part.worker.state) for part in parts)
        reason = "every part had ended before the stop"
    record_deployment_event(db, deployment_id, state, reason, {"found_on_agents": True})
    record_deployment_finished(db, deployment_id, state=state, reason=reason, workers=[p.as_dict() for p in parts])
    return True
