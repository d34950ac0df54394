"""Deployments run as Slurm jobs: submit a profile's plan with `sbatch`, follow the job's states, reach the agents
the job starts on its nodes, and stop it with `scancel`.

    jobs = SlurmDeployments(fleet, db, ssh_login(record, fleet.settings))
    record = jobs.submit(profile, slurm_options(job_name=profile.name, partition="gpu"))
    record = jobs.wait_ready(record.deployment, timeout_s=900)   # RUNNING, agents up, the engine answering
    jobs.stop(record.deployment)                                  # scancel, then the final state

The login node's agent runs Slurm's commands (services/slurm.py). The batch script (launch/slurm_batch.py)
starts, on each node, the plan's argv for that node and an agent beside it; meshdeck reaches those agents through
the login node as a jump host (where pam_slurm_adopt allows it, which it does while the job runs there) with
`attach --no-start`, so a connection never starts an agent outside the job. Their samples (GPUs, the engine's
scraped /metrics under its worker id) reach the store as any host's. Where the nodes cannot be reached, the job
still runs and is followed; `agents_problem` says what cannot be shown.

States: every change Slurm reports (PENDING with its reason, RUNNING, COMPLETING, the final one) is kept in the
job's record and as a `deployment` event. After the job leaves squeue its state comes from sacct where accounting
runs, else from the completion record (jobcomp/filetxt). One job's unreadable answer never blocks another's.
"""

from __future__ import annotations

import getpass
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from meshdeck.core.errors import InputError
from meshdeck.core.slurm_state import SlurmJob
from meshdeck.launch.profile import Profile
from meshdeck.launch.slurm_batch import JobAgents, build_batch_script, job_agent_dir, job_agent_socket
from meshdeck.launch.slurm_options import SlurmOptions
from meshdeck.remote.connectors import AgentOptions, Connector, LocalConnector, SshConnector, agent_command
from meshdeck.remote.errors import RemoteError
from meshdeck.remote.sshconfig import resolve_route
from meshdeck.services.deployments.model import new_deployment_id
from meshdeck.services.fleet import FleetService, FleetSettings
from meshdeck.services.slurm import SlurmClient
from meshdeck.store.database import Database
from meshdeck.store.events import EventRecord, record_event
from meshdeck.store.hosts import HostRecord
from meshdeck.store.slurm_jobs import SlurmJobRecord, add_slurm_job, find_slurm_job, list_slurm_jobs, note_state

log = logging.getLogger(__name__)

POLL_S = 1.0
AGENT_CONNECT_S = 60.0
LOG_LINES_LIMIT = 10_000
NodeConnector = Callable[[str, AgentOptions], Connector]  # (node address, agent options) -> a connector


@dataclass(frozen=True)
class SlurmLogin:
    """A cluster's login node: `name` is its host in the fleet (its agent runs Slurm's commands), `user` who the
    jobs run as, `node_connector` how a compute node's agent is reached from here."""

    name: str
    user: str
    node_connector: NodeConnector
    simulated: bool = False


def ssh_login(record: HostRecord, settings: FleetSettings) -> SlurmLogin:
    """The login node of a stored `--slurm` host: compute nodes are reached with it as the last jump host (its
    own route first, as it is reached itself), as the same user, with the same key, at the host's `node_port`
    (else SSH's default)."""
    if record.scheduler != "slurm":
        raise InputError("--slurm", f"host {record.name!r} is not a Slurm login node (add it with --slurm)")
    route = resolve_route(
        record.target,
        port=record.port,
        identity_file=record.identity_file,
        jump=record.jump,
        config_path=settings.ssh_config,
    )
    user = route.target.user or getpass.getuser()

    def connector(address: str, agent: AgentOptions) -> Connector:
        target = f"{user}@{address}"
        node = resolve_route(
            target, port=record.node_port, identity_file=record.identity_file, config_path=settings.ssh_config
        )
        # through the login node exactly as it is reached (its own jumps, its key), then on to the node
        node_route = replace(node, jumps=(*route.jumps, route.target))
        return SshConnector(
            route=node_route,
            host_keys=settings.host_key_store(),
            agent_pyz=settings.agent_pyz,
            options=settings.ssh,
            agent=agent,
            cache_dir=settings.remote_cache_dir,
            pythons=settings.pythons,
        )

    return SlurmLogin(record.name, user, connector)


def login_user(record: HostRecord, settings: FleetSettings) -> str:
    """Who the login node's agent (and so the jobs) runs as: the target's or the ssh config's user, else ours."""
    route = resolve_route(
        record.target, port=record.port, identity_file=record.identity_file, jump=record.jump,
        config_path=settings.ssh_config,
    )  # fmt: skip
    return route.target.user or getpass.getuser()


def local_login(name: str, user: str) -> SlurmLogin:
    """A cluster whose login node is this machine (the local agent `name`): `bench slurm --local`."""
    return SlurmLogin(name, user, lambda address, agent: LocalConnector(f"{name}-node", agent))


@dataclass(frozen=True)
class NodeAgent:
    host: str  # its name in the fleet: <login>.<node>
    node: str
    index: int  # SLURM_NODEID
    address: str


def node_agent_name(login: str, node: str) -> str:
    return f"{login}.{node}"


DEPLOYMENT_STATE = {
    "PENDING": "starting",
    "CONFIGURING": "starting",
    "REQUEUED": "starting",
    "RUNNING": "running",
    "COMPLETING": "stopping",
    "COMPLETED": "completed",
    "CANCELLED": "stopped",
    "SUSPENDED": "degraded",
}


def deployment_state(state: str) -> str:
    """meshdeck's deployment state for a Slurm job state (the job's own is always shown beside it)."""
    return DEPLOYMENT_STATE.get(state, "failed" if state not in ("STOPPED", "RESIZING", "SIGNALING") else "running")


class SlurmDeployments:
    """Submit, follow and stop Slurm jobs for one cluster; thread-safe (one lock around the fleet's node hosts)."""

    def __init__(self, fleet: FleetService, db: Database, login: SlurmLogin) -> None:
        self.fleet = fleet
        self.db = db
        self.login = login
        self.client = SlurmClient(fleet, login.name)
        self._lock = threading.Lock()
        self.agents_problem: dict[str, str] = {}  # deployment -> why its node agents cannot be shown

    # -- submit ----------------------------------------------------------------------------------

    def batch_script(self, profile: Profile, options: SlurmOptions, *, run_id: str, agents: bool = True) -> str:
        """The script `submit` sends (what a dry run prints): with the agents' command from the login's link."""
        job_agents = None
        if agents:
            details = self.fleet.status(self.login.name).details
            job_agents = JobAgents(tuple(agent_command(details)))
        return build_batch_script(profile, options, run_id=run_id, agents=job_agents).text

    def submit(
        self, profile: Profile, options: SlurmOptions, *, run_id: str | None = None, agents: bool = True
    ) -> SlurmJobRecord:
        """`sbatch` the profile's plan; a refusal raises SlurmCommandFailed with Slurm's own message."""
        deployment = run_id or new_deployment_id(profile.name)
        script = self.batch_script(profile, options, run_id=deployment, agents=agents)
        job_id = self.client.submit(script)
        job, output = self._detail(job_id)
        record = add_slurm_job(
            self.db,
            SlurmJobRecord(
                deployment=deployment,
                cluster=self.login.name,
                job_id=job_id,
                profile=profile.name,
                engine=profile.engine,
                nodes=len(profile.hosts),
                state=job.state if job else "PENDING",
                reason=job.reason if job else None,
                options={k: v for k, v in _options(options).items() if v is not None},
                output=output,
                serving_port=profile.vllm.port if profile.engine == "vllm" else None,
            ),
        )
        self._event(record, f"submitted as Slurm job {job_id} on {self.login.name}", "submitted")
        return record

    def _detail(self, job_id: int) -> tuple[SlurmJob | None, str | None]:
        try:
            found = self.client.job_detail(job_id)
        except (InputError, RemoteError) as exc:
            log.warning("scontrol show job %s: %s", job_id, exc)
            return None, None
        return found if found else (None, None)

    # -- follow ----------------------------------------------------------------------------------

    def get(self, deployment: str) -> SlurmJobRecord:
        record = find_slurm_job(self.db, deployment)
        if record is None or record.cluster != self.login.name:
            raise InputError("deployment", f"no Slurm job {deployment!r} on {self.login.name}")
        return record

    def jobs(self, *, open_only: bool = False) -> list[SlurmJobRecord]:
        return [r for r in list_slurm_jobs(self.db, open_only=open_only) if r.cluster == self.login.name]

    def refresh(self, deployment: str) -> SlurmJobRecord:
        """Ask Slurm once: squeue/scontrol while the job is known there, then sacct or the completion record."""
        record = self.get(deployment)
        if record.final:
            return record
        job, output = self._detail(record.job_id)
        if job is None:
            job = self.client.job(record.job_id)
        if job is None:
            job = self.client.final_state(record.job_id)
        if job is None:
            return record
        names: tuple[str, ...] = ()
        if job.node_list and not record.node_names:
            try:
                names = self.client.hostnames(job.node_list)
            except InputError as exc:
                log.warning("job %s: node list %r: %s", record.job_id, job.node_list, exc)
        updated, changed = note_state(self.db, deployment, job.state, job.reason, node_names=names, output=output)
        if changed:
            because = f" ({job.reason})" if job.reason else ""
            self._event(updated, f"Slurm job {updated.job_id}: {job.state}{because}", job.state.lower())
        if updated.final:
            self.disconnect_agents(updated)
        return updated

    def watch(
        self,
        deployment: str,
        until: Callable[[SlurmJobRecord], bool],
        *,
        timeout_s: float,
        progress: Callable[[SlurmJobRecord], None] | None = None,
    ) -> SlurmJobRecord:
        """Refresh every POLL_S until `until(record)` or the job ends; TimeoutError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        seen: tuple[str, str | None] | None = None
        while True:
            record = self.refresh(deployment)
            if progress is not None and (record.state, record.reason) != seen:
                seen = (record.state, record.reason)
                progress(record)
            if until(record) or record.final:
                return record
            if time.monotonic() > deadline:
                raise TimeoutError(f"Slurm job {record.job_id} is still {record.state} after {timeout_s:g} s")
            time.sleep(POLL_S)

    # -- agents in the job -----------------------------------------------------------------------

    def node_agents(self, record: SlurmJobRecord) -> list[NodeAgent]:
        if not record.node_names:
            return []
        addresses = self.client.node_addresses(record.node_names)
        return [
            NodeAgent(node_agent_name(self.login.name, name), name, index, addresses.get(name, name))
            for index, name in enumerate(record.node_names)
        ]

    def connect_agents(self, deployment: str, *, timeout_s: float = AGENT_CONNECT_S) -> list[NodeAgent]:
        """Add each node's agent (started by the job) to the fleet and wait until they answer; on failure the job
        keeps running and `agents_problem[deployment]` says what cannot be shown."""
        record = self.get(deployment)
        agents = self.node_agents(record)
        with self._lock:
            for agent in agents:
                if agent.host in self.fleet.hosts():
                    continue
                options = AgentOptions(
                    socket=job_agent_socket(record.job_id, agent.index),
                    state_dir=job_agent_dir(record.job_id, agent.index),
                    start=False,
                )
                self.fleet.add_host(agent.host, self.login.node_connector(agent.address, options))
        deadline = time.monotonic() + timeout_s
        waiting = [agent.host for agent in agents]
        while waiting and time.monotonic() < deadline:
            waiting = [host for host in waiting if self.fleet.status(host).state != "connected"]
            if waiting:
                time.sleep(0.2)
        if waiting:
            reasons = "; ".join(f"{h}: {self.fleet.status(h).state} {self.fleet.status(h).reason}" for h in waiting)
            self.agents_problem[deployment] = (
                f"the job's agents did not answer ({reasons}): its GPUs and engine metrics are not shown; "
                "the job itself runs and is followed through Slurm"
            )
        else:
            self.agents_problem.pop(deployment, None)
        return agents

    def disconnect_agents(self, record: SlurmJobRecord) -> None:
        with self._lock:
            for name in record.node_names:
                host = node_agent_name(self.login.name, name)
                if host in self.fleet.hosts():
                    self.fleet.remove_host(host)

    def serving(self, record: SlurmJobRecord) -> bool:
        """Whether the head node's engine accepts connections on its port (asked of the head's own agent)."""
        if record.serving_port is None or not record.node_names:
            return record.state == "RUNNING"
        head = node_agent_name(self.login.name, record.node_names[0])
        try:
            reply = self.fleet.call(
                head, "checks.tcp_connect", {"host": "127.0.0.1", "port": record.serving_port, "timeout_s": 2.0}
            )
        except (RemoteError, InputError):
            return False
        return bool(isinstance(reply, dict) and reply.get("ok"))

    def wait_ready(
        self,
        deployment: str,
        *,
        timeout_s: float,
        progress: Callable[[SlurmJobRecord], None] | None = None,
    ) -> SlurmJobRecord:
        """Until the job runs, its agents answer and its engine serves; returns early when the job ends (the
        record then says how). TimeoutError when it is not ready in `timeout_s`."""
        started = time.monotonic()
        record = self.watch(deployment, lambda r: r.state == "RUNNING", timeout_s=timeout_s, progress=progress)
        if record.final:
            return record
        self.connect_agents(deployment, timeout_s=min(AGENT_CONNECT_S, timeout_s))
        while not self.serving(record):
            record = self.refresh(deployment)
            if record.final:
                return record
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"Slurm job {record.job_id} runs but its engine did not answer in {timeout_s:g} s")
            time.sleep(POLL_S)
        self._event(record, f"Slurm job {record.job_id}: serving on port {record.serving_port}", "ready")
        return record

    # -- stop and logs ---------------------------------------------------------------------------

    def stop(self, deployment: str, *, timeout_s: float = 60.0) -> SlurmJobRecord:
        """`scancel` the job and wait for its final state (CANCELLED, or how it ended first)."""
        record = self.refresh(deployment)
        if record.final:
            return record
        self.disconnect_agents(record)
        self.client.cancel(record.job_id)
        self._event(record, f"scancel {record.job_id}", "stop")
        return self.watch(deployment, lambda r: r.final, timeout_s=timeout_s)

    def logs(self, deployment: str, lines: int = 50) -> str:
        """The last `lines` lines of the job's output file (both nodes' tasks write there, as srun relays)."""
        if not 1 <= lines <= LOG_LINES_LIMIT:
            raise InputError("--lines", f"must be 1-{LOG_LINES_LIMIT}, got {lines}")
        record = self.get(deployment)
        if not record.output:
            detail = self._detail(record.job_id)[1]
            if not detail:
                raise InputError("deployment", f"Slurm job {record.job_id}: its output file is not known")
            record = replace(record, output=detail)
        assert record.output is not None
        text = self.client.read_file(record.output)
        return "\n".join(text.splitlines()[-lines:])

    def _event(self, record: SlurmJobRecord, message: str, subject: str) -> None:
        data: dict[str, Any] = {
            "message": message,
            "deployment": record.deployment,
            "job_id": record.job_id,
            "slurm_state": record.state,
        }
        if record.reason:
            data["reason"] = record.reason
        record_event(self.db, EventRecord("deployment", time.time(), host=self.login.name, subject=subject, data=data))


def _options(options: SlurmOptions) -> dict[str, str | None]:
    return {
        "partition": options.partition,
        "account": options.account,
        "qos": options.qos,
        "time": options.time_limit,
        "job_name": options.job_name,
    }
