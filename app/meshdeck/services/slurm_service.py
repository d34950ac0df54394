"""The console's Slurm side: the stored clusters, what each says about itself, and every job meshdeck submitted,
followed in one background thread that tells subscribers (the console's bridge) when a job changed.

    slurm = SlurmService(fleet, db).start()
    unsubscribe = slurm.subscribe(bridge.post)              # SlurmJobChanged, on the follower's thread
    info = slurm.info("hpc")                                # version, partitions, accounts/QOS (a job, not the GUI)
    record = slurm.submit("hpc", profile, options, run_id)  # sbatch; the follower takes it from there
    slurm.stop(record.deployment)                           # scancel, then the final state
    slurm.close()

The follower asks Slurm about every job not yet seen in a final state, every `poll_s`, through its cluster's login
node (services/slurm_jobs.py does the asking and the recording); a job that turned RUNNING gets its node agents
connected once, in a thread of its own, so one slow node never holds the others' states. A job whose login node
is not connected keeps its last state and says why (`problem`); one cluster's failure never blocks another's. A
job changed by another process (`meshdeck deployments stop`) is seen at the next pass, since every pass reads
the store. The jobs followed are the newest `MAX_JOBS`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from meshdeck.core.errors import InputError
from meshdeck.launch.profile import Profile
from meshdeck.launch.slurm_options import SlurmOptions
from meshdeck.remote.errors import RemoteError
from meshdeck.services.fleet import FleetService
from meshdeck.services.slurm import SlurmClient, SlurmClusterInfo, cluster_info
from meshdeck.services.slurm_jobs import SlurmDeployments, SlurmLogin, ssh_login
from meshdeck.services.subscribers import Subscribers
from meshdeck.store.database import Database
from meshdeck.store.hosts import HostRecord, get_host, list_hosts
from meshdeck.store.slurm_jobs import SlurmJobRecord as SlurmJobRecord  # what the console shows, re-exported
from meshdeck.store.slurm_jobs import find_slurm_job, list_slurm_jobs

log = logging.getLogger(__name__)

POLL_S = 2.0
MAX_JOBS = 100  # the newest jobs the console lists and follows
CLOSE_WAIT_S = 2.0
LoginFor = Callable[[HostRecord, FleetService], SlurmLogin]


@dataclass(frozen=True)
class SlurmJobChanged:
    """A job appeared or changed: its newest record and, when something cannot be shown, why (`problem`)."""

    record: SlurmJobRecord
    problem: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return ("slurm", self.record.deployment)

    def merged_after(self, older: object) -> SlurmJobChanged:
        """The event that stands for both: this newer one (it carries the whole record)."""
        return self


def _ssh_login(record: HostRecord, fleet: FleetService) -> SlurmLogin:
    return ssh_login(record, fleet.settings)


class SlurmService:
    def __init__(
        self, fleet: FleetService, db: Database, *, poll_s: float = POLL_S, login_for: LoginFor = _ssh_login
    ) -> None:
        self.fleet = fleet
        self.db = db
        self.poll_s = poll_s
        self._login_for = login_for
        self._clusters: dict[str, SlurmDeployments] = {}
        self._lock = threading.Lock()
        self._subscribers = Subscribers[SlurmJobChanged]("slurm")
        self._shown: dict[str, SlurmJobChanged] = {}  # deployment -> what subscribers were last told
        self._agents_asked: set[str] = set()  # deployments whose node agents were (being) connected
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- clusters ----------------------------------------------------------------------------------

    def clusters(self) -> list[str]:
        """The stored Slurm login nodes (`hosts add NAME TARGET --slurm`), by name."""
        return sorted(host.name for host in list_hosts(self.db) if host.scheduler == "slurm")

    def cluster(self, name: str) -> SlurmDeployments:
        """The job service of cluster `name` (built once); InputError when it is not a stored Slurm login node."""
        with self._lock:
            found = self._clusters.get(name)
            if found is None:
                record = get_host(self.db, name)
                if record.scheduler != "slurm":
                    raise InputError("cluster", f"host {name!r} is not a Slurm login node (add it with --slurm)")
                found = self._clusters[name] = SlurmDeployments(
                    self.fleet, self.db, self._login_for(record, self.fleet)
                )
            return found

    def info(self, name: str) -> SlurmClusterInfo:
        """What the cluster says about itself (asks its login node's agent: call from a job, never the GUI)."""
        jobs = self.cluster(name)
        self._require_connected(name)
        return cluster_info(SlurmClient(self.fleet, name), jobs.login.user)

    def _require_connected(self, name: str) -> None:
        status = self.fleet.status(name) if name in self.fleet.hosts() else None
        if status is None or status.state not in ("connected", "degraded"):
            state = "not connected" if status is None else f"{status.state}: {status.reason}"
            raise InputError("cluster", f"the login node {name} is {state}; connect it in the hosts view first")

    # -- jobs --------------------------------------------------------------------------------------

    def jobs(self) -> list[SlurmJobRecord]:
        """The newest jobs, newest first, as last recorded (no Slurm command: the follower keeps them current)."""
        return list_slurm_jobs(self.db, limit=MAX_JOBS)

    def script(self, name: str, profile: Profile, options: SlurmOptions, *, run_id: str) -> str:
        """The batch script `submit(..., run_id=run_id)` sends, verbatim (the console's dry run)."""
        self._require_connected(name)
        return self.cluster(name).batch_script(profile, options, run_id=run_id)

    def submit(self, name: str, profile: Profile, options: SlurmOptions, *, run_id: str) -> SlurmJobRecord:
        """sbatch the profile on cluster `name`; Slurm's refusal raises SlurmCommandFailed in its own words."""
        self._require_connected(name)
        record = self.cluster(name).submit(profile, options, run_id=run_id)
        self._tell(SlurmJobChanged(record))
        self._wake.set()
        return record

    def stop(self, deployment: str) -> SlurmJobRecord:
        """scancel the job and wait for its final state (or how it ended first)."""
        record = self._record(deployment)
        self._require_connected(record.cluster)
        done = self.cluster(record.cluster).stop(deployment)
        self._tell(SlurmJobChanged(done))
        return done

    def logs(self, deployment: str, lines: int = 200) -> str:
        """The end of the job's output file, read on the login node."""
        record = self._record(deployment)
        self._require_connected(record.cluster)
        return self.cluster(record.cluster).logs(deployment, lines)

    def _record(self, deployment: str) -> SlurmJobRecord:
        record = find_slurm_job(self.db, deployment)
        if record is None:
            raise InputError("deployment", f"no Slurm job is recorded for {deployment!r}")
        return record

    # -- subscribers and the follower --------------------------------------------------------------

    def subscribe(self, callback: Callable[[SlurmJobChanged], None]) -> Callable[[], None]:
        return self._subscribers.add(callback)

    def _tell(self, event: SlurmJobChanged) -> None:
        """Publish `event` unless subscribers were told this already (each refresh stamps the record's
        `updated_at`: a job asked again with nothing new is not news)."""
        with self._lock:
            shown = self._shown.get(event.record.deployment)
            if (
                shown is not None
                and replace(shown, record=replace(shown.record, updated_at=event.record.updated_at)) == event
            ):
                return
            self._shown[event.record.deployment] = event
        self._subscribers.publish(event)

    def start(self) -> SlurmService:
        if self._thread is None:
            self._thread = threading.Thread(target=self._follow, name="slurm-follower", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop following (the jobs keep running). A pass waiting on a hung login node (its call may take 45 s)
        is not waited for past CLOSE_WAIT_S: the window closes; the thread ends when its call does."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=CLOSE_WAIT_S)
            self._thread = None

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                self.follow_once()
            except Exception:  # the follower must outlive any one pass's surprise
                log.exception("slurm follower pass failed")
            self._wake.wait(self.poll_s)
            self._wake.clear()

    def follow_once(self) -> None:
        """One pass: each job not yet final asked of its cluster; what changed told to the subscribers."""
        for record in self.jobs():
            if self._stop.is_set():
                return
            if record.final:
                self._tell(SlurmJobChanged(record))
                continue
            self._tell(self._asked(record))

    def _asked(self, record: SlurmJobRecord) -> SlurmJobChanged:
        """`record` as its cluster says now, or as last seen with why it could not be asked."""
        try:
            self._require_connected(record.cluster)
            jobs = self.cluster(record.cluster)
            fresh = jobs.refresh(record.deployment)
        except (InputError, RemoteError, OSError) as exc:
            return SlurmJobChanged(record, f"its state is the last one seen: {exc}")
        if fresh.state == "RUNNING" and fresh.node_names:
            self._connect_agents_once(jobs, fresh)
        elif fresh.final:
            with self._lock:
                self._agents_asked.discard(fresh.deployment)
        return SlurmJobChanged(fresh, jobs.agents_problem.get(fresh.deployment))

    def _connect_agents_once(self, jobs: SlurmDeployments, record: SlurmJobRecord) -> None:
        """Reach the job's node agents, once per job and in a thread of its own (it waits for them)."""
        with self._lock:
            if record.deployment in self._agents_asked:
                return
            self._agents_asked.add(record.deployment)

        def connect() -> None:
            try:
                jobs.connect_agents(record.deployment)
            except (InputError, RemoteError, OSError) as exc:
                jobs.agents_problem[record.deployment] = f"the job's agents could not be reached: {exc}"
            self._wake.set()  # the problem (or its absence) is told at the next pass, at once

        threading.Thread(target=connect, name=f"slurm-agents-{record.job_id}", daemon=True).start()
