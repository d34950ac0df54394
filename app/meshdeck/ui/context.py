"""What every view of the console shares: the services, the Qt bridge, the job runner, live data.

The console is wired once (`meshdeck.ui.app`) and each view gets this object. Services are the
Qt-free layer (fleet, store, deploy); the views never call a host or the database on the GUI
thread: they start a job (`jobs`) or react to the bridge's signals.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QSettings, Signal

from meshdeck.core.samples import SampleBatch, SeriesKey
from meshdeck.services.console import Database
from meshdeck.services.deployments.registry import DeployService
from meshdeck.services.events import HostStateChanged, InventoryReceived, SamplesReceived
from meshdeck.services.fleet import FleetService
from meshdeck.services.inventory import Inventory
from meshdeck.services.slurm_service import SlurmService
from meshdeck.ui.bridge import FleetBridge
from meshdeck.ui.charts.latest_values import LatestValues
from meshdeck.ui.charts.live_metrics import LiveMetrics
from meshdeck.ui.deployments_model import DeploymentsModel
from meshdeck.ui.jobs import JobRunner
from meshdeck.ui.views.dashboard.charts import dashboard_metrics
from meshdeck.ui.views.fleet.metrics import LATEST_METRICS

if TYPE_CHECKING:  # loaded only under --demo
    from meshdeck.services.demo import DemoCluster

log = logging.getLogger(__name__)


@dataclass
class HostView:
    """The console's picture of one host, from fleet events (GUI thread only)."""

    name: str
    state: str = "disconnected"
    reason: str = ""
    error: Exception | None = None
    inventory: Inventory | None = None
    last_sample_ts: float | None = None
    dropped: int = 0
    refused: int = 0  # samples the gate refused as malformed or out of range
    retry_at: float | None = None  # waiting to try again at this time.time() (the reason then counts down)
    cause: str = ""  # the reason without its "(retrying in N s)" note

    @property
    def simulated(self) -> bool:
        return self.inventory is not None and self.inventory.simulated


class HostsModel(QObject):
    """Host states and inventories, fed by the bridge. Views listen to `changed(host)`."""

    changed = Signal(str)

    def __init__(self, bridge: FleetBridge, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.hosts: dict[str, HostView] = {}
        bridge.host_state_changed.connect(self._on_state)
        bridge.inventory_received.connect(self._on_inventory)
        bridge.samples_received.connect(self._on_samples)

    def get(self, name: str) -> HostView:
        view = self.hosts.get(name)
        if view is None:
            view = self.hosts[name] = HostView(name)
        return view

    def forget(self, name: str) -> None:
        if self.hosts.pop(name, None) is not None:
            self.changed.emit(name)

    def _on_state(self, event: HostStateChanged) -> None:
        view = self.get(event.host)
        view.state, view.reason, view.error = event.state, event.reason, event.error
        view.retry_at, view.cause = event.retry_at, event.cause
        self.changed.emit(event.host)

    def _on_inventory(self, event: InventoryReceived) -> None:
        self.get(event.host).inventory = event.inventory
        self.changed.emit(event.host)

    def _on_samples(self, event: SamplesReceived) -> None:
        view = self.get(event.host)
        view.dropped += event.dropped
        view.refused += event.refused
        if event.batch.times:
            view.last_sample_ts = event.batch.times[-1]

    def connected_inventories(self) -> dict[str, Inventory]:
        """host -> inventory of every host that is connected (or degraded) and has reported one."""
        return {
            name: view.inventory
            for name, view in self.hosts.items()
            if view.inventory is not None and view.state in ("connected", "degraded")
        }


@dataclass
class ConsoleContext:
    """Shared by every view. `fleet`/`db` are None only in tests of views that do not need them."""

    fleet: FleetService | None
    db: Database | None
    bridge: FleetBridge
    jobs: JobRunner
    settings: QSettings
    live: LiveMetrics = field(default_factory=lambda: LiveMetrics(keep_metrics=dashboard_metrics()))
    latest: LatestValues = field(default_factory=lambda: LatestValues(frozenset(LATEST_METRICS)))  # no history
    hosts: HostsModel | None = None
    deployments: DeploymentsModel | None = None  # the registry's deployments, as its events said
    simulated: bool = False  # the demo: every host is a simulated agent
    deploy: DeployService | None = None  # the deployment registry (set with `use_deploy`)
    demo: DemoCluster | None = None  # under --demo
    slurm: SlurmService | None = None  # the Slurm clusters and jobs (set with `use_slurm`)
    on_shutdown: list[Callable[[], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.hosts is None:
            self.hosts = HostsModel(self.bridge)
        if self.deployments is None:
            self.deployments = DeploymentsModel(self.bridge)
        self.bridge.keep_series(self._wants)  # only what the views show waits for the GUI thread
        self.bridge.samples_received.connect(self._ingest)

    def use_deploy(self, deploy: DeployService) -> None:
        """The deployment registry the views work through: its events reach them through the bridge; at
        shutdown it stops watching (the deployments keep running on the agents)."""
        self.deploy = deploy
        self.on_shutdown.append(deploy.close)
        self.on_shutdown.append(deploy.subscribe(self.bridge.post))

    def use_slurm(self, slurm: SlurmService) -> None:
        """The Slurm side the views work through: its job changes reach them through the bridge."""
        self.slurm = slurm
        self.on_shutdown.append(slurm.subscribe(self.bridge.post))

    def _wants(self, key: SeriesKey) -> bool:
        return self.live.wants(key) or self.latest.wants(key)

    def _ingest(self, event: SamplesReceived) -> None:
        # a span the agent lost or the console shed is drawn as a gap, not bridged by a line
        self.ingest(event.host, event.batch, gap_before=bool(event.dropped or event.skipped_before))

    def ingest(self, host: str, batch: SampleBatch, *, gap_before: bool = False) -> None:
        """One host's samples into what the views read: the charts' rings and the newest-only values."""
        self.live.ingest(host, batch, gap_before=gap_before)
        self.latest.ingest(host, batch)

    def shutdown(self) -> None:
        """Stop jobs, then every service, in reverse order of start. Safe to call twice."""
        self.jobs.shutdown()
        self.bridge.stop()
        while self.on_shutdown:
            step = self.on_shutdown.pop()
            try:
                step()
            except Exception:
                log.exception("console shutdown step failed")
