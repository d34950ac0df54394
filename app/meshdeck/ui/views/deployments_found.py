"""Deployments the agents run that this console did not launch (the CLI, another session, before a restart).

The agents name every worker meshdeck starts after its deployment (`deploy_model.worker_name`), so
asking each connected host for `workers.list` and grouping the names finds them all
(`services.deploy_found`, which the `meshdeck deployments` CLI uses too). They can be watched, their
logs read and stopped (every part, in reverse start order, then their stored record is closed, as
the CLI's `deployments stop` does); they are marked "found on the agents".
"""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from meshdeck.services.deploy_found import FoundStopped, PartStopped, find_deployments, stop_found
from meshdeck.services.deploy_model import DeploymentSnapshot
from meshdeck.services.deploy_waits import read_log
from meshdeck.ui.context import ConsoleContext

log = logging.getLogger(__name__)
POLL_MS = 15_000


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

        job = self.context.jobs.start("find deployments", lambda _progress: find_deployments(fleet, names))
        job.succeeded.connect(self._found)

    def _found(self, snapshots: list[DeploymentSnapshot]) -> None:
        deploy = self.context.deploy
        tracked = {s.id for s in deploy.list()} if deploy is not None else set()
        found = {s.id: s for s in snapshots if s.id not in tracked}
        if found != self.snapshots:
            self.snapshots = found
            self.changed.emit()

    def stop(self, deployment_id: str) -> Any:
        """Stop every part of a found deployment, the last stage first, and close its stored record, as
        `meshdeck deployments stop` does. Returns the job (its result: a deploy_found.FoundStopped)."""
        fleet, db = self.context.fleet, self.context.db
        snapshot = self.snapshots[deployment_id]
        assert fleet is not None

        def work(progress: Any) -> FoundStopped:
            def said(part: PartStopped) -> None:
                progress.report(None, f"{part.worker.command} on {part.worker.host}: {part.state or part.error}")

            return stop_found(fleet, snapshot, db=db, on_part=said)

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
