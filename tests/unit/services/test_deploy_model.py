"""Deployments found on the agents alone: worker names carry deployment, stage and command."""

from __future__ import annotations

from typing import Any

import pytest
from deploy_fleet import FakeFleet
from meshdeck.core.errors import InputError
from meshdeck.services.deployments.model import find, new_deployment_id, parse_worker_name, worker_id, worker_name
from meshdeck.services.deployments.registry import DeployService


def test_ids_fit_the_agents_limit_and_names_round_trip() -> None:
    deployment = new_deployment_id("a-very-long-profile-name-for-deepseek-v3.2-on-h200", now=0)
    wid = worker_id(deployment, "torchrun-node127")
    assert len(wid) <= 64 and all(c.isalnum() or c in "-_." for c in wid)
    assert parse_worker_name(worker_name(deployment, 1, "vllm-node1")) == (deployment, 1, "vllm-node1")
    assert parse_worker_name("preflight-probe") is None


def discover_wire(listings: dict) -> list:
    """The deployments a registry adopts from these `workers.list` answers (host -> answer)."""
    fleet = FakeFleet()

    def call(host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        assert method == "workers.list"
        return listings[host]

    fleet.call = call  # type: ignore[method-assign]
    registry = DeployService(fleet)
    try:
        survey = registry.survey(list(listings))
    finally:
        registry.close()
    assert survey.unanswered == {}
    return survey.deployments


def listing(deployment: str, *parts: tuple[int, str, str]) -> dict:
    return {"workers": [{"id": worker_id(deployment, c), "name": worker_name(deployment, s, c), "state": st,
                         "restarts": 0, "started_at": 100.0 + s} for s, c, st in parts]}  # fmt: skip


def test_discover_groups_workers_by_deployment_in_start_order() -> None:
    found = discover_wire(
        {
            "gpu-a": listing("ds32-1130-aa", (0, "vllm-node0", "running")),
            "gpu-b": {"workers": [*listing("ds32-1130-aa", (1, "vllm-node1", "running"))["workers"],
                                  {"id": "other", "name": "not meshdeck", "state": "running"}]},
        }
    )  # fmt: skip
    (deployment,) = found
    assert deployment.id == "ds32-1130-aa" and deployment.name == "ds32"
    assert [(w.host, w.command) for w in deployment.workers] == [("gpu-a", "vllm-node0"), ("gpu-b", "vllm-node1")]
    assert deployment.state == "running" and deployment.engine == "vllm"


@pytest.mark.parametrize(
    ("states", "summary"),
    [
        (("running", "running"), "running"),
        (("running", "failed"), "degraded"),
        (("exited", "exited"), "completed"),
        (("stopped", "failed"), "failed"),
        (("stopped", "stopped"), "stopped"),
        (("starting", "running"), "starting"),
    ],
)
def test_a_deployment_state_from_its_workers(states: tuple[str, str], summary: str) -> None:
    (deployment,) = discover_wire(
        {"h": listing("d-1-ff", (0, "torchrun-node0", states[0]), (1, "torchrun-node1", states[1]))}
    )
    assert deployment.state == summary


def test_find_by_id_or_unique_profile_name() -> None:
    deployments = discover_wire({"h": {"workers": listing("ds32-1-aa", (0, "vllm-node0", "running"))["workers"]
                                  + listing("ds32-2-bb", (0, "vllm-node0", "running"))["workers"]}})  # fmt: skip
    assert find(deployments, "ds32-2-bb").id == "ds32-2-bb"
    with pytest.raises(InputError, match="names 2 running deployments"):
        find(deployments, "ds32")
    with pytest.raises(InputError, match="no deployment 'nope'"):
        find(deployments, "nope")
    finished = discover_wire({"h": {"workers": listing("job-1-aa", (0, "torchrun-node0", "exited"))["workers"]
                               + listing("job-2-bb", (0, "torchrun-node0", "exited"))["workers"]}})  # fmt: skip
    assert find(finished, "job").id in ("job-1-aa", "job-2-bb")  # none active: the latest
