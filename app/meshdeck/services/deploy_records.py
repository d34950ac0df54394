"""The DeployService's recorder backed by the store: launches, state changes, events, outcomes and
vLLM's measured startup numbers beside the planner's prediction (`meshdeck.store.deployments`).

What is kept is what the dry run shows: secret env values masked (in the plan, every node's env and the
profile's text) and, instead of the inline workload's ~10 KB of base64 per node, its files' names,
sizes and digests.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from meshdeck.launch.plan import LaunchPlan
from meshdeck.launch.profile_secrets import masked_profile_text
from meshdeck.services.deploy_model import DeploymentSnapshot
from meshdeck.store.database import Database
from meshdeck.store.deployments import (
    DeploymentNode,
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


class StoreRecorder:
    """Implements services.deploy.DeploymentRecorder. `profile_*` say which saved profile was launched."""

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
