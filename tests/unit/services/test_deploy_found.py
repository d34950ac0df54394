"""Deployments found on the agents and adopted by the registry (DeployService.survey), stopped the same way
by the CLI and the console: every part, the last stage first; a part that cannot be reached is reported
without hiding the others; the stored record is closed only when every part answered."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from deploy_fleet import FakeFleet
from meshdeck.services.deployments.found import DeploymentSurvey
from meshdeck.services.deployments.model import DeploymentSnapshot, StopOutcome, worker_name
from meshdeck.services.deployments.records import StoreRecorder
from meshdeck.services.deployments.registry import STOPPED_REASON, DeployService
from meshdeck.store.database import Database
from meshdeck.store.deployments import get_deployment, record_deployment_started

DEPLOYMENT = "ds32-1130-aaaa"


def _fleet(states: dict[str, str]) -> FakeFleet:
    """Two nodes of one deployment: stage 0 (vllm-node0) on gpu-a and stage 1 (vllm-node1) on gpu-b."""
    fleet = FakeFleet()
    for stage, host in enumerate(("gpu-a", "gpu-b")):
        command = f"vllm-node{stage}"
        worker_id = f"{DEPLOYMENT}.{command}"
        fleet.workers[(host, worker_id)] = {
            "id": worker_id, "name": worker_name(DEPLOYMENT, stage, command), "state": states[host], "pid": 10,
            "exit_code": 0 if states[host] == "exited" else None, "signal": None, "restarts": 0, "reason": "",
            "spec": {}, "started_at": 1000.0 + stage,
        }  # fmt: skip
    return fleet


def survey_deployments(fleet: FakeFleet, hosts: list[str], db: Database | None = None) -> DeploymentSurvey:
    registry = DeployService(fleet, recorder=StoreRecorder(db) if db is not None else None)
    try:
        return registry.survey(hosts)
    finally:
        registry.close()


def find_deployments(fleet: FakeFleet, hosts: list[str]) -> list[DeploymentSnapshot]:
    return survey_deployments(fleet, hosts).deployments


def stop_found(fleet: FakeFleet, hosts: list[str], db: Database, on_part: Any = None) -> StopOutcome:
    """What `meshdeck deployments stop` and the console do: a registry adopts what the hosts run, then stops it."""
    registry = DeployService(fleet, recorder=StoreRecorder(db))
    try:
        [found] = registry.survey(hosts).deployments
        return registry.stop(found.id, on_part=on_part)
    finally:
        registry.close()


def _record(db: Database) -> None:
    record_deployment_started(db, key=DEPLOYMENT, name="ds32", engine="vllm", nodes=[], started_at=1000.0)


def test_found_deployment_is_stopped_last_stage_first_and_its_record_closed(db: Database) -> None:
    fleet = _fleet({"gpu-a": "running", "gpu-b": "running"})
    _record(db)
    [found] = find_deployments(fleet, ["gpu-a", "gpu-b"])
    assert found.id == DEPLOYMENT and [w.host for w in found.workers] == ["gpu-a", "gpu-b"]

    said: list[str] = []
    outcome = stop_found(fleet, ["gpu-a", "gpu-b"], db, on_part=lambda part: said.append(part.worker.host))
    assert said == ["gpu-b", "gpu-a"]  # the last pipeline stage first
    assert [host for host, method, _ in fleet.calls if method == "workers.stop"] == ["gpu-b", "gpu-a"]
    assert outcome.record_closed and not outcome.failures
    record = get_deployment(db, DEPLOYMENT)
    assert record.state == "stopped" and record.reason == STOPPED_REASON and record.finished_at is not None


def test_an_unreachable_part_is_reported_and_the_record_stays_open(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = _fleet({"gpu-a": "running", "gpu-b": "running"})
    _record(db)
    answer = fleet.call

    def call(host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        if host == "gpu-b" and method == "workers.stop":
            raise KeyError(f"{DEPLOYMENT}.vllm-node1")  # its agent no longer answers for it
        return answer(host, method, params, timeout)

    monkeypatch.setattr(fleet, "call", call)
    outcome = stop_found(fleet, ["gpu-a", "gpu-b"], db)
    assert [part.worker.host for part in outcome.failures] == ["gpu-b"] and "KeyError" in outcome.failures[0].error
    assert [part.state for part in outcome.parts] == [None, "stopped"]  # gpu-a was still stopped
    assert not outcome.record_closed and get_deployment(db, DEPLOYMENT).finished_at is None


def test_a_deployment_whose_parts_had_all_ended_is_closed_with_what_they_say(db: Database) -> None:
    fleet = _fleet({"gpu-a": "exited", "gpu-b": "exited"})
    _record(db)
    outcome = stop_found(fleet, ["gpu-a", "gpu-b"], db)
    assert outcome.record_closed
    assert get_deployment(db, DEPLOYMENT).state == "completed"


def test_a_host_that_cannot_be_asked_does_not_hide_the_others(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = _fleet({"gpu-a": "running", "gpu-b": "running"})
    answer = fleet.call

    def call(host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        if host == "gpu-b" and method == "workers.list":
            raise TimeoutError("gpu-b: no answer in 30 s")
        return answer(host, method, params, timeout)

    monkeypatch.setattr(fleet, "call", call)
    [found] = find_deployments(fleet, ["gpu-a", "gpu-b"])
    assert [w.host for w in found.workers] == ["gpu-a"]
    outcome = stop_found(fleet, ["gpu-a", "gpu-b"], db)  # no stored record (launched elsewhere): nothing to close
    assert not outcome.record_closed and not outcome.failures
    assert outcome.unsure_hosts == ("gpu-b",)  # its plan is not known: parts may run on the host not asked


def test_hosts_are_asked_at_the_same_time(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = _fleet({"gpu-a": "running", "gpu-b": "running"})
    answer = fleet.call
    both_asking = threading.Barrier(2, timeout=10)  # passes only while both hosts are asked at once

    def call(host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        if method == "workers.list":
            both_asking.wait()
        return answer(host, method, params, timeout)

    monkeypatch.setattr(fleet, "call", call)
    found = survey_deployments(fleet, ["gpu-a", "gpu-b"])
    assert found.unanswered == {}
    assert [w.host for w in found.deployments[0].workers] == ["gpu-a", "gpu-b"]


@pytest.mark.parametrize(
    ("listing", "why"),
    [
        (["not", "an", "object"], "malformed answer to workers.list: workers.list: must be an object"),
        ({"workers": [{"id": 5, "state": "running"}]}, "malformed answer to workers.list: workers.list.workers[0].id"),
        (TimeoutError("gpu-b: no answer in 30 s"), "gpu-b: no answer in 30 s"),
    ],
)
def test_a_host_that_answers_badly_or_not_at_all_is_named_and_the_others_shown(
    monkeypatch: pytest.MonkeyPatch, listing: Any, why: str
) -> None:
    fleet = _fleet({"gpu-a": "running", "gpu-b": "running"})
    answer = fleet.call

    def call(host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        if host == "gpu-b" and method == "workers.list":
            if isinstance(listing, Exception):
                raise listing
            return listing
        return answer(host, method, params, timeout)

    monkeypatch.setattr(fleet, "call", call)
    found = survey_deployments(fleet, ["gpu-a", "gpu-b"])
    assert [w.host for w in found.deployments[0].workers] == ["gpu-a"]
    assert list(found.unanswered) == ["gpu-b"] and found.unanswered["gpu-b"].startswith(why)


def test_a_malformed_stop_answer_is_a_part_not_stopped(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = _fleet({"gpu-a": "running", "gpu-b": "running"})
    _record(db)
    answer = fleet.call

    def call(host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        return {"state": 7} if method == "workers.stop" else answer(host, method, params, timeout)

    monkeypatch.setattr(fleet, "call", call)
    outcome = stop_found(fleet, ["gpu-a", "gpu-b"], db)
    assert [part.worker.host for part in outcome.failures] == ["gpu-b", "gpu-a"]
    assert "malformed answer to workers.stop" in outcome.failures[0].error
    assert not outcome.record_closed
