"""What a deployment is while it runs: its state, its workers, its plan's numbers, and how its parts are
named on the agents.

Every worker meshdeck starts is named `meshdeck:<deployment>:<stage>:<command>` with the id
`<deployment>.<command>`, so the agents alone say which deployments exist and in which order their
parts started — `meshdeck deployments list|stop|logs` works from any machine, after the app that
launched them is gone. What the agents cannot say (the planner's prediction, where the plan placed
each part) is in the store's deployment record (`RecordedDeployment`), read back for a deployment
found on the agents.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from meshdeck.launch.plan import LaunchPlan

from meshdeck_agent.protocol import WorkerRecord

from meshdeck.core.errors import InputError
from meshdeck.core.plural import counted
from meshdeck.core.text import printable
from meshdeck.launch.plan import worker_id as worker_id

DEPLOYMENT_STATES = (
    "starting",  # stages being started, waiting for each to be ready
    "running",  # every part up (vLLM serving; torch ranks running)
    "degraded",  # a part crashed or restarts; the restart policy is being applied
    "restarting",  # a multi-node deployment being restarted as a whole
    "completed",  # every part exited 0 (a torch job that finished)
    "failed",  # a part failed and no restart is left
    "stopping",
    "stopped",
    "cancelled",  # the launch was cancelled before it was up
)
FINAL_STATES = ("completed", "failed", "stopped", "cancelled")
WORKER_ACTIVE = ("starting", "running", "restarting")
_NAME = re.compile(r"^meshdeck:(?P<deployment>[A-Za-z0-9._-]+):(?P<stage>\d+):(?P<command>[A-Za-z0-9._-]+)$")
_SAFE = re.compile(r"[^A-Za-z0-9-]")
REASON_LIMIT = 500  # characters of an agent's reason kept for showing (it may send megabytes)


def new_deployment_id(profile_name: str, now: float | None = None) -> str:
    """`<profile>-<MMDDhhmmss>-<4 hex>`; short enough that `<id>.<command>` fits the agent's 64 characters."""
    stamp = time.strftime("%m%d%H%M%S", time.localtime(now if now is not None else time.time()))
    return f"{_SAFE.sub('-', profile_name)[:28]}-{stamp}-{secrets.token_hex(2)}"


def worker_name(deployment_id: str, stage: int, command_name: str) -> str:
    return f"meshdeck:{deployment_id}:{stage}:{command_name}"


def parse_worker_name(name: str) -> tuple[str, int, str] | None:
    match = _NAME.match(name or "")
    if not match:
        return None
    return match.group("deployment"), int(match.group("stage")), match.group("command")


@dataclass(frozen=True)
class WorkerSnapshot:
    command: str
    host: str
    worker_id: str
    stage: int
    state: str  # "pending" before it is started, then the agent's worker states
    restarts: int = 0
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PlannedNumbers:
    """The planner's prediction a deployment was launched with: `startup` under the names vLLM's startup
    lines use (weights_gib, available_kv_gib, kv_cache_tokens, max_concurrency, max_concurrency_tokens),
    so planned and measured compare key by key, and the GPU memory it expects in use on each GPU it placed
    a part on (the dashboard's planned line)."""

    startup: Mapping[str, float]
    gpu_memory_bytes: float | None = None
    gpus: tuple[tuple[str, int], ...] = ()  # (host, GPU index) of every part

    def as_dict(self) -> dict[str, Any]:
        return {
            "startup": dict(self.startup),
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "gpus": [{"host": host, "gpu": gpu} for host, gpu in self.gpus],
        }


@dataclass(frozen=True)
class RecordedDeployment:
    """What the store kept of a launch (by this console, the CLI, an earlier session): read back for a
    deployment found on the agents, and to know whether its record is still open."""

    name: str
    engine: str
    started_at: float
    open: bool  # not finished yet: a stop closes it
    hosts: tuple[str, ...] = ()  # the hosts its plan placed parts on (empty: not known)
    serving_url: str | None = None
    planned: PlannedNumbers | None = None
    measured: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class DeploymentSnapshot:
    id: str
    name: str
    engine: str
    state: str
    reason: str
    workers: tuple[WorkerSnapshot, ...]
    started_at: float
    serving_url: str | None = None
    whole_restarts: int = 0
    measured: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # worker -> vLLM startup numbers
    planned: PlannedNumbers | None = None  # the planner's prediction it was launched with, when known
    adopted: bool = False  # found on the agents (launched elsewhere): watched and stoppable, not restarted
    alarms: tuple[str, ...] = ()  # what is wrong while it runs, each naming its part (a KV handoff not happening)

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "engine": self.engine,
            "state": self.state,
            "reason": self.reason,
            "started_at": self.started_at,
            "serving_url": self.serving_url,
            "whole_restarts": self.whole_restarts,
            "adopted": self.adopted,
            "alarms": list(self.alarms),
            "workers": [w.as_dict() for w in self.workers],
            "measured": {k: dict(v) for k, v in self.measured.items()},
            "planned": self.planned.as_dict() if self.planned is not None else None,
        }


@dataclass(frozen=True)
class PartStopped:
    """One part of a stop: what its agent answered (stopped, or exited / failed when it had ended), or why
    it could not be asked (`error`; `state` None)."""

    worker: WorkerSnapshot
    state: str | None
    error: str = ""


@dataclass(frozen=True)
class StopOutcome:
    """A stop, part by part (last stage first), and what became of the stored record."""

    snapshot: DeploymentSnapshot  # after the stop
    parts: tuple[PartStopped, ...]
    record_closed: bool  # closed now (False: none stored, already closed, a part not stopped, or `unsure_hosts`)
    unsure_hosts: tuple[str, ...] = ()  # hosts it may have parts on that could not be asked: its record stays open

    @property
    def failures(self) -> list[PartStopped]:
        return [part for part in self.parts if part.error]


@dataclass(frozen=True)
class PartLog:
    """The last lines of one part's log (escaped, newlines kept), or why it could not be read."""

    worker: WorkerSnapshot
    text: str
    error: str = ""


LISTED = 12  # parts or failed checks a confirmation lists; the rest are counted


def listed(lines: list[str], rest: str) -> list[str]:
    """`• line` for the first LISTED lines, then `… and N more <rest>`."""
    shown = [f"• {line}" for line in lines[:LISTED]]
    if len(lines) > LISTED:
        shown.append(f"… and {len(lines) - LISTED} more {rest}")
    return shown


def stop_question(snapshot: DeploymentSnapshot, grace_s: float) -> str:
    """What a stop asks before it stops anything (the console's Stop, `deployments stop` on a terminal): the
    deployment, each part and its host in the order they stop, and what is lost. Escaped for showing."""
    parts = sorted(snapshot.workers, key=lambda w: -w.stage)  # as the registry stops them: the last stage first
    hosts = list(dict.fromkeys(w.host for w in parts))
    found = " It was found on the agents (launched elsewhere)." if snapshot.adopted else ""
    lines = [
        f"Stop {snapshot.id} ({snapshot.engine}, {snapshot.state})?{found}",
        "",
        f"{counted(len(parts), 'part')} on {counted(len(hosts), 'host')} ({', '.join(hosts)}) stop, the last stage first:",
        *listed([f"{w.command} on {w.host} ({w.state})" for w in parts], "part(s)"),
        "",
    ]
    if snapshot.engine == "vllm":
        served = f" and {snapshot.serving_url} stops answering" if snapshot.serving_url else ""
        lines.append(
            f"Each engine gets SIGTERM, then SIGKILL after {grace_s:g} s: its in-flight requests are dropped{served}."
        )
    else:
        lines.append(f"Each rank gets SIGTERM, then SIGKILL after {grace_s:g} s: the job's unsaved progress is lost.")
    return "\n".join(printable(line) for line in lines)


def planned_gpu_memory(snapshots: Iterable[DeploymentSnapshot]) -> dict[tuple[str, int], float]:
    """(host, GPU) -> the memory the plans of the deployments still running expect in use there."""
    lines: dict[tuple[str, int], float] = {}
    for snapshot in snapshots:
        planned = snapshot.planned
        if planned is None or planned.gpu_memory_bytes is None or snapshot.final:
            continue
        for place in planned.gpus:
            lines[place] = float(planned.gpu_memory_bytes)
    return lines


@dataclass(frozen=True)
class LaunchProgress:
    deployment_id: str
    message: str
    step: int  # commands started so far
    total: int  # commands in the plan


def shown_reason(record: WorkerRecord) -> str:
    """The agent's reason for a worker's state, escaped and cut: it is shown and stored as it is."""
    return printable(record.reason, REASON_LIMIT)


def describe_exit(state: str, exit_code: int | None, signal: int | None, reason: str) -> str:
    """'killed by signal 9', 'exited with status 1', ... for the deployment's reason line."""
    if reason:
        return reason
    if signal:
        return f"killed by signal {signal}"
    if exit_code is not None:
        return f"exited with status {exit_code}"
    return state


def found_worker(host: str, record: WorkerRecord) -> tuple[str, WorkerSnapshot] | None:
    """(its deployment, the part) for a worker meshdeck started, as its agent reports it; None for any other
    worker (its name does not say `meshdeck:<deployment>:<stage>:<command>`)."""
    parsed = parse_worker_name(record.name)
    if parsed is None:
        return None
    deployment, stage, command = parsed
    worker = WorkerSnapshot(
        command=command,
        host=host,
        worker_id=record.id,
        stage=stage,
        state=record.state,
        restarts=record.restarts,
        exit_code=record.exit_code,
        signal=record.signal,
        reason=shown_reason(record),
    )
    return deployment, worker


def name_of(deployment_id: str) -> str:
    """The profile a deployment id was made from (`new_deployment_id` appends a time stamp and 4 hex digits)."""
    return deployment_id.rsplit("-", 2)[0]


def engine_of(commands: Iterable[str]) -> str:
    """A found deployment's engine, from its parts' command names (the plan builders name them)."""
    return "torch" if any(command.startswith("torchrun") for command in commands) else "vllm"


def summarize(workers: Iterable[WorkerSnapshot]) -> str:
    """A deployment state from its workers' states alone (for deployments found on the agents)."""
    states = [w.state for w in workers]
    if all(s == "running" for s in states):
        return "running"
    if all(s in ("stopped", "exited", "failed") for s in states):
        if any(s == "failed" for s in states):
            return "failed"
        if all(s == "exited" for s in states):
            return "completed"
        return "stopped"
    if any(s in ("failed", "restarting", "exited", "stopped") for s in states):
        return "degraded"
    return "starting"


def find(deployments: Iterable[DeploymentSnapshot], key: str) -> DeploymentSnapshot:
    """By id; or by profile name: its one active deployment, else (none active) its latest one."""
    deployments = list(deployments)
    for deployment in deployments:
        if deployment.id == key:
            return deployment
    named = [d for d in deployments if d.name == key]
    active = [d for d in named if not d.final]
    if len(active) > 1:
        raise InputError("deployment", f"{key!r} names {len(active)} running deployments; give the id")
    if active or named:
        return active[0] if active else max(named, key=lambda d: d.started_at)
    known = ", ".join(d.id for d in deployments) or "none"
    raise InputError("deployment", f"no deployment {key!r} on these hosts (found: {known})")


class Fleet(Protocol):
    def call(
        self, host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None
    ) -> Any: ...

    def subscribe(self, callback: Callable[[Any], None]) -> Callable[[], None]: ...


class DeploymentRecorder(Protocol):
    """Where launches, stops, events and planned-vs-measured go, and where they are read back from (the
    store implements it: services.deployments.records.StoreRecorder)."""

    def deployment_started(self, snapshot: DeploymentSnapshot, plan: LaunchPlan) -> None: ...
    def deployment_event(
        self, deployment_id: str, kind: str, message: str, data: Mapping[str, Any], state: str, reason: str
    ) -> None: ...
    def deployment_finished(self, snapshot: DeploymentSnapshot) -> None: ...
    def startup_measured(self, deployment_id: str, worker: str, measured: Mapping[str, Any]) -> None: ...
    def recorded(self, deployment_id: str) -> RecordedDeployment | None: ...


class LaunchFailed(Exception):
    """The launch did not come up; `snapshot` says how far it got and why."""

    def __init__(self, snapshot: DeploymentSnapshot) -> None:
        super().__init__(f"{snapshot.id}: {snapshot.state}: {snapshot.reason}")
        self.snapshot = snapshot
