"""The console's Launch runs the pre-flight inside the launch (as `meshdeck launch` does): a failed check
blocks it, "Launch anyway…" asks first (listing the failed checks) and is recorded in the deployment's
events, and the Pre-flight tab shows the report of the launch it belongs to. Stop asks first, naming the
deployment, its parts and hosts, and that the engines' in-flight requests are dropped.

Before: Launch called `deploy.launch` without pre-flight (a second deployment started on GPUs the first
held and crash-looped), and Stop stopped at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from deploy_fleet import FakeFleet, Recorder
from meshdeck.launch.plan import LaunchPlan, NodeCommand, ReadyCheck
from meshdeck.launch.preflight_rules import CheckResult, PreflightReport
from meshdeck.services.deployments import registry as registry_module
from meshdeck.services.deployments.registry import DeployService
from meshdeck.services.deployments.targets import PreparedLaunch
from meshdeck.ui.views.deployments.view import DeploymentsView
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

FAILED = PreflightReport(
    (
        CheckResult("ports free", "demo-a", True, "8000 free"),
        CheckResult("GPU memory", "demo-a", False, "GPU 0: 2.0 GiB free < 126.9 GiB needed"),
        CheckResult("GPU memory", "demo-b", False, "GPU 0: 2.0 GiB free < 126.9 GiB needed"),
    )
)
PASSED = PreflightReport((CheckResult("ports free", "demo-a", True, "8000 free"),))


def _plan(name: str = "ds32") -> LaunchPlan:
    command = NodeCommand(
        "demo-a", 0, "vllm-node0", "head", 0, ("vllm", "serve", "m"), (), ready=(ReadyCheck("running"),)
    )
    return LaunchPlan(name, "vllm", "m", "demo-a", "127.0.0.1", (command,), (), "single-node")


class _Preflights:
    """Stands in for the agents' answers to pre-flight: the reports the next checks give, and how many ran."""

    def __init__(self, *reports: PreflightReport) -> None:
        self.reports = list(reports)
        self.runs = 0

    def __call__(self, caller: Any, plan: LaunchPlan, profile: Any, **_: Any) -> PreflightReport:
        self.runs += 1
        return self.reports.pop(0) if len(self.reports) > 1 else self.reports[0]


@pytest.fixture
def launching(qtbot, console_context, monkeypatch):  # type: ignore[no-untyped-def]
    """A view on a scripted fleet whose registry records events, with profile `ds32` chosen; `_prepare`
    builds the plan without asking agents."""
    fleet = FakeFleet()
    recorder = Recorder()
    registry = DeployService(fleet, recorder=recorder, poll_s=0.01)
    console_context.fleet = fleet
    console_context.use_deploy(registry)
    view = DeploymentsView(console_context)
    qtbot.addWidget(view)
    view.show()
    view._profiles_loaded(["ds32"], "ds32")
    monkeypatch.setattr(view, "_prepare", lambda name, run_id: (object(), PreparedLaunch(_plan(name), {}, False)))
    return view, fleet, recorder


def _answer_dialog(reply: str, seen: list[str]) -> None:
    """When the next modal dialog opens: keep its text, then click the button labelled `reply`."""

    def answer() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, answer)
            return
        seen.append(box.text())
        (button,) = [b for b in box.buttons() if b.text().replace("&", "") == reply]
        button.click()

    QTimer.singleShot(0, answer)


def _launch(qtbot: Any, view: DeploymentsView, start: Callable[[], None]) -> None:
    start()
    job = view.context.jobs.running("launch")
    assert job is not None
    qtbot.waitUntil(lambda: job.has_ended, timeout=20000)
    view.context.bridge.drain()


def _rows(view: DeploymentsView) -> list[tuple[str, str, str]]:
    table = view.preflight_table
    return [tuple(table.item(r, c).text() for c in range(3)) for r in range(table.rowCount())]  # type: ignore[misc]


def test_launch_runs_the_preflight_and_a_failed_check_starts_nothing(qtbot, launching, monkeypatch) -> None:
    view, fleet, recorder = launching
    checks = _Preflights(FAILED)
    monkeypatch.setattr(registry_module, "run_preflight", checks, raising=False)

    _launch(qtbot, view, view.launch_button.click)

    assert checks.runs == 1  # the launch ran it: no manual Pre-flight was clicked
    assert fleet.started() == [] and recorder.started == []  # nothing was started, nothing recorded
    assert view.list.rowCount() == 0
    assert ("GPU memory", "demo-b", "FAIL") in _rows(view)
    assert view.tabs.currentWidget() is view.preflight_panel
    assert "blocked" in view.preflight_caption.text() and "ds32-" in view.preflight_caption.text()
    assert "blocked by its pre-flight" in view.message.text() and "GPU memory on demo-b" in view.message.text()
    assert view.launch_anyway_button.isVisible() and view.launch_anyway_button.isEnabled()


def test_launch_anyway_asks_listing_the_failed_checks_and_the_override_is_recorded(
    qtbot, launching, monkeypatch
) -> None:
    view, fleet, recorder = launching
    checks = _Preflights(FAILED)
    monkeypatch.setattr(registry_module, "run_preflight", checks, raising=False)
    _launch(qtbot, view, view.launch_button.click)
    blocked_id = view.blocked.deployment_id

    seen: list[str] = []
    _answer_dialog("Cancel", seen)
    view.launch_anyway_button.click()
    assert "2 pre-flight checks failed" in seen[0]
    assert "GPU memory on demo-a: GPU 0: 2.0 GiB free < 126.9 GiB needed" in seen[0]
    assert "recorded" in seen[0]
    assert fleet.started() == [] and view.context.jobs.running("launch") is None  # not confirmed: nothing

    _answer_dialog("Launch anyway", seen)
    with qtbot.waitSignal(view.launched, timeout=20000) as up:
        view.launch_anyway_button.click()
    snapshot = up.args[0]
    assert snapshot.id == blocked_id and snapshot.state == "running"
    assert checks.runs == 1  # the confirmed report is the one launched past; not a new, unconfirmed one
    assert fleet.started() == [("demo-a", "vllm-node0")]
    kinds = {kind: message for deployment, kind, message in recorder.events if deployment == snapshot.id}
    assert "preflight_overridden" in kinds
    assert "console: Launch anyway" in kinds["preflight_overridden"]
    assert "GPU memory on demo-b" in kinds["preflight_overridden"]
    qtbot.waitUntil(lambda: "launched anyway" in view.preflight_caption.text(), timeout=5000)
    assert snapshot.id in view.preflight_caption.text()
    assert not view.launch_anyway_button.isVisible()


def test_the_preflight_tab_shows_the_report_of_the_launch_it_belongs_to(qtbot, launching, monkeypatch) -> None:
    """A manual pre-flight's FAIL rows do not stay after a later launch: the launch's own report replaces
    them, captioned with its deployment; selecting a deployment shows the report of its launch."""
    view, _fleet, recorder = launching
    checks = _Preflights(FAILED, PASSED)
    monkeypatch.setattr(registry_module, "run_preflight", checks, raising=False)
    monkeypatch.setattr(
        "meshdeck.ui.views.deployments.view.run_preflight", lambda *a, **k: FAILED
    )  # the manual Pre-flight
    view.preflight_button.click()
    qtbot.waitUntil(lambda: view.preflight is not None, timeout=20000)
    assert ("GPU memory", "demo-a", "FAIL") in _rows(view) and "not launched" in view.preflight_caption.text()
    assert view.launch_anyway_button.isEnabled()  # the manual report can be overridden too (asks first)

    _launch(qtbot, view, view.launch_button.click)  # blocked by the launch's own pre-flight
    first_caption = view.preflight_caption.text()
    assert "blocked" in first_caption
    with qtbot.waitSignal(view.launched, timeout=20000) as up:
        view.launch_button.click()  # the checks pass now
    snapshot = up.args[0]
    qtbot.waitUntil(lambda: snapshot.id in view.preflight_caption.text(), timeout=5000)
    assert _rows(view) == [("ports free", "demo-a", "pass")]
    assert "passed" in view.preflight_caption.text()
    assert next(kind for d, kind, _m in recorder.events if d == snapshot.id) == "preflight_passed"

    view.select(None)
    view._show_report(FAILED, "something else")
    view.select(snapshot.id)
    assert _rows(view) == [("ports free", "demo-a", "pass")] and snapshot.id in view.preflight_caption.text()


def test_stop_asks_naming_the_deployment_its_parts_and_hosts_and_what_is_dropped(qtbot, launching, monkeypatch) -> None:
    view, fleet, _recorder = launching
    monkeypatch.setattr(registry_module, "run_preflight", _Preflights(PASSED), raising=False)
    with qtbot.waitSignal(view.launched, timeout=20000) as up:
        view.launch_button.click()
    snapshot = up.args[0]
    view.context.bridge.drain()  # what the bridge's next tick does
    view.select(snapshot.id)
    assert view.stop_button.isEnabled()

    seen: list[str] = []
    _answer_dialog("Cancel", seen)
    view.stop_button.click()
    assert seen[0].startswith(f"Stop {snapshot.id} (vllm, running)?")
    assert "vllm-node0 on demo-a (running)" in seen[0] and "1 part on 1 host (demo-a)" in seen[0]
    assert "in-flight requests are dropped" in seen[0]
    assert fleet.stopped() == [] and view.context.jobs.running(f"stop {snapshot.id}") is None

    _answer_dialog(f"Stop {snapshot.id}", seen)
    view.stop_button.click()
    qtbot.waitUntil(lambda: view.context.deploy.get(snapshot.id).state == "stopped", timeout=20000)
    assert fleet.stopped() == [("demo-a", "vllm-node0")]
    job = view.context.jobs.running(f"stop {snapshot.id}")
    if job is not None:
        qtbot.waitUntil(lambda: job.has_ended, timeout=20000)
