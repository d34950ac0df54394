"""`meshdeck deployments logs -f`: each part's last lines, then its new lines as the agent's log grows
(bounded reads, as the console's log tab), until the deployment ends or Ctrl+C — as `tail -f`,
`kubectl logs -f` and `docker compose logs -f` do. Before, there was no -f."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest
from deploy_fleet import FakeFleet, wait_until
from meshdeck.services.deployments.events import DeploymentLogLines
from meshdeck.services.deployments.model import worker_name

DEPLOYMENT = "ds32-0101010101-abcd"


def _fleet_of_two_parts() -> FakeFleet:
    fleet = FakeFleet()
    for stage, host in enumerate(("gpu-a", "gpu-b")):
        command = f"vllm-node{stage}"
        wid = f"{DEPLOYMENT}.{command}"
        fleet.workers[(host, wid)] = {"id": wid, "name": worker_name(DEPLOYMENT, stage, command), "state": "running",
                                      "restarts": 0, "started_at": 1000.0 + stage}  # fmt: skip
        fleet.logs[wid] = f"{command} started\n"
    return fleet


def test_logs_follow_prints_new_lines_as_they_come_and_ends_with_the_deployment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from meshdeck.cli import main
    from meshdeck.commands import deployments
    from meshdeck.services.deployments import hosts as deploy_hosts

    fleet = _fleet_of_two_parts()
    monkeypatch.setattr(deployments, "_fleet", lambda: contextlib.nullcontext(fleet))
    monkeypatch.setattr(deploy_hosts, "reach", lambda *_args: {})
    argv = ["--db", str(tmp_path / "m.db"), "deployments", "logs", DEPLOYMENT, "--hosts", "gpu-a,gpu-b", "-f"]
    result: list[int] = []
    follower = threading.Thread(target=lambda: result.append(main(argv)), daemon=True)
    follower.start()

    def reads(wid: str) -> int:
        return sum(1 for _h, method, params in list(fleet.calls) if method == "workers.logs" and params["id"] == wid)

    head = f"{DEPLOYMENT}.vllm-node0"
    wait_until(lambda: reads(head) >= 2, timeout=20)  # the tail, then reads from where it ended
    fleet.logs[head] += "INFO: 200 OK /v1/completions\x1b[2J\n"
    wait_until(lambda: reads(head) >= 4, timeout=20)
    assert follower.is_alive()  # still following: nothing ended it
    for host, wid in list(fleet.workers):
        worker = fleet.workers[(host, wid)]
        worker.update(state="stopped", reason="stopped by request")
        fleet.emit_worker(host, worker)  # stopped elsewhere: the deployment ends
    follower.join(30)

    assert not follower.is_alive() and result == [0]
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert "vllm-node0 | vllm-node0 started" in lines and "vllm-node1 | vllm-node1 started" in lines
    assert "vllm-node0 | INFO: 200 OK /v1/completions\\x1b[2J" in lines  # new text, escaped
    assert f"meshdeck: {DEPLOYMENT} stopped" in err
    every = [params for _h, method, params in fleet.calls if method == "workers.logs"]
    assert all(0 < (params.get("limit") or 0) <= 512 * 1024 for params in every)  # every read bounded


def test_logs_follow_of_one_part_ends_on_ctrl_c_with_status_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from meshdeck.cli import main
    from meshdeck.commands import deployments
    from meshdeck.services.deployments import hosts as deploy_hosts

    fleet = _fleet_of_two_parts()
    monkeypatch.setattr(deployments, "_fleet", lambda: contextlib.nullcontext(fleet))
    monkeypatch.setattr(deploy_hosts, "reach", lambda *_args: {})
    real_get = deployments.queue.Queue.get
    shown: list[object] = []

    def get(self, block: bool = True, timeout: float | None = None):  # type: ignore[no-untyped-def]
        if shown:
            raise KeyboardInterrupt  # what Ctrl+C raises in the main thread while it waits, once lines were shown
        event = real_get(self, block, timeout)
        if isinstance(event, DeploymentLogLines):
            shown.append(event)
        return event

    monkeypatch.setattr(deployments.queue.Queue, "get", get)
    started = time.monotonic()
    code = main(["--db", str(tmp_path / "m.db"), "deployments", "logs", DEPLOYMENT, "--hosts", "gpu-a,gpu-b",
                 "--command", "vllm-node1", "--follow"])  # fmt: skip
    assert code == 0 and time.monotonic() - started < 30
    out, _err = capsys.readouterr()
    assert "vllm-node1 started" in out.splitlines() and "vllm-node0" not in out  # one part: no prefix
