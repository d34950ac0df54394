"""What the dashboard writes on its charts besides the data: deployments' starts and ends as markers (Grafana's
annotations), and why a chart is empty when the hosts shown report no device of its kind (a CPU host's agent
reports no GPU).

The deployment registry's snapshots say when a deployment started; when it ended is when the console saw it
become final (the registry's change reaches the console at once). History reads both from the records
(services/deployment_marks.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from meshdeck.core.text import printable
from meshdeck.services.deployment_marks import DeploymentMark
from meshdeck.services.deployments.model import DeploymentSnapshot
from meshdeck.ui.charts.markers import Marker, deployment_marker

KIND_NOUNS = {"gpu": "GPU", "worker": "vLLM engine", "nic": "network port"}  # what an empty chart lacks
HOSTS_NAMED = 5


class DeploymentTimeline:
    """Each deployment's start and end markers, with the hosts its parts ran on."""

    def __init__(self) -> None:
        self.snapshots: dict[str, DeploymentSnapshot] = {}
        self.ended_at: dict[str, float] = {}  # deployment id -> when the console saw it end
        self.markers: list[tuple[Marker, frozenset[str]]] = []

    def update(self, snapshots: Iterable[DeploymentSnapshot]) -> bool:
        """Take the deployments as they are now; True when a marker changed."""
        now = time.time()
        current = {snapshot.id: snapshot for snapshot in snapshots}
        for key, snapshot in current.items():
            known = self.snapshots.get(key)
            if snapshot.final and key not in self.ended_at and known is not None and not known.final:
                self.ended_at[key] = now
        self.snapshots = current
        markers = []
        for snapshot in current.values():
            hosts = frozenset(worker.host for worker in snapshot.workers)
            events = [DeploymentMark(snapshot.started_at, snapshot.name, "started", snapshot.state)]
            if snapshot.id in self.ended_at:
                events.append(DeploymentMark(self.ended_at[snapshot.id], snapshot.name, "ended", snapshot.state))
            markers += [(deployment_marker(event), hosts) for event in events]
        changed = markers != self.markers
        self.markers = markers
        return changed


def empty_chart_text(kind: str, hosts_without: list[str]) -> str:
    """Why a chart of devices of `kind` is empty: the hosts shown report samples, but none of that kind."""
    if not hosts_without:
        return ""
    noun = KIND_NOUNS.get(kind, kind)
    names = ", ".join(printable(host, 60) for host in hosts_without[:HOSTS_NAMED])
    more = " …" if len(hosts_without) > HOSTS_NAMED else ""
    whose = "its agent reports" if len(hosts_without) == 1 else "their agents report"
    return f"no {noun} on {names}{more}: {whose} none"
