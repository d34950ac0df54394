"""Stopping a deployment, one way for every deployment (launched here or found on the agents) and every
caller (the console, `meshdeck deployments stop`): each part in reverse start order; a part that cannot be
stopped is named and keeps the deployment open (not "stopped", its record not closed, Stop still offered)."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from deploy_fleet import FakeFleet, Recorder
from meshdeck.launch.plan import LaunchPlan, NodeCommand, ReadyCheck
from meshdeck.services.deployments.model import worker_id, worker_name
from meshdeck.services.deployments.registry import DeployService
from meshdeck.store.database import open_database
from meshdeck.store.deployments import DeploymentNode, get_deployment, record_deployment_started

DEPLOYMENT = "ds32-0101010101-abcd"


def one_part_plan() -> LaunchPlan:
    command = NodeCommand(
        "gpu-a", 0, "vllm-node0", "head", 0, ("vllm", "serve", "m"), (), ready=(ReadyCheck("running"),)
    )
    return LaunchPlan("ds32", "vllm", "m", "gpu-a", "10.0.0.1", (command,), (), "single-node")


def _unreachable_on(fleet: FakeFleet, host: str, method: str) -> None:
    answer = fleet.call

    def call(to: str, what: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        if to == host and what == method:
            raise ConnectionError(f"{host}: connection lost")
        return answer(to, what, params, timeout)

    fleet.call = call  # type: ignore[method-assign]


def test_a_launched_deployment_whose_part_cannot_be_stopped_is_not_recorded_stopped() -> None:
    """Before, the deployment was marked stopped and its record closed although a part still ran: Stop was
    greyed out and the history said "stopped"."""
    fleet = FakeFleet()
    recorder = Recorder()
    service = DeployService(fleet, recorder=recorder, poll_s=0.01)
    snapshot = service.launch(one_part_plan())
    _unreachable_on(fleet, "gpu-a", "workers.stop")

    service.stop(snapshot.id, grace_s=1)

    after = service.get(snapshot.id)
    assert after.state != "stopped" and not after.final
    assert "vllm-node0 on gpu-a" in after.reason and "connection lost" in after.reason
    assert recorder.finished == []
    service.close()


def _found_on_two_hosts(fleet: FakeFleet) -> None:
    for stage, host in enumerate(("gpu-a", "gpu-b")):
        command = f"vllm-node{stage}"
        wid = worker_id(DEPLOYMENT, command)
        fleet.workers[(host, wid)] = {"id": wid, "name": worker_name(DEPLOYMENT, stage, command), "state": "running",
                                      "restarts": 0, "started_at": 1000.0 + stage}  # fmt: skip


def test_deployments_stop_closes_the_record_when_only_a_host_it_never_ran_on_is_unreachable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The stored plan says where a deployment runs. Before, any unreachable host left the record open, so
    a deployment stopped whole stayed "running" in the history for as long as an unrelated host was down."""
    from meshdeck.cli import main
    from meshdeck.commands import deployments
    from meshdeck.services.deployments import hosts as deploy_hosts

    fleet = FakeFleet()
    _found_on_two_hosts(fleet)
    path = tmp_path / "m.db"
    with open_database(path) as database:
        nodes = [DeploymentNode(h, f"vllm-node{i}", "head", i, ("vllm",), ()) for i, h in enumerate(("gpu-a", "gpu-b"))]
        record_deployment_started(database, key=DEPLOYMENT, name="ds32", engine="vllm", nodes=nodes, started_at=1000.0)
    monkeypatch.setattr(deployments, "_fleet", lambda: contextlib.nullcontext(fleet))
    monkeypatch.setattr(deploy_hosts, "reach", lambda *_args: {"gpu-c": "gpu-c: connection refused"})

    code = main(["--db", str(path), "deployments", "stop", DEPLOYMENT, "--hosts", "gpu-a,gpu-b,gpu-c", "--yes"])

    out, err = capsys.readouterr()
    assert code == 0, err  # stopped whole: the host that could not be asked runs none of it (before: 3)
    assert "meshdeck: warning: gpu-c could not be asked: gpu-c: connection refused" in err
    assert "vllm-node1 on gpu-b: stopped" in out and "vllm-node0 on gpu-a: stopped" in out
    with open_database(path) as database:
        record = get_deployment(database, DEPLOYMENT)
    assert record.state == "stopped" and record.finished_at is not None
    assert "record stays open" not in err


def test_deployments_stop_keeps_the_record_open_when_a_host_of_its_plan_is_unreachable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from meshdeck.cli import main
    from meshdeck.commands import deployments
    from meshdeck.services.deployments import hosts as deploy_hosts

    fleet = FakeFleet()
    _found_on_two_hosts(fleet)
    path = tmp_path / "m.db"
    with open_database(path) as database:
        nodes = [
            DeploymentNode(h, f"n{i}", "head", i, ("vllm",), ()) for i, h in enumerate(("gpu-a", "gpu-b", "gpu-c"))
        ]
        record_deployment_started(database, key=DEPLOYMENT, name="ds32", engine="vllm", nodes=nodes, started_at=1000.0)
    monkeypatch.setattr(deployments, "_fleet", lambda: contextlib.nullcontext(fleet))
    monkeypatch.setattr(deploy_hosts, "reach", lambda *_args: {"gpu-c": "gpu-c: connection refused"})

    code = main(["--db", str(path), "deployments", "stop", DEPLOYMENT, "--hosts", "gpu-a,gpu-b,gpu-c", "--yes"])

    _out, err = capsys.readouterr()
    assert code == 3
    assert f"{DEPLOYMENT} may have parts on gpu-c; its record stays open" in err
    with open_database(path) as database:
        assert get_deployment(database, DEPLOYMENT).finished_at is None


def test_a_part_that_dies_while_starting_fails_the_launch_even_when_its_log_cannot_be_read() -> None:
    from meshdeck.services.deployments.registry import LaunchFailed

    fleet = FakeFleet()
    fleet.on_start["vllm-node0"] = lambda host, worker: fleet.crash(host, worker["id"], signal=None, exit_code=1)
    _unreachable_on(fleet, "gpu-a", "workers.logs")
    service = DeployService(fleet, poll_s=0.01)
    never_open = ReadyCheck("tcp", port=1, timeout_s=60)  # only the crash ends the wait
    plan = one_part_plan()
    plan = replace(plan, commands=(replace(plan.commands[0], ready=(never_open,)),))
    with pytest.raises(LaunchFailed) as failed:
        service.launch(plan)
    assert failed.value.snapshot.reason == "vllm-node0 on gpu-a exited with status 1 while starting"
    service.close()


def _stored_two_host_deployment(fleet: FakeFleet, path: Path) -> None:
    _found_on_two_hosts(fleet)
    with open_database(path) as database:
        nodes = [DeploymentNode(h, f"vllm-node{i}", "head", i, ("vllm",), ()) for i, h in enumerate(("gpu-a", "gpu-b"))]
        record_deployment_started(database, key=DEPLOYMENT, name="ds32", engine="vllm", nodes=nodes, started_at=1000.0)


class _Terminal:
    """stdin as a terminal where the operator types `answer`."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def isatty(self) -> bool:
        return True

    def readline(self, limit: int = -1) -> str:
        return self.answer


def test_deployments_stop_from_a_script_without_yes_stops_nothing_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Before, `deployments stop` asked nothing: a typo'd or reused name in a script stopped a serving engine."""
    from meshdeck.cli import main
    from meshdeck.commands import deployments
    from meshdeck.services.deployments import hosts as deploy_hosts

    fleet = FakeFleet()
    _stored_two_host_deployment(fleet, tmp_path / "m.db")
    monkeypatch.setattr(deployments, "_fleet", lambda: contextlib.nullcontext(fleet))
    monkeypatch.setattr(deploy_hosts, "reach", lambda *_args: {})
    monkeypatch.setattr("sys.stdin", _Terminal("y\n"))
    monkeypatch.setattr(_Terminal, "isatty", lambda self: False)  # a pipe, /dev/null, cron

    code = main(["--db", str(tmp_path / "m.db"), "deployments", "stop", DEPLOYMENT, "--hosts", "gpu-a,gpu-b"])

    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("meshdeck: error: --yes: ") and "stdin is not a terminal" in err and "add --yes" in err
    assert fleet.calls == []  # refused before any host was asked


@pytest.mark.parametrize(("answer", "stopped"), [("n\n", False), ("", False), ("yes\n", True)])
def test_deployments_stop_on_a_terminal_asks_naming_its_parts_hosts_and_what_is_dropped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, answer: str, stopped: bool
) -> None:
    from meshdeck.cli import main
    from meshdeck.commands import deployments
    from meshdeck.services.deployments import hosts as deploy_hosts

    fleet = FakeFleet()
    _stored_two_host_deployment(fleet, tmp_path / "m.db")
    monkeypatch.setattr(deployments, "_fleet", lambda: contextlib.nullcontext(fleet))
    monkeypatch.setattr(deploy_hosts, "reach", lambda *_args: {})
    monkeypatch.setattr("sys.stdin", _Terminal(answer))

    code = main(["--db", str(tmp_path / "m.db"), "deployments", "stop", DEPLOYMENT, "--hosts", "gpu-a,gpu-b"])

    out, err = capsys.readouterr()
    assert err.startswith(f"Stop {DEPLOYMENT} (vllm, running)?")
    assert "2 parts on 2 hosts (gpu-b, gpu-a)" in err
    assert err.index("vllm-node1 on gpu-b (running)") < err.index("vllm-node0 on gpu-a (running)")  # stop order
    assert "in-flight requests are dropped" in err and "Stop it? [y/N]" in err
    assert (fleet.stopped() == [("gpu-b", "vllm-node1"), ("gpu-a", "vllm-node0")]) is stopped
    if stopped:
        assert code == 0 and "vllm-node0 on gpu-a: stopped" in out
    else:
        assert code == 1 and fleet.stopped() == [] and "was not stopped (not confirmed)" in err
