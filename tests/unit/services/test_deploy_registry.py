"""The deployment registry owns every deployment: launched here or adopted from the agents (from a worker
event, a survey, or a host that connects), with its plan's numbers read back from the store — so a
restarted console and the CLI see planned vs measured — and publishes every change as a typed event."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from deploy_fleet import FakeFleet
from meshdeck.launch.plan import LaunchPlan, NodeCommand, PlannedStartup, ReadyCheck
from meshdeck.remote.events import HostStateChanged
from meshdeck.services.deployments.events import DeploymentChanged
from meshdeck.services.deployments.model import DeploymentSnapshot, planned_gpu_memory, worker_id, worker_name
from meshdeck.services.deployments.records import StoreRecorder
from meshdeck.services.deployments.registry import DeployService
from meshdeck.store.database import Database

GIB = 1024**3
PLANNED = PlannedStartup(int(120 * GIB), int(80.5 * GIB), int(30.25 * GIB), 418_304, 25.53, 16384)
DEPLOYMENT = "ds32-0101010101-abcd"


def two_node_plan() -> LaunchPlan:
    """vLLM on two nodes of two GPUs each: the head (stage 0) up when it runs, then the other node."""
    ready = (ReadyCheck("running"),)
    commands = tuple(
        NodeCommand(host, rank, f"vllm-node{rank}", "worker", rank, ("vllm", "serve", "m"), (), (0, 1), ready)
        for rank, host in enumerate(("gpu-a", "gpu-b"))
    )
    return LaunchPlan(
        "ds32", "vllm", "m", "gpu-a", "10.0.0.1", commands, (), "multi-node-mp",
        serving_url="http://10.0.0.1:8000/v1", restart_as_whole=True, planned=PLANNED,
    )  # fmt: skip


def launched_elsewhere(recorder: StoreRecorder | None = None, fleet: FakeFleet | None = None) -> FakeFleet:
    """Agents running DEPLOYMENT, launched by a registry that is gone since (`meshdeck launch`, a console
    before a restart), which recorded it with `recorder`."""
    fleet = fleet or FakeFleet()
    launcher = DeployService(fleet, recorder=recorder, poll_s=0.01)
    launcher.launch(two_node_plan(), deployment_id=DEPLOYMENT)
    launcher.close()
    return fleet


class Events:
    """A registry subscriber: every event, and a wait for one that matches (no sleeping)."""

    def __init__(self) -> None:
        self.seen: list[Any] = []
        self._condition = threading.Condition()

    def __call__(self, event: Any) -> None:
        with self._condition:
            self.seen.append(event)
            self._condition.notify_all()

    def wait_for(self, matches: Any, timeout: float = 10.0) -> Any:
        with self._condition:
            found = self._condition.wait_for(lambda: next((e for e in self.seen if matches(e)), None), timeout)
        assert found is not None, f"no such event among {self.seen}"
        return found


def test_a_restarted_console_adopts_a_deployment_with_the_plan_it_was_launched_with(db: Database) -> None:
    fleet = FakeFleet()
    launcher = DeployService(fleet, recorder=StoreRecorder(db), poll_s=0.01)
    launched = launcher.launch(two_node_plan(), deployment_id=DEPLOYMENT)
    launcher.close()  # the console that launched it is gone; the deployment runs on

    restarted = DeployService(fleet, recorder=StoreRecorder(db))
    (found,) = restarted.survey(["gpu-a", "gpu-b"]).deployments
    restarted.close()

    assert found.adopted and not launched.adopted
    assert (found.id, found.name, found.engine, found.state) == (DEPLOYMENT, "ds32", "vllm", "running")
    assert found.serving_url == "http://10.0.0.1:8000/v1" and found.started_at == launched.started_at
    assert found.planned == launched.planned and found.planned is not None
    assert found.planned.startup["kv_cache_tokens"] == 418_304 and found.planned.startup["weights_gib"] == 80.5
    assert planned_gpu_memory([found]) == {(h, g): float(120 * GIB) for h in ("gpu-a", "gpu-b") for g in (0, 1)}
    assert [(w.host, w.command, w.state) for w in found.workers] == [
        ("gpu-a", "vllm-node0", "running"),
        ("gpu-b", "vllm-node1", "running"),
    ]


def test_the_cli_lists_a_found_deployment_with_its_planned_numbers(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import contextlib

    from meshdeck.cli import main
    from meshdeck.commands import deployments
    from meshdeck.services.deployments import hosts as deploy_hosts

    fleet = launched_elsewhere(StoreRecorder(db))
    monkeypatch.setattr(deployments, "_fleet", lambda: contextlib.nullcontext(fleet))
    monkeypatch.setattr(deploy_hosts, "reach", lambda *_args: {})

    code = main(["--db", str(tmp_path / "meshdeck.db"), "deployments", "list", "--json", "--hosts", "gpu-a,gpu-b"])

    out, err = capsys.readouterr()
    assert code == 0, err
    (listed,) = json.loads(out)["deployments"]
    assert listed["id"] == DEPLOYMENT and listed["adopted"] is True
    assert listed["planned"]["startup"]["kv_cache_tokens"] == 418_304
    assert listed["planned"]["gpu_memory_bytes"] == 120 * GIB


def test_a_worker_event_of_a_deployment_started_elsewhere_adopts_it_at_once(db: Database) -> None:
    fleet = FakeFleet()
    registry = DeployService(fleet, recorder=StoreRecorder(db))
    events = Events()
    registry.subscribe(events)
    launched_elsewhere(fleet=fleet)  # `meshdeck launch` on the same agents, recorded in no store here

    found = registry.get(DEPLOYMENT)
    assert found.adopted and found.state == "running" and len(found.workers) == 2
    assert found.planned is None  # never recorded in this store: no prediction to show
    assert events.seen[-1] == DeploymentChanged(found)
    assert not [call for call in fleet.calls if call[1] == "workers.list"]  # no survey was needed
    registry.close()


def test_every_change_is_published_in_order_and_the_last_is_the_current_state(db: Database) -> None:
    fleet = FakeFleet()
    registry = DeployService(fleet, recorder=StoreRecorder(db), poll_s=0.01)
    events = Events()
    registry.subscribe(events)
    snapshot = registry.launch(two_node_plan(), deployment_id=DEPLOYMENT, whole_restarts=0)
    fleet.crash("gpu-b", worker_id(snapshot.id, "vllm-node1"))
    events.wait_for(lambda e: isinstance(e, DeploymentChanged) and e.snapshot.state == "failed")

    states = [e.snapshot.state for e in events.seen if isinstance(e, DeploymentChanged)]
    assert states[0] == "starting" and "running" in states and states[-1] == "failed"
    assert states.index("running") < states.index("degraded") < states.index("failed")
    assert events.seen[-1].snapshot == registry.get(snapshot.id)
    registry.close()


def test_a_host_that_connects_is_surveyed_and_what_runs_there_adopted() -> None:
    fleet = FakeFleet()
    for stage, host in enumerate(("gpu-a", "gpu-b")):
        wid = worker_id(DEPLOYMENT, f"vllm-node{stage}")
        fleet.workers[(host, wid)] = {"id": wid, "name": worker_name(DEPLOYMENT, stage, f"vllm-node{stage}"),
                                      "state": "running", "restarts": 0, "started_at": 1000.0 + stage}  # fmt: skip
    registry = DeployService(fleet, survey_on_connect=True)
    events = Events()
    registry.subscribe(events)
    for callback in list(fleet._subscribers):
        callback(HostStateChanged("gpu-b", "connected"))

    changed = events.wait_for(lambda e: isinstance(e, DeploymentChanged))
    assert changed.snapshot.id == DEPLOYMENT and [w.host for w in changed.snapshot.workers] == ["gpu-b"]
    assert [(host, method) for host, method, _ in fleet.calls] == [("gpu-b", "workers.list")]
    registry.close()


def test_an_adopted_deployment_follows_its_parts_and_is_never_restarted_from_here() -> None:
    fleet = launched_elsewhere()
    registry = DeployService(fleet)
    registry.survey(["gpu-a", "gpu-b"])
    before = len(fleet.calls)

    fleet.crash("gpu-b", worker_id(DEPLOYMENT, "vllm-node1"))

    after = registry.get(DEPLOYMENT)
    assert after.state == "degraded" and [w.state for w in after.workers] == ["running", "failed"]
    assert fleet.calls[before:] == []  # no restart, no stop: that is its launcher's policy
    registry.close()


def test_logs_give_each_part_its_last_lines_escaped_and_name_a_part_that_cannot_be_read() -> None:
    fleet = FakeFleet()
    registry = DeployService(fleet, poll_s=0.01)
    registry.launch(two_node_plan(), deployment_id=DEPLOYMENT)
    fleet.logs[worker_id(DEPLOYMENT, "vllm-node0")] = "".join(f"line {n}\n" for n in range(100)) + "\x1b[2Jhidden\n"
    answer = fleet.call

    def call(host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        if host == "gpu-b" and method == "workers.logs":
            raise ConnectionError("gpu-b: connection lost")
        return answer(host, method, params, timeout)

    fleet.call = call  # type: ignore[method-assign]
    head, other = registry.logs(DEPLOYMENT, lines=3)

    assert head.text == "line 98\nline 99\n\\x1b[2Jhidden" and not head.error
    assert other.worker.host == "gpu-b" and other.text == "" and "connection lost" in other.error
    (only,) = registry.logs(DEPLOYMENT, "vllm-node0", lines=1)
    assert only.text == "\\x1b[2Jhidden"
    registry.close()


def test_stop_is_one_way_for_launched_and_adopted_deployments(db: Database) -> None:
    fleet = launched_elsewhere(StoreRecorder(db))
    registry = DeployService(fleet, recorder=StoreRecorder(db))
    registry.survey(["gpu-a", "gpu-b"])
    said: list[str] = []

    outcome = registry.stop(DEPLOYMENT, grace_s=1, on_part=lambda part: said.append(f"{part.worker.host}"))

    assert said == ["gpu-b", "gpu-a"] and outcome.record_closed and not outcome.failures
    assert outcome.snapshot.state == "stopped" == registry.get(DEPLOYMENT).state
    assert {w.state for w in outcome.snapshot.workers} == {"stopped"}
    registry.close()


def _watching(registry: DeployService) -> tuple[DeployService, Events]:
    events = Events()
    registry.subscribe(events)
    return registry, events


def test_a_watched_log_comes_as_its_tail_then_as_its_new_text_until_unwatched() -> None:
    fleet = FakeFleet()
    registry, events = _watching(DeployService(fleet, poll_s=0.01, log_poll_s=0.01))
    registry.launch(two_node_plan(), deployment_id=DEPLOYMENT)
    wid = worker_id(DEPLOYMENT, "vllm-node0")
    fleet.logs[wid] = "".join(f"line {n}\n" for n in range(10))

    unwatch = registry.watch_log(DEPLOYMENT, "vllm-node0", lines=2)
    first = events.wait_for(lambda e: getattr(e, "reset", False))
    assert (first.deployment_id, first.command, first.text) == (DEPLOYMENT, "vllm-node0", "line 8\nline 9\n")
    fleet.logs[wid] += "more\r\n\x07bell\n"
    more = events.wait_for(lambda e: getattr(e, "text", "").startswith("more"))
    assert more.text == "more\n\\x07bell\n" and not more.reset
    assert registry.watched_logs() == [(DEPLOYMENT, "vllm-node0")]

    unwatch()
    assert registry.watched_logs() == []
    registry.close()


def test_a_log_read_once_ends_its_watch_after_the_tail() -> None:
    fleet = FakeFleet()
    registry, events = _watching(DeployService(fleet, poll_s=0.01, log_poll_s=0.01))
    registry.launch(two_node_plan(), deployment_id=DEPLOYMENT)
    fleet.logs[worker_id(DEPLOYMENT, "vllm-node1")] = "ready\n"

    registry.watch_log(DEPLOYMENT, "vllm-node1", follow=False)

    assert events.wait_for(lambda e: getattr(e, "reset", False)).text == "ready\n"
    assert registry.watched_logs() == []
    registry.close()


def _snapshot_ids(snapshots: list[DeploymentSnapshot]) -> list[str]:
    return [s.id for s in snapshots]


def test_a_survey_names_the_hosts_that_could_not_be_asked_and_lists_the_rest(db: Database) -> None:
    fleet = launched_elsewhere(StoreRecorder(db))
    registry = DeployService(fleet, recorder=StoreRecorder(db))

    survey = registry.survey(["gpu-a"], unreachable={"gpu-b": "gpu-b: connection refused"})

    assert _snapshot_ids(survey.deployments) == [DEPLOYMENT]
    assert survey.unanswered == {"gpu-b": "gpu-b: connection refused"}
    outcome = registry.stop(DEPLOYMENT, grace_s=1)  # its stored plan has a part on gpu-b, which was not asked
    assert outcome.unsure_hosts == ("gpu-b",) and not outcome.record_closed
    registry.close()
