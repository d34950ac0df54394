"""What the agents say reaches the launch's screens escaped and bounded: pre-flight reasons, the reason a
launch failed (the crashed part's log tail keeps its lines), the reasons `deployments list` shows."""

from __future__ import annotations

import re
from typing import Any

import pytest
from deploy_fleet import FakeFleet
from meshdeck.launch import preflight_rules as rules
from meshdeck.launch.plan import LaunchPlan, NodeCommand, ReadyCheck
from meshdeck.services.deployments.model import worker_id, worker_name
from meshdeck.services.deployments.registry import DeployService, LaunchFailed

ESCAPES = "\x1b[2J\x1b[H\r"
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # all but newline


def test_preflight_reasons_quoting_the_agents_are_escaped_and_bounded() -> None:
    answers = {
        "gpu-a": {"vllm": f"0.11{ESCAPES}", "torch": "2.9", "nccl": "2.27"},
        "gpu-b": {"vllm": "0.11", "torch": "2.9", "nccl": "2.27" + "9" * 5000},
        "gpu-c": {"error": f"python3: not found{ESCAPES}"},
    }
    results = rules.versions(["vllm", "torch", "nccl"], answers)
    assert results and all(not RAW_CONTROL.search(r.reason) and "\n" not in r.reason for r in results)
    assert all(len(r.reason) < 700 for r in results)
    assert any("0.11\\x1b[2J\\x1b[H\\r" in r.reason for r in results)


def test_a_crash_while_starting_is_reported_escaped_with_its_log_lines_kept() -> None:
    fleet = FakeFleet()

    def die(host: str, worker: dict[str, Any]) -> None:
        fleet.logs[worker["id"]] += f"INFO loading\n\x1b[31mRuntimeError{ESCAPES}: boom\n"
        worker.update(state="failed", exit_code=None, signal=None, reason=f"killed{ESCAPES}")
        fleet.emit_worker(host, worker)

    fleet.on_start["job"] = die
    command = NodeCommand(
        "gpu-a", 0, "job", "head", 0, ("sleep", "99"), (), ready=(ReadyCheck("tcp", port=1, timeout_s=30),)
    )
    plan = LaunchPlan("job", "torch", "m", "gpu-a", "10.0.0.1", (command,), (), "torchrun")
    with pytest.raises(LaunchFailed) as failed:
        DeployService(fleet, poll_s=0.01).launch(plan)
    reason = failed.value.snapshot.reason
    assert not RAW_CONTROL.search(reason), repr(reason)
    assert reason.splitlines() == [
        "job on gpu-a killed\\x1b[2J\\x1b[H\\r while starting",
        "INFO loading",
        "\\x1b[31mRuntimeError\\x1b[2J\\x1b[H",  # a CR ends a line there, as in `deployments logs`
        ": boom",
    ]


def test_reasons_found_on_the_agents_are_escaped_and_cut() -> None:
    deployment = "ds32-0101010101-abcd"
    fleet = FakeFleet()
    wid = worker_id(deployment, "vllm-node0")
    fleet.workers[("gpu-a", wid)] = {"id": wid, "state": "failed", "name": worker_name(deployment, 0, "vllm-node0"),
                                     "reason": ESCAPES * 10_000}  # fmt: skip
    registry = DeployService(fleet)
    (found,) = registry.survey(["gpu-a"]).deployments
    registry.close()
    reason = found.workers[0].reason
    assert not RAW_CONTROL.search(reason) and len(reason) < 3000 and reason.endswith("(80000 characters)")
