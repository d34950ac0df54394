"""Pre-flight belongs to the launch (DESIGN.md §6): `DeployService.launch_profile` runs it before anything
starts, a failed check blocks the launch unless someone overrides it, and the deployment's events record
the report and who overrode or skipped it — for the console and `meshdeck launch` alike.

Before, the console launched without pre-flight and the CLI refused or forced on its own, recording
nothing of either."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
from deploy_fleet import FakeFleet, Recorder
from meshdeck.launch.plan import LaunchPlan, NodeCommand, ReadyCheck
from meshdeck.launch.preflight_rules import CheckResult, PreflightReport
from meshdeck.services.deployments import registry as registry_module
from meshdeck.services.deployments.preflight_gate import FORCE_CLI, PreflightBlocked
from meshdeck.services.deployments.records import StoreRecorder
from meshdeck.services.deployments.registry import DeployService
from meshdeck.services.deployments.targets import PreparedLaunch
from meshdeck.store.database import open_database
from meshdeck.store.deployments import get_deployment
from meshdeck.store.events import list_events

FAILED = PreflightReport(
    (
        CheckResult("ports free", "gpu-a", False, "8000 (vLLM API) is taken"),
        CheckResult("clocks", None, True, "within 0.1 s"),
    )
)
PASSED = PreflightReport((CheckResult("clocks", None, True, "within 0.1 s"),))
DEPLOYMENT = "ds32-0101010101-abcd"


def _prepared() -> PreparedLaunch:
    command = NodeCommand(
        "gpu-a", 0, "vllm-node0", "head", 0, ("vllm", "serve", "m"), (), ready=(ReadyCheck("running"),)
    )
    return PreparedLaunch(
        LaunchPlan("ds32", "vllm", "m", "gpu-a", "10.0.0.1", (command,), (), "single-node"), {}, False
    )


class Checks:
    """Stands in for the agents' pre-flight answers: the report the checks give, and how many times they ran."""

    def __init__(self) -> None:
        self.report = FAILED
        self.ran = 0

    def __call__(self, caller: Any, plan: LaunchPlan, profile: Any, **_: Any) -> PreflightReport:
        self.ran += 1
        return self.report


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> Checks:
    scripted = Checks()
    monkeypatch.setattr(registry_module, "run_preflight", scripted)
    return scripted


def test_a_failed_check_blocks_the_launch_and_starts_nothing(checks: Checks) -> None:
    fleet, recorder = FakeFleet(), Recorder()
    service = DeployService(fleet, recorder=recorder, poll_s=0.01)
    heard: list[PreflightReport] = []
    with pytest.raises(PreflightBlocked) as blocked:
        service.launch_profile(object(), _prepared(), deployment_id=DEPLOYMENT, on_preflight=heard.append)  # type: ignore[arg-type]
    assert blocked.value.report is FAILED and heard == [FAILED]
    assert "ports free on gpu-a: 8000 (vLLM API) is taken" in str(blocked.value)
    assert fleet.started() == [] and recorder.started == [] and service.list() == []
    service.close()


@pytest.mark.parametrize(
    ("report", "kwargs", "kind", "said"),
    [
        (FAILED, {"override": "console: Launch anyway (confirmed)"}, "preflight_overridden", "ports free on gpu-a"),
        (PASSED, {}, "preflight_passed", "1 passed, 0 failed"),
        (FAILED, {"skip_preflight": "meshdeck launch --skip-preflight"}, "preflight_skipped", "--skip-preflight"),
    ],
)
def test_what_the_launch_went_ahead_with_is_recorded_in_its_events(
    checks: Checks, report: PreflightReport, kwargs: dict[str, str], kind: str, said: str
) -> None:
    checks.report = report
    fleet, recorder = FakeFleet(), Recorder()
    service = DeployService(fleet, recorder=recorder, poll_s=0.01)
    snapshot = service.launch_profile(object(), _prepared(), deployment_id=DEPLOYMENT, **kwargs)  # type: ignore[arg-type]
    assert snapshot.state == "running" and fleet.started() == [("gpu-a", "vllm-node0")]
    events = [(kind, message) for deployment, kind, message in recorder.events if deployment == DEPLOYMENT]
    assert events[0][0] == kind and said in events[0][1], events
    assert ("skip_preflight" in kwargs) == (checks.ran == 0)
    service.close()


def test_an_override_launches_the_report_it_confirmed_without_asking_again(checks: Checks) -> None:
    checks.report = PASSED  # what a new pre-flight would say now: not what the operator confirmed
    fleet, recorder = FakeFleet(), Recorder()
    service = DeployService(fleet, recorder=recorder, poll_s=0.01)
    service.launch_profile(object(), _prepared(), deployment_id=DEPLOYMENT, override="who", report=FAILED)  # type: ignore[arg-type]
    assert checks.ran == 0
    assert next(k for d, k, _m in recorder.events if d == DEPLOYMENT) == "preflight_overridden"
    service.close()


def _cli_args(**flags: bool) -> argparse.Namespace:
    return argparse.Namespace(**{"json": True, "wait": False, "force": False, "skip_preflight": False, **flags})


def test_meshdeck_launch_refuses_a_failed_preflight_and_force_is_stored_in_the_deployments_events(
    checks: Checks, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from meshdeck.commands.launch import _launch

    fleet = FakeFleet()
    with open_database(tmp_path / "m.db") as db:
        recorder = StoreRecorder(db, profile_name="ds32")
        code = _launch(fleet, object(), _prepared(), DEPLOYMENT, _cli_args(), recorder)  # type: ignore[arg-type]
        out, err = capsys.readouterr()
        assert code == 1 and fleet.started() == []
        assert json.loads(out)["launched"] is False and "FAIL ports free" in err and "--force" in err

        code = _launch(fleet, object(), _prepared(), DEPLOYMENT, _cli_args(force=True), recorder)  # type: ignore[arg-type]
        assert code == 0 and fleet.started() == [("gpu-a", "vllm-node0")]
        record = get_deployment(db, DEPLOYMENT)
        events = {e.subject: e.data for e in list_events(db, deployment_id=record.id, kinds=["deployment"])}
    overridden = events["preflight_overridden"]
    assert overridden["by"] == FORCE_CLI and overridden["passed"] is False
    assert "8000 (vLLM API) is taken" in overridden["message"]
    assert [r["check"] for r in overridden["results"] if not r["passed"]] == ["ports free"]
