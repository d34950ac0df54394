"""A deployment's logs, read once for the CLI and the console alike: the last lines of each part, asked of
its agent as a tail (however long the log grew), escaped where they are printed."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from deploy_fleet import FakeFleet
from meshdeck.services.deployments.model import worker_name

DEPLOYMENT = "ds32-0101010101-abcd"
WID = f"{DEPLOYMENT}.vllm-node0"


def _one_part_fleet(log: str) -> FakeFleet:
    fleet = FakeFleet()
    fleet.workers[("gpu-a", WID)] = {"id": WID, "name": worker_name(DEPLOYMENT, 0, "vllm-node0"), "state": "running",
                                     "restarts": 0, "started_at": 1000.0}  # fmt: skip
    fleet.logs[WID] = log
    return fleet


def _long_log(megabytes: int) -> str:
    line = "INFO engine step: " + "x" * 100 + "\n"
    lines = [line] * (megabytes * 1024 * 1024 // len(line))
    return "".join(lines) + "".join(f"the last line {n}\n" for n in range(3))


def test_deployments_logs_of_a_log_over_8_mib_shows_its_last_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Before, the log was read from its start and cut at 8 MiB, so a vLLM that had run for a while showed
    lines from the middle of its log, not its end."""
    from meshdeck.cli import main
    from meshdeck.commands import deployments
    from meshdeck.services.deployments import hosts as deploy_hosts

    fleet = _one_part_fleet(_long_log(9))
    monkeypatch.setattr(deployments, "_fleet", lambda: contextlib.nullcontext(fleet))
    monkeypatch.setattr(deploy_hosts, "reach", lambda *_args: {})
    code = main(["--db", str(tmp_path / "m.db"), "deployments", "logs", DEPLOYMENT, "--hosts", "gpu-a", "--lines", "3"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.splitlines()[-3:] == ["the last line 0", "the last line 1", "the last line 2"]
