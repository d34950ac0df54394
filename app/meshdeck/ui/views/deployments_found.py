"""Deployments the agents run that this console did not launch (the CLI, another session, before a restart).

The agents name every worker meshdeck starts after its deployment (`deploy_model.worker_name`), so
asking each connected host for `workers.list` and grouping the names (`deploy_model.discover`, the
same the `meshdeck deployments` CLI uses) finds them all. They can be watched, their logs read and
stopped (every part, in reverse start order); they are marked "found on the agents".
"""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from meshdeck.services.deploy_model import DeploymentSnapshot, discover
from meshdeck.services.deploy_waits import read_log
from meshdeck.ui.context import ConsoleContext

log = logging.getLogger(__name__)
POLL_MS = 15_000
STOP_GRACE_S = 10.0


class FoundDeployments(QObject):
    changed = Signal()

    def __init__(self, context: ConsoleContext, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.context = context
        self.snapshots: dict[str, DeploymentSnapshot] = {}
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self.refresh)
        self._timer.start()

    def refresh(self) -> None:
        """Ask every connected host which meshdeck workers it runs (a job; never on the GUI thread)."""
        fleet, hosts = self.context.fleet, self.context.hosts
        if fleet is None or hosts is None or self.context.jobs.running("find deployments"):
            return
        names = sorted(hosts.connected_inventories())
        if not names:
            return

        def work(_progress: Any) -> list[DeploymentSnapshot]:
            listings: dict[str, Any] = {}
            for host in names:
                try:
                    listings[host] = fleet.call(host, "workers.list", timeout=30)
                except Exception as exc:  # one unreachable host must not hide the others
                    listings[host] = f"{type(exc).__name__}: {exc}"
            return discover(listings)

        job = self.context.jobs.start("find deployments", work)
        job.succeeded.connect(self._found)

    def _found(self, snapshots: list[DeploymentSnapshot]) -> None:
        deploy = self.context.deploy
        tracked = {s.id for s in deploy.list()} if deploy is not None else set()
        found = {s.id: s for s in snapshots if s.id not in tracked}
        if found != self.snapshots:
            self.snapshots = found
            self.changed.emit()

    def stop(self, deployment_id: str) -> Any:
        """Stop every part of a found deployment, the last stage first. Returns the job."""
        fleet = self.context.fleet
        snapshot = self.snapshots[deployment_id]
        assert fleet is not None

        def work(_progress: Any) -> str:
            for worker in sorted(snapshot.workers, key=lambda w: (w.stage, w.command), reverse=True):
                fleet.call(worker.host, "workers.stop", {"id": worker.worker_id, "grace_s": STOP_GRACE_S}, timeout=120)
            return deployment_id

        job = self.context.jobs.start(f"stop {deployment_id}", work)
        job.ended.connect(self.refresh)
        return job

    def tail(self, deployment_id: str, command: str, lines: int) -> Any:
        """A job reading the last `lines` of one part's log from its agent."""
        fleet = self.context.fleet
        assert fleet is not None
        worker = next(w for w in self.snapshots[deployment_id].workers if w.command == command)

        def work(_progress: Any) -> str:
            text = read_log(lambda *a: fleet.call(*a, timeout=60), worker.host, worker.worker_id)
            return "\n".join(text.splitlines()[-lines:])

        return self.context.jobs.start("log tail", work)
