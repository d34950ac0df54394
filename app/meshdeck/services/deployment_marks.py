"""When deployments started and ended on a host, from the deployment records: the markers of the history charts.

The store keeps every launch (this console's, the CLI's, an earlier session's) with its start, its end once it
finished, the state it ended in and the hosts its parts ran on; a chart of one host over a range marks the
starts and ends that fall inside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshdeck.store.database import Database
from meshdeck.store.deployments import list_deployments

RECORDS_READ = 1000  # the newest deployments looked at: a range further back than these shows no markers


@dataclass(frozen=True)
class DeploymentMark:
    """One event of a deployment: `event` is "started" or "ended"; `state` what it ended as (or its state now)."""

    ts: float
    name: str
    event: str
    state: str


def deployment_marks(db: Database, host: str, since: float, until: float) -> list[DeploymentMark]:
    """The starts and ends in [since, until] of the deployments that ran a part on `host`, oldest first."""
    marks = []
    for record in list_deployments(db, limit=RECORDS_READ):
        if host not in {node.host for node in record.nodes}:
            continue
        if since <= record.started_at <= until:
            marks.append(DeploymentMark(record.started_at, record.name, "started", record.state))
        if record.finished_at is not None and since <= record.finished_at <= until:
            marks.append(DeploymentMark(record.finished_at, record.name, "ended", record.state))
    return sorted(marks, key=lambda mark: mark.ts)
