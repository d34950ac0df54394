"""One deployment as the registry holds it (registry.py): launched here, or adopted from the agents.

A launched deployment has its LaunchPlan: its parts are known before they start, in plan order, and the
registry applies its restart policy. An adopted one was found on the agents (launched by the CLI,
another console, this console before a restart — as the agent re-adopts its workers): its parts are
whatever the agents report, in start order (stage, then command), its state follows their states
(`summarize`), and what the agents cannot say (name, engine, serving URL, the planner's numbers, where
the plan placed its parts) comes from its stored record when there is one. Either can be stopped.

Mutable, and only touched under the registry's lock; `snapshot()` is the frozen value handed out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from meshdeck.launch.plan import LaunchPlan
from meshdeck.services.deployments.model import (
    DeploymentSnapshot,
    PlannedNumbers,
    RecordedDeployment,
    WorkerSnapshot,
    engine_of,
    name_of,
    summarize,
    worker_id,
)
from meshdeck.services.deployments.records import planned_numbers


@dataclass
class TrackedDeployment:
    id: str
    name: str
    engine: str
    plan: LaunchPlan | None = None  # None: adopted (found on the agents)
    state: str = "starting"
    reason: str = ""
    started_at: float = field(default_factory=time.time)
    serving_url: str | None = None
    planned: PlannedNumbers | None = None
    plan_hosts: tuple[str, ...] = ()  # where its plan placed parts (empty: not known)
    recorded: bool = False  # the store has a record of it (events and measured numbers go there)
    whole_restarts_left: int = 0
    whole_restarts: int = 0
    workers: dict[str, WorkerSnapshot] = field(default_factory=dict)  # worker id -> latest
    running_since: dict[str, float] = field(default_factory=dict)
    measured: dict[str, dict[str, Any]] = field(default_factory=dict)
    agent_restarts: dict[str, int] = field(default_factory=dict)  # worker id -> restarts its agent will make
    stopping: bool = False
    alarms: dict[str, str] = field(default_factory=dict)  # what is wrong while it runs (kind:part -> message)

    @classmethod
    def launched(cls, plan: LaunchPlan, deployment_id: str, *, recorded: bool) -> TrackedDeployment:
        deployment = cls(
            id=deployment_id,
            name=plan.name,
            engine=plan.engine,
            plan=plan,
            serving_url=plan.serving_url,
            planned=planned_numbers(plan),
            plan_hosts=plan.hosts,
            recorded=recorded,
        )
        for command in plan.commands:
            wid = worker_id(deployment_id, command.name)
            deployment.workers[wid] = WorkerSnapshot(command.name, command.host, wid, command.stage, "pending")
        return deployment

    @classmethod
    def adopted(
        cls, deployment_id: str, recorded: RecordedDeployment | None, started_at: float | None
    ) -> TrackedDeployment:
        """A deployment found on the agents, before its first part is added (`add_found`)."""
        if recorded is None:
            return cls(id=deployment_id, name=name_of(deployment_id), engine="", started_at=started_at or time.time())
        return cls(
            id=deployment_id,
            name=recorded.name,
            engine=recorded.engine,
            started_at=recorded.started_at,
            serving_url=recorded.serving_url,
            planned=recorded.planned,
            plan_hosts=recorded.hosts,
            recorded=True,
            measured={worker: dict(numbers) for worker, numbers in recorded.measured.items()},
        )

    @property
    def adopted_from_agents(self) -> bool:
        return self.plan is None

    def add_found(self, worker: WorkerSnapshot, started_at: float | None) -> None:
        """A part of an adopted deployment, as its agent reported it first."""
        self.workers[worker.worker_id] = worker
        if started_at is not None and not self.recorded:
            self.started_at = min(self.started_at, started_at)
        if not self.recorded:
            self.engine = engine_of(w.command for w in self.workers.values())
        self.follow_parts()

    def follow_parts(self) -> None:
        """An adopted deployment's state is what its parts' states say (unless a stop is under way)."""
        if self.adopted_from_agents and not self.stopping:
            self.state, self.reason = summarize(self.workers.values()), ""

    def start_order(self) -> list[WorkerSnapshot]:
        """The parts in the order they start: the plan's, else stage then command."""
        if self.plan is not None:
            return list(self.workers.values())
        return sorted(self.workers.values(), key=lambda w: (w.stage, w.command))

    def hosts(self) -> tuple[str, ...]:
        """Every host it runs or may run a part on."""
        return tuple(dict.fromkeys([*self.plan_hosts, *(w.host for w in self.workers.values())]))

    def snapshot(self) -> DeploymentSnapshot:
        return DeploymentSnapshot(
            id=self.id,
            name=self.name,
            engine=self.engine,
            state=self.state,
            reason=self.reason,
            workers=tuple(self.start_order()),
            started_at=self.started_at,
            serving_url=self.serving_url,
            whole_restarts=self.whole_restarts,
            measured={k: dict(v) for k, v in self.measured.items()},
            planned=self.planned,
            adopted=self.adopted_from_agents,
            alarms=tuple(self.alarms.values()),
        )
