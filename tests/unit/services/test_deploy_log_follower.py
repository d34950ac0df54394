"""Worker logs read through the agents stay bounded in memory however the worker writes (no newline for
megabytes), and a malformed `workers.logs` answer is one error naming the host and the field, never a
traceback or a ready check that waits until its timeout."""

from __future__ import annotations

import contextlib
import tracemalloc
from typing import Any

import pytest
from deploy_fleet import FakeFleet
from meshdeck.launch.plan import LaunchPlan, NodeCommand, ReadyCheck
from meshdeck.services.deployments.registry import DeployService, LaunchFailed
from meshdeck.services.deployments.waits import LogFollower, read_log
from meshdeck_agent.protocol import ProtocolError

CHUNK = 1 << 20


def test_a_log_without_newlines_is_followed_in_bounded_memory_and_still_matched() -> None:
    sent = {"offset": 0}

    def call(host: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if params["offset"] >= 32 * CHUNK:
            return {"data": "", "offset": params["offset"], "size": 32 * CHUNK, "start": params["offset"]}
        data = ("x" * (CHUNK - 5)) + "READY"  # one 32 MiB line, a match in each MiB of it
        sent["offset"] = params["offset"] + len(data)
        return {"data": data, "offset": sent["offset"], "size": 32 * CHUNK, "start": params["offset"]}

    follower = LogFollower(call)
    follower.follow("gpu-a", "w")
    follower.watch("READY")
    tracemalloc.start()
    try:
        for _ in range(4):  # 8 reads a poll
            follower.poll("w")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sent["offset"] == 32 * CHUNK
    assert peak < 8 * CHUNK, f"peak {peak / CHUNK:.1f} MiB for a 32 MiB line"  # a read or two, not the line
    assert follower.count("READY", ["w"]) == 32


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        (["data"], "workers.logs: must be an object"),
        ({"data": 5, "offset": 1}, "workers.logs.data"),
        ({"data": "x", "offset": "1"}, "workers.logs.offset"),
        ({"data": "x", "offset": -1}, "workers.logs.offset"),
    ],
)
def test_a_malformed_logs_answer_is_one_error_naming_the_field(answer: Any, named: str) -> None:
    with pytest.raises(ProtocolError, match=named):
        read_log(lambda *_: answer, "gpu-a", "w")


def test_a_malformed_logs_answer_fails_a_launch_waiting_for_a_log_line_at_once() -> None:
    fleet = FakeFleet()
    answer = fleet.call

    def call(host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        return {"data": None, "offset": []} if method == "workers.logs" else answer(host, method, params, timeout)

    fleet.call = call  # type: ignore[method-assign]
    command = NodeCommand(
        "gpu-a", 0, "job", "head", 0, ("sleep", "99"), (), ready=(ReadyCheck("log", pattern="up", timeout_s=600),)
    )
    plan = LaunchPlan("job", "torch", "m", "gpu-a", "10.0.0.1", (command,), (), "torchrun")
    with pytest.raises(LaunchFailed) as failed:
        DeployService(fleet, poll_s=0.01).launch(plan)
    assert failed.value.snapshot.reason.startswith(
        "job on gpu-a: malformed answer: workers.logs.data: must be a string"
    )


def test_deployments_logs_names_a_part_whose_log_cannot_be_read_and_prints_the_others(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    from meshdeck.cli import main
    from meshdeck.commands import deployments
    from meshdeck.services.deployments import hosts as deploy_hosts
    from meshdeck.services.deployments.model import worker_name

    fleet = FakeFleet()
    for host, command in (("gpu-a", "vllm-node0"), ("gpu-b", "vllm-node1")):
        wid = f"ds32-0101010101-abcd.{command}"
        fleet.workers[(host, wid)] = {"id": wid, "name": worker_name("ds32-0101010101-abcd", 0, command),
                                      "state": "running", "restarts": 0}  # fmt: skip
    fleet.logs["ds32-0101010101-abcd.vllm-node0"] = "serving\n"
    answer = fleet.call

    def call(host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        if host == "gpu-b" and method == "workers.logs":
            return {"data": ["not", "text"], "offset": 3}
        return answer(host, method, params, timeout)

    fleet.call = call  # type: ignore[method-assign]
    monkeypatch.setattr(deployments, "_fleet", lambda: contextlib.nullcontext(fleet))
    monkeypatch.setattr(deploy_hosts, "reach", lambda *_args: {})
    code = main(["--db", str(tmp_path / "m.db"), "deployments", "logs", "ds32", "--hosts", "gpu-a,gpu-b"])
    out, err = capsys.readouterr()
    assert code == 1 and "serving" in out
    assert "vllm-node1 on gpu-b: cannot read its log: workers.logs.data: must be a string" in err
