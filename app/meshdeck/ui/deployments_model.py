"""The console's picture of the deployments, kept current by the deployment registry's events (GUI thread).

The registry (services.deployments.registry.DeployService) publishes a DeploymentChanged for every change through the
bridge; this model keeps the newest snapshot of each deployment and says which one changed. Keeping it
costs a dict assignment per event, so it is always current: a view hidden meanwhile reads it when shown
(and does nothing before), and the dashboard's planned-memory lines follow it whichever view is shown.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from meshdeck.services.deployments.events import DeploymentChanged
from meshdeck.services.deployments.model import DeploymentSnapshot, planned_gpu_memory
from meshdeck.ui.bridge import FleetBridge


class DeploymentsModel(QObject):
    changed = Signal(str)  # the id of the deployment that appeared or changed
    planned_memory = Signal(object)  # {(host, gpu): bytes} the running deployments' plans expect, when it changes

    def __init__(self, bridge: FleetBridge, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.snapshots: dict[str, DeploymentSnapshot] = {}
        self.planned: dict[tuple[str, int], float] = {}
        bridge.deployment_changed.connect(self._on_changed)

    def get(self, deployment_id: str | None) -> DeploymentSnapshot | None:
        return self.snapshots.get(deployment_id or "")

    def newest_first(self) -> list[DeploymentSnapshot]:
        return sorted(self.snapshots.values(), key=lambda s: s.started_at, reverse=True)

    def _on_changed(self, event: DeploymentChanged) -> None:
        self.snapshots[event.snapshot.id] = event.snapshot
        planned = planned_gpu_memory(self.snapshots.values())
        if planned != self.planned:
            self.planned = planned
            self.planned_memory.emit(planned)
        self.changed.emit(event.snapshot.id)
