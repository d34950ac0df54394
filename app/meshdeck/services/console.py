"""The console's services, wired once: the database, the fleet, the deployment registry, the history writer
and the Slurm jobs' follower, and the order they stop in. The Qt side (ui/app.py) adds its bridge and views on
top; the soak test drives exactly this wiring.

    services = ConsoleServices.start(demo=False, db_path=None)   # the stored hosts over SSH
    unsubscribe = services.fleet.subscribe(bridge.post)          # the window's own view of the events
    services.connect_hosts()                                     # each stored host, resumed where its history ends
    ...
    services.shutdown()                                          # about a second, whatever comes in

Every sample and event goes to the store (history) through the writer. The writer's inbox is the one
place the sample path waits (store/writer.py). Shutdown: the writer stops taking samples (a supervisor
waiting for room is released at once), the fleet stops, then the writer commits what it had staged;
what still waited in its inbox was never acknowledged, so the agents' rings deliver it again at the next
start. The open minute of each host is left open (rolled up at the next start, read from the raw samples
meanwhile): rolling it up costs as much as the rows it holds, which a flooding agent makes many.

One process writes a database's history at a time (services/writer_claim.py): the console makes a
running `meshdeck record` hand it over (the recorder resumes when the console closes); a console that
cannot get it writes nothing and shows what the other writer stores (`services.claim` says who).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from meshdeck.remote.open_files import raise_open_files_limit
from meshdeck.services.deployments.handoff_watch import HandoffWatch
from meshdeck.services.deployments.registry import DeployService
from meshdeck.services.fleet import FleetService, FleetSettings
from meshdeck.services.history import HistoryRecorder, resume_points
from meshdeck.services.profiles import StoreDeploymentRecorder
from meshdeck.services.slurm_service import SlurmService
from meshdeck.services.writer_claim import WriterClaim, claim_for_console
from meshdeck.store.database import Database as Database  # the console's views hold it, typed
from meshdeck.store.database import open_database
from meshdeck.store.hosts import list_hosts
from meshdeck.store.writer import SampleWriter, WriterSettings

if TYPE_CHECKING:  # loaded only under --demo
    from meshdeck.services.demo import DemoCluster

log = logging.getLogger(__name__)

DEMO_COMMIT_INTERVAL_S = 2.0  # the demo's history view fills while its tour runs


@dataclass
class ConsoleServices:
    fleet: FleetService
    db: Database
    deploy: DeployService
    history_writer: SampleWriter | None  # None: another process writes the history (`claim.holder`)
    claim: WriterClaim
    demo: DemoCluster | None = None  # under --demo
    _stops: list[Callable[[], None]] = field(default_factory=list)
    slurm: SlurmService | None = None  # the Slurm jobs meshdeck submitted, followed once hosts are connected

    @property
    def writer(self) -> SampleWriter:
        if self.history_writer is None:
            raise RuntimeError(f"{self.db.path}: history is written by another process ({self.claim.holder})")
        return self.history_writer

    @classmethod
    def start(
        cls,
        *,
        demo: bool = False,
        db_path: str | Path | None = None,
        fleet_settings: FleetSettings | None = None,
        writer_settings: WriterSettings | None = None,
        real_vllm: str | None = None,
        claim: Callable[[Database], WriterClaim] | None = None,
    ) -> ConsoleServices:
        """Open the database and the fleet (the demo's two simulated agents with --demo), the deployment
        registry and the history writer. Hosts are connected by `connect_hosts`, once the caller listens.
        `real_vllm` (the demo only): the vLLM executable the demo's real-engine profile runs. `claim`:
        the right to write history (default: the console's, `claim_for_console`); released at shutdown."""
        stops: list[Callable[[], None]] = []
        raise_open_files_limit()  # a few hundred hosts' pipes and sockets pass the usual soft limit of 1,024
        demo_cluster = None
        if demo:
            from meshdeck.services.demo import DemoCluster

            demo_cluster = DemoCluster.start(db_path=db_path, real_vllm=real_vllm)
            fleet, db = demo_cluster.fleet, demo_cluster.db
            stops.append(demo_cluster.shutdown)  # its daemons and workers, the fleet, the database
        else:
            db = open_database(db_path)
            fleet = FleetService(fleet_settings)
            stops += [db.close, fleet.close]
        try:
            held = (claim or (lambda opened: claim_for_console(opened.path)))(db)
        except BaseException:
            for step in reversed(stops):
                step()
            raise
        stops.append(held.release)  # after the writer has committed and stopped
        # The one deployment registry: launched here or found on the agents (surveyed as each host connects).
        deploy = DeployService(fleet, recorder=StoreDeploymentRecorder(db), survey_on_connect=True)
        stops.append(deploy.close)  # the deployments keep running on the agents
        stops.append(fleet.subscribe(HandoffWatch(deploy).handle))  # disaggregated: the KV-handoff alarm
        slurm = SlurmService(fleet, db)  # its follower starts with `connect_hosts`; the jobs keep running
        stops.append(slurm.close)
        if not held.writes:
            return cls(fleet, db, deploy, None, held, demo_cluster, stops, slurm=slurm)
        # The real console lets the writer adapt its commit interval to the number of series (2-30 s).
        settings = writer_settings or (WriterSettings(commit_interval_s=DEMO_COMMIT_INTERVAL_S) if demo else None)
        writer = SampleWriter(db, settings=settings).start()
        stops += [
            lambda: writer.stop(roll_up_open_buckets=False, commit_queued=False),
            fleet.close,  # (closing it again in a later step is a no-op)
            writer.close_inbox,
            fleet.subscribe(HistoryRecorder(writer).handle),
        ]
        return cls(fleet, db, deploy, writer, held, demo_cluster, stops, slurm=slurm)

    def connect_hosts(self) -> None:
        """Supervise every stored host, resuming from the last stored seq and the sequence epoch it
        belongs to; survey those already connected (the demo's) for their deployments; follow the Slurm jobs."""
        self.deploy.survey_soon(self.fleet.hosts())
        if self.slurm is not None:
            self.slurm.start()
        if self.demo is not None:
            return
        resume = resume_points(self.db)
        for record in list_hosts(self.db):
            point = resume.get(record.name)
            if point is None:
                self.fleet.add_record(record)
            else:
                self.fleet.add_record(record, since_seq=point.seq, since_epoch=point.epoch)

    def shutdown(self) -> None:
        """Stop everything, newest first (see the module doc). Safe to call twice."""
        while self._stops:
            step = self._stops.pop()
            try:
                step()
            except Exception:
                log.exception("console shutdown step failed")
