"""The DeployService's recorder backed by the store: launches, state changes, events, outcomes and
vLLM's measured startup numbers beside the planner's prediction (`meshdeck.store.deployments`) — and,
read back (`recorded`), what a deployment found on the agents was launched with: its plan's hosts,
serving URL and the planner's numbers, so the CLI and a restarted console show planned vs measured too.

What is kept is what the dry run shows: secret env values masked (in the plan, every node's env and the
profile's text) and, instead of the inline workload's ~10 KB of base64 per node, its files' names,
sizes and digests.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any, TypeGuard

from meshdeck.core.errors import InputError
from meshdeck.launch.plan import LaunchPlan
from meshdeck.launch.profile_secrets import masked_profile_text
from meshdeck.services.deployments.model import DeploymentSnapshot, PlannedNumbers, RecordedDeployment
from meshdeck.store.database import Database
from meshdeck.store.deployments import (
    DeploymentNode,
    DeploymentRecord,
    get_deployment,
    record_deployment_event,
    record_deployment_finished,
    record_deployment_started,
    record_deployment_state,
    record_measured,
)

log = logging.getLogger(__name__)
GIB = 1024**3


def planned_as_measured(plan: LaunchPlan) -> dict[str, Any] | None:
    """The planner's prediction under the names vLLM's startup lines give (the agent's `vllm_startup`
    fields), so the store's compare puts predicted and measured side by side."""
    planned = plan.planned
    if planned is None:
        return None
    return {
        "weights_gib": round(planned.weights_bytes / GIB, 2),
        "available_kv_gib": round(planned.kv_cache_bytes / GIB, 2),
        "kv_cache_tokens": planned.kv_tokens,
        "max_concurrency": round(planned.max_concurrency, 2),
        "max_concurrency_tokens": planned.max_model_len,
    }


def planned_numbers(plan: LaunchPlan) -> PlannedNumbers | None:
    """The prediction `plan` carries, as a deployment keeps it (None: a torch job, a model without a card)."""
    startup = planned_as_measured(plan)
    if startup is None or plan.planned is None:
        return None
    gpus = tuple((command.host, gpu) for command in plan.commands for gpu in command.gpus)
    return PlannedNumbers(startup, float(plan.planned.gpu_memory_bytes), gpus)


def recorded_numbers(record: DeploymentRecord) -> PlannedNumbers | None:
    """The same, read back from a stored record (its `planned` column and the dry run kept as its plan).
    A record an older meshdeck or another tool wrote may lack parts: what is missing is left out."""
    startup = {k: float(v) for k, v in (record.planned or {}).items() if _finite(v)}
    if not startup:
        return None
    plan = record.plan
    nodes = plan.get("nodes")
    if not isinstance(nodes, list):
        nodes = []
    gpus = tuple(
        (node["host"], gpu)
        for node in nodes
        if isinstance(node, dict) and isinstance(node.get("host"), str) and isinstance(node.get("gpus"), list)
        for gpu in node["gpus"]
        if isinstance(gpu, int) and not isinstance(gpu, bool)
    )
    prediction = plan.get("planned")
    memory = prediction.get("gpu_memory_bytes") if isinstance(prediction, dict) else None
    return PlannedNumbers(startup, float(memory) if _finite(memory) else None, gpus)


def _finite(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class StoreRecorder:
    """Implements model.DeploymentRecorder. `profile_*` say which saved profile was launched."""

    def __init__(
        self,
        db: Database,
        *,
        profile_name: str | None = None,
        profile_version: int | None = None,
        profile_yaml: str | None = None,
    ) -> None:
        self.db = db
        self.profile_name = profile_name
        self.profile_version = profile_version
        self.profile_yaml = profile_yaml

    def deployment_started(self, snapshot: DeploymentSnapshot, plan: LaunchPlan) -> None:
        nodes = [DeploymentNode(c.host, c.name, c.role, c.stage, c.argv, c.shown_env()) for c in plan.commands]
        record_deployment_started(
            self.db,
            key=snapshot.id,
            name=plan.name,
            engine=plan.engine,
            nodes=nodes,
            model=plan.model,
            plan=plan.dry_run(inline_workload=False),
            planned=planned_as_measured(plan),
            profile_name=self.profile_name,
            profile_version=self.profile_version,
            profile_yaml=None if self.profile_yaml is None else masked_profile_text(self.profile_yaml),
            started_at=snapshot.started_at,
            state=snapshot.state,
        )

    def deployment_event(
        self, deployment_id: str, kind: str, message: str, data: Mapping[str, Any], state: str = "", reason: str = ""
    ) -> None:
        record_deployment_event(self.db, deployment_id, kind, message, data, host=data.get("host"))
        if state:
            record_deployment_state(self.db, deployment_id, state, reason)

    def deployment_finished(self, snapshot: DeploymentSnapshot) -> None:
        record_deployment_finished(
            self.db,
            snapshot.id,
            state=snapshot.state,
            reason=snapshot.reason,
            workers=[w.as_dict() for w in snapshot.workers],
        )

    def startup_measured(self, deployment_id: str, worker: str, measured: Mapping[str, Any]) -> None:
        record_measured(self.db, deployment_id, worker, measured)

    def recorded(self, deployment_id: str) -> RecordedDeployment | None:
        """What the store kept of `deployment_id`; None when it was never recorded here (launched without a
        store, e.g. a benchmark, or by another machine's meshdeck)."""
        try:
            record = get_deployment(self.db, deployment_id)
        except InputError:
            return None
        serving_url = record.plan.get("serving_url")
        return RecordedDeployment(
            name=record.name,
            engine=record.engine,
            started_at=record.started_at,
            open=record.finished_at is None,
            hosts=tuple(dict.fromkeys(node.host for node in record.nodes)),
            serving_url=serving_url if isinstance(serving_url, str) else None,
            planned=recorded_numbers(record),
            measured=record.measured,
        )
