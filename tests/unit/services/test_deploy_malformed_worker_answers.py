"""An agent answering `workers.start` (or sending `worker` events) in a wrong shape fails the launch at once,
naming the host and the bad field, instead of leaving it waiting on a port; a malformed event is ignored
with a warning, never taken for a state."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest
from deploy_fleet import FakeFleet
from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck.launch.plan import LaunchPlan, NodeCommand, ReadyCheck
from meshdeck.remote.events import AgentEvent
from meshdeck.services.deployments.registry import DeployService, LaunchFailed
from meshdeck_agent.protocol import WORKER_STATES, ProtocolError, WorkerRecord

DEPLOYMENT = "job-0101010101-abcd"
WID = f"{DEPLOYMENT}.job"


class MisansweringFleet(FakeFleet):
    """Starts the worker as a real agent would, then answers `workers.start` with `answer`."""

    def __init__(self, answer: Any) -> None:
        super().__init__()
        self.answer = answer

    def call(self, host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        reply = super().call(host, method, params, timeout)
        return self.answer if method == "workers.start" else reply


def one_part_plan(wait_s: float = 3.0) -> LaunchPlan:
    command = NodeCommand(
        "gpu-a", 0, "job", "head", 0, ("sleep", "99"), (), ready=(ReadyCheck("tcp", port=1, timeout_s=wait_s),)
    )
    return LaunchPlan("job", "torch", "m", "gpu-a", "10.0.0.1", (command,), (), "torchrun")


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        ([], "workers.start: must be an object"),
        ("running", "workers.start: must be an object"),
        ({"ok": True}, "workers.start.id"),
        ({"id": WID, "state": 5}, "workers.start.state"),
        ({"id": WID, "state": "zombie"}, "workers.start.state"),
        ({"id": WID, "state": "running", "restarts": "many"}, "workers.start.restarts"),
        ({"id": WID, "state": "running", "exit_code": True}, "workers.start.exit_code"),
        ({"id": "someone-else", "state": "running"}, "workers.start.id: answered for worker 'someone-else'"),
    ],
)
def test_a_malformed_start_answer_fails_the_launch_at_once_naming_the_host(answer: Any, named: str) -> None:
    fleet = MisansweringFleet(answer)
    with pytest.raises(LaunchFailed) as failed:
        DeployService(fleet, poll_s=0.01).launch(one_part_plan(), deployment_id=DEPLOYMENT)
    snapshot = failed.value.snapshot
    assert snapshot.state == "failed"
    assert snapshot.reason.startswith("job on gpu-a: malformed answer: workers.start"), snapshot.reason
    assert named in snapshot.reason
    assert not [call for call in fleet.calls if call[1] == "checks.tcp_connect"]  # never waited on the port
    assert fleet.stopped() == [("gpu-a", "job")]  # the agent may have started it: it is stopped


@pytest.mark.parametrize(
    "data",
    [
        {"id": WID, "state": "running", "restarts": "x"},
        {"id": WID, "state": ["failed"]},
        {"id": WID, "state": "failed", "signal": "KILL"},
        {"state": "failed"},
    ],
)
def test_a_malformed_worker_event_is_ignored_with_a_warning(data: dict[str, Any], caplog) -> None:
    fleet = FakeFleet()
    fleet.on_start["job"] = lambda host, worker: fleet.open_ports.add(("gpu-a", 1))
    deploy = DeployService(fleet, poll_s=0.01)
    snapshot = deploy.launch(one_part_plan(), deployment_id=DEPLOYMENT)
    assert snapshot.state == "running"
    with caplog.at_level(logging.WARNING, logger="meshdeck.services.deployments.registry"):
        for callback in list(fleet._subscribers):
            callback(AgentEvent("gpu-a", "worker", data))
    after = deploy.get(DEPLOYMENT)
    assert after.state == "running" and after.workers[0].state == "running"
    assert any("gpu-a" in r.getMessage() and "malformed worker event" in r.getMessage() for r in caplog.records)


_AGENT_RECORD = {  # the shape meshdeck_agent.workers.state.WorkerState.to_wire sends
    "id": WID, "name": f"meshdeck:{DEPLOYMENT}:0:job", "state": "exited", "pid": 4242, "exit_code": 0, "signal": None,
    "reason": "exited with code 0", "error": None, "restarts": 1, "started_at": 1764480000.5, "ended_at": 1764480060,
    "argv": ["sleep", "99"], "gpus": [0], "metrics_url": None, "simulated": False, "adopted": False, "log": "/x.log",
}  # fmt: skip
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def test_what_the_agent_sends_decodes_field_for_field() -> None:
    record = WorkerRecord.from_wire(_AGENT_RECORD)
    assert (record.id, record.state, record.pid, record.exit_code, record.restarts) == (WID, "exited", 4242, 0, 1)
    assert (record.started_at, record.ended_at, record.reason) == (1764480000.5, 1764480060.0, "exited with code 0")


@settings(deadline=None, max_examples=500)
@given(overrides=st.dictionaries(st.sampled_from(sorted(_AGENT_RECORD)), _JSON, max_size=4), whole=st.none() | _JSON)
def test_any_answer_is_a_typed_record_or_one_error_naming_the_field(overrides: dict[str, Any], whole: Any) -> None:
    answer = whole if whole is not None else {**_AGENT_RECORD, **overrides}
    try:
        record = WorkerRecord.from_wire(answer, "workers.start")
    except ProtocolError as exc:
        assert exc.message.startswith("workers.start") and len(exc.message) < 300
        return
    assert isinstance(record.id, str) and record.id and record.state in WORKER_STATES
    assert all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in (record.exit_code, record.signal))
    assert isinstance(record.restarts, int) and record.restarts >= 0 and isinstance(record.reason, str)
    assert record.started_at is None or math.isfinite(record.started_at)


def test_a_vllm_startup_event_with_malformed_fields_is_ignored_with_a_warning(caplog) -> None:
    fleet = FakeFleet()
    fleet.on_start["job"] = lambda host, worker: fleet.open_ports.add(("gpu-a", 1))
    deploy = DeployService(fleet, poll_s=0.01)
    deploy.launch(one_part_plan(), deployment_id=DEPLOYMENT)
    with caplog.at_level(logging.WARNING, logger="meshdeck.services.deployments.registry"):
        fleet.emit_log("gpu-a", WID, "vllm_startup", ["not", "fields"])  # type: ignore[arg-type]
        fleet.emit_log("gpu-a", WID, "vllm_startup", {"kv_cache_bytes": 1})
    assert deploy.get(DEPLOYMENT).measured == {WID: {"kv_cache_bytes": 1}}
    assert any("malformed vllm_startup" in r.getMessage() for r in caplog.records)
