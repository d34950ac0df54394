"""The deployments view: profile → pre-flight → launch / stop, and every deployment's live state.

Pre-flight and launch run as jobs through the same services the CLI uses (`prepare_launch`,
`run_preflight`, `DeployService.launch`): the launch reports each step and can be cancelled, which
stops what was started in reverse. The deployments list and the worker table follow the deploy
service (kept current by the agents' `worker` events), plus the deployments the agents run that were
launched elsewhere (found by their workers' names); logs are read from the agents by a job while
the log tab is open and Follow is on.

One source for each state: every refresh takes one list of snapshots, and the list's rows, the
highlighted row, the state line above it, the worker table, the Stop button and the dashboard's plan
lines are all drawn from it. The line under the buttons only reports actions, stamped with their time
(deployment_status.py).
"""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QSplitter, QTabWidget, QVBoxLayout, QWidget

from meshdeck.launch.plan import LaunchPlan
from meshdeck.launch.preflight_rules import PreflightReport
from meshdeck.launch.profile import Profile
from meshdeck.services import deploy_hosts
from meshdeck.services import profiles as profile_service
from meshdeck.services.deploy import LaunchFailed
from meshdeck.services.deploy_found import FoundStopped
from meshdeck.services.deploy_model import DeploymentSnapshot, LaunchProgress, new_deployment_id, worker_id
from meshdeck.services.deploy_records import planned_as_measured
from meshdeck.services.deploy_targets import PreparedLaunch, prepare_launch
from meshdeck.services.preflight import run_preflight
from meshdeck.ui.context import ConsoleContext
from meshdeck.ui.views.deployment_panels import LogPanel, NcclPanel, PlannedPanel, WorkersPanel, set_row
from meshdeck.ui.views.deployment_status import NOTHING_SELECTED, action_message, status_line
from meshdeck.ui.views.deployments_found import FoundDeployments
from meshdeck.ui.widgets.tables import row_table

log = logging.getLogger(__name__)
LIST_COLUMNS = ("deployment", "engine", "state", "reason", "serving at")
PREFLIGHT_COLUMNS = ("check", "host", "result", "reason")
LOG_LINES = 400


class DeploymentsView(QWidget):
    launched = Signal(object)  # DeploymentSnapshot, once up
    planned_memory = Signal(object)  # {(host, gpu): bytes} of the running deployments with a prediction

    def __init__(self, context: ConsoleContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("deploymentsView")
        self.context = context
        self.plans: dict[str, LaunchPlan] = {}  # deployment id -> the plan it was launched from
        self.prepared: PreparedLaunch | None = None
        self.prepared_id: str | None = None  # the deployment id (and rendezvous id) the prepared plan was built with
        self.preflight: PreflightReport | None = None
        self.selected_id: str | None = None
        self._launching_id: str | None = None  # selected as soon as the deploy service knows it

        self.profile = QComboBox()
        self.profile.setObjectName("deployProfile")
        self.profile.setAccessibleName("Profile")
        self.profile.currentTextChanged.connect(self._profile_changed)
        self.preflight_button = QPushButton("Pre-flight")
        self.preflight_button.setObjectName("preflightButton")
        self.launch_button = QPushButton("Launch")
        self.launch_button.setObjectName("launchButton")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("stopButton")
        self.preflight_button.clicked.connect(self.run_preflight)
        self.launch_button.clicked.connect(self.launch)
        self.stop_button.clicked.connect(lambda: self.stop(self.selected_id))
        self.status = QLabel(NOTHING_SELECTED)  # the selected deployment's state, redrawn at every refresh
        self.status.setObjectName("deployStatus")
        self.status.setWordWrap(True)
        self.message = QLabel()  # the last action (pre-flight, launch, stop) and when
        self.message.setObjectName("deployMessage")
        self.message.setWordWrap(True)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Profile"))
        bar.addWidget(self.profile, 1)
        for button in (self.preflight_button, self.launch_button, self.stop_button):
            bar.addWidget(button)

        self.list = row_table("deploymentList", LIST_COLUMNS)
        self.list.itemSelectionChanged.connect(self._deployment_chosen)
        self.preflight_table = row_table("preflightResults", PREFLIGHT_COLUMNS)
        self.workers = WorkersPanel()
        self.logs = LogPanel()
        self.nccl = NcclPanel()
        self.planned = PlannedPanel()
        self.tabs = QTabWidget()
        self.tabs.addTab(self.preflight_table, "Pre-flight")
        self.tabs.addTab(self.workers, "Workers")
        self.tabs.addTab(self.logs, "Log")
        self.tabs.addTab(self.nccl, "NCCL transports")
        self.tabs.addTab(self.planned, "Planned vs measured")
        splitter = QSplitter()
        splitter.addWidget(self.list)
        splitter.addWidget(self.tabs)
        splitter.setSizes([520, 800])
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.message)
        layout.addWidget(self.status)
        layout.addWidget(splitter, 1)

        self.found = FoundDeployments(context, self)
        self.found.changed.connect(self.refresh)
        context.bridge.agent_event.connect(self.nccl.agent_event)
        self._timer = QTimer(self)
        self._timer.setInterval(1000)
        self._timer.timeout.connect(self.refresh)
        self._timer.start()
        self._log_timer = QTimer(self)
        self._log_timer.setInterval(2000)
        self._log_timer.timeout.connect(self._poll_log)
        self._log_timer.start()
        self.logs.worker.currentTextChanged.connect(lambda _text: self._poll_log(force=True))
        self.reload_profiles()
        self._buttons()

    # ------------------------------------------------------------------ profiles

    def reload_profiles(self, select: str | None = None) -> None:
        db = self.context.db
        if db is None:
            return
        job = self.context.jobs.start("deploy profiles", lambda _p: [p.name for p in profile_service.list_profiles(db)])
        job.succeeded.connect(lambda names: self._profiles_loaded(names, select))

    def _profiles_loaded(self, names: list[str], select: str | None) -> None:
        current = select or self.profile.currentText()
        self.profile.blockSignals(True)
        self.profile.clear()
        self.profile.addItems(names)
        self.profile.blockSignals(False)
        if current in names:
            self.profile.setCurrentText(current)
        self._profile_changed()

    def choose_profile(self, name: str) -> None:
        """Select `name` (e.g. from the profiles view's Launch…), reloading the list if it is new."""
        if self.profile.findText(name) < 0:
            self.reload_profiles(select=name)
        else:
            self.profile.setCurrentText(name)

    def _profile_changed(self) -> None:
        self.prepared = self.prepared_id = None
        self.preflight = None
        self.preflight_table.setRowCount(0)
        self._buttons()

    def _buttons(self, snapshot: DeploymentSnapshot | None = None) -> None:
        """Enable what can be done; Stop follows `snapshot` (the selected one, as refresh drew it)."""
        ready = self.context.fleet is not None and self.context.deploy is not None and bool(self.profile.currentText())
        busy = self.context.jobs.running("launch") is not None
        self.preflight_button.setEnabled(ready and not busy)
        self.launch_button.setEnabled(ready and not busy)
        if snapshot is None:
            snapshot = self._snapshot(self.selected_id)
        self.stop_button.setEnabled(snapshot is not None and not snapshot.final and snapshot.state != "stopping")

    def _say(self, text: str) -> None:
        self.message.setText(action_message(text))

    # ------------------------------------------------------------------ pre-flight and launch

    def _prepare(self, profile_name: str, deployment_id: str) -> tuple[Profile, PreparedLaunch]:
        """The profile's launch plan for deployment `deployment_id` (also its rendezvous id), as the CLI builds it."""
        db, fleet = self.context.db, self.context.fleet
        assert db is not None and fleet is not None
        profile = profile_service.profile_for_launch(db, profile_name)  # its secrets read from the OS keyring
        addresses = deploy_hosts.fleet_addresses(fleet, profile.hosts, db)
        return profile, prepare_launch(profile, fleet, addresses=addresses, run_id=deployment_id)

    def run_preflight(self) -> None:
        name = self.profile.currentText()
        fleet = self.context.fleet
        deployment_id = new_deployment_id(name)

        def work(progress: Any) -> tuple[PreparedLaunch, PreflightReport, str]:
            progress.report(None, "asking the agents")
            profile, prepared = self._prepare(name, deployment_id)
            report = run_preflight(fleet, prepared.plan, profile, inventories=prepared.inventories)
            return prepared, report, deployment_id

        self._say(f"pre-flight of {name}: asking the agents…")
        job = self.context.jobs.start("pre-flight", work)
        job.succeeded.connect(self._preflight_done)
        job.failed.connect(lambda message: self._say(f"pre-flight of {name} could not run: {message}"))

    def _preflight_done(self, answer: tuple[PreparedLaunch, PreflightReport, str]) -> None:
        if answer[0].plan.name != self.profile.currentText():  # the profile changed meanwhile: not its results
            self._say(f"pre-flight of {answer[0].plan.name} finished after another profile was chosen; run it again")
            return
        self.prepared, self.preflight, self.prepared_id = answer
        results = self.preflight.results
        self.preflight_table.setRowCount(len(results))
        for row, result in enumerate(results):
            set_row(
                self.preflight_table,
                row,
                (result.check, result.host or "cluster", "pass" if result.passed else "FAIL", result.reason),
            )
        failed = len(self.preflight.failures)
        simulated = " (simulated hosts)" if self.prepared.simulated else ""
        self._say(
            f"pre-flight of {self.prepared.plan.name}{simulated}: {len(results) - failed} passed, {failed} failed"
            + ("" if not failed else " — launching anyway is possible, but read the reasons first")
        )
        self.tabs.setCurrentWidget(self.preflight_table)

    def launch(self) -> None:
        """Launch the chosen profile (the pre-flight's plan when there is one); its deployment is selected
        as soon as the deploy service has it, so the state line follows it from "starting" on."""
        name = self.profile.currentText()
        deploy = self.context.deploy
        prepared, deployment_id = self.prepared, self.prepared_id
        if prepared is None or deployment_id is None:
            deployment_id = new_deployment_id(name)
        self.prepared = self.prepared_id = None  # one launch per plan: its ids (deployment, rendezvous) are its own

        def work(progress: Any) -> tuple[DeploymentSnapshot, LaunchPlan]:
            plan = prepared.plan if prepared is not None else self._prepare(name, deployment_id)[1].plan

            def report(update: LaunchProgress) -> None:
                progress.report(update.step / max(update.total, 1), update.message)

            try:
                snapshot = deploy.launch(plan, deployment_id=deployment_id, progress=report, cancel=progress.cancelled)
            except LaunchFailed as failed:
                raise RuntimeError(f"{failed.snapshot.state}: {failed.snapshot.reason.splitlines()[0]}") from None
            return snapshot, plan

        self._launching_id = deployment_id
        self._say(f"launch of {name}: preparing {deployment_id}…")
        job = self.context.jobs.start("launch", work)
        job.progressed.connect(lambda _f, message: self._say(f"launch of {name}: {message}"))
        job.succeeded.connect(self._launched)
        job.failed.connect(lambda message: self._say(f"launch of {name} failed: {message}"))
        job.cancelled.connect(lambda: self._say(f"launch of {name} cancelled; what was started is stopped"))
        job.ended.connect(self.refresh)
        self._buttons()

    def _launched(self, answer: tuple[DeploymentSnapshot, LaunchPlan]) -> None:
        snapshot, plan = answer
        self.plans[snapshot.id] = plan
        self._say(f"launch of {snapshot.name}: {snapshot.id} came up")
        self.select(snapshot.id)
        self.launched.emit(snapshot)

    def select(self, deployment_id: str | None) -> None:
        """Show `deployment_id` (its row highlighted, its state, workers, logs and numbers)."""
        self._launching_id = None
        if deployment_id != self.selected_id:
            self.selected_id = deployment_id
            self._selection_changed()
        self.refresh()

    def stop(self, deployment_id: str | None) -> None:
        deploy = self.context.deploy
        if not deployment_id or deploy is None:
            return
        self._say(f"stopping {deployment_id}…")
        if deployment_id in self.found.snapshots:  # not launched here: stop its parts through the agents
            job = self.found.stop(deployment_id)
            job.succeeded.connect(self._found_stopped)
        else:
            job = self.context.jobs.start(f"stop {deployment_id}", lambda _p: deploy.stop(deployment_id))
            job.succeeded.connect(lambda snap: self._say(f"stop of {snap.id}: every part asked to stop"))
        job.failed.connect(lambda message: self._say(f"stop of {deployment_id} failed: {message}"))
        job.ended.connect(self.refresh)

    def _found_stopped(self, outcome: FoundStopped) -> None:
        if outcome.failures:
            names = ", ".join(f"{p.worker.command} on {p.worker.host} ({p.error})" for p in outcome.failures)
            self._say(f"stop of {outcome.deployment_id}: not stopped: {names}")
            return
        record = "its record is closed" if outcome.record_closed else "no open record of it in this database"
        self._say(f"stop of {outcome.deployment_id}: {len(outcome.parts)} part(s) stopped; {record}")

    # ------------------------------------------------------------------ live state

    def _snapshot(self, deployment_id: str | None) -> DeploymentSnapshot | None:
        deploy = self.context.deploy
        if deploy is None or deployment_id is None:
            return None
        try:
            return deploy.get(deployment_id)
        except KeyError:
            return self.found.snapshots.get(deployment_id)

    def deployments(self) -> list[DeploymentSnapshot]:
        """Launched from this console, then those found on the agents; newest first."""
        deploy = self.context.deploy
        tracked = list(deploy.list()) if deploy is not None else []
        known = {s.id for s in tracked}
        found = [s for s in self.found.snapshots.values() if s.id not in known]
        return sorted(tracked + found, key=lambda s: s.started_at, reverse=True)

    def refresh(self) -> None:
        """Redraw everything that shows a deployment's state from one list of snapshots."""
        snapshots = self.deployments()
        by_id = {s.id: s for s in snapshots}
        if self._launching_id is not None and self._launching_id in by_id:
            self.selected_id, self._launching_id = self._launching_id, None
            self._selection_changed()
        self.list.setRowCount(len(snapshots))
        for row, snap in enumerate(snapshots):
            engine = snap.engine + (" (simulated)" if self._simulated(snap) else "")
            reason = snap.reason.splitlines()[0] if snap.reason else ""
            if snap.id in self.found.snapshots:
                reason = reason or "found on the agents (launched elsewhere)"
            set_row(self.list, row, (snap.id, engine, snap.state, reason, snap.serving_url or ""))
        self._highlight([s.id for s in snapshots])
        snapshot = by_id.get(self.selected_id or "")
        found = snapshot is not None and snapshot.id in self.found.snapshots
        simulated = snapshot is not None and self._simulated(snapshot)
        self.status.setText(status_line(snapshot, simulated=simulated, found=found))
        self.workers.show_snapshot(snapshot)
        if snapshot is not None:
            self.logs.set_workers([w.command for w in snapshot.workers])
            plan = self.plans.get(snapshot.id)
            self.planned.set_numbers(
                planned_as_measured(plan) if plan else None, snapshot.measured, simulated=simulated
            )
        self._buttons(snapshot)
        self.planned_memory.emit(self._planned_memory(snapshots))

    def _highlight(self, ids: list[str]) -> None:
        """Keep the highlighted row on the selected deployment (rows move when a newer one arrives)."""
        rows = self.list.selectionModel().selectedRows()
        current = rows[0].row() if rows else None
        if self.selected_id in ids:
            wanted = ids.index(self.selected_id)
            if current != wanted:
                self.list.selectRow(wanted)
        elif current is not None:
            self.list.clearSelection()

    def _simulated(self, snapshot: DeploymentSnapshot) -> bool:
        """A vLLM deployment on simulated agents runs the agents' stand-in, not vLLM: say so."""
        assert self.context.hosts is not None
        hosts = {worker.host for worker in snapshot.workers}
        known = self.context.hosts.hosts
        return snapshot.engine == "vllm" and any(h in known and known[h].simulated for h in hosts)

    def _planned_memory(self, snapshots: list[DeploymentSnapshot]) -> dict[tuple[str, int], float]:
        lines: dict[tuple[str, int], float] = {}
        for snap in snapshots:
            plan = self.plans.get(snap.id)
            if plan is None or plan.planned is None or snap.final:
                continue
            for command in plan.commands:
                for gpu in command.gpus:
                    lines[(command.host, gpu)] = float(plan.planned.gpu_memory_bytes)
        return lines

    def _deployment_chosen(self) -> None:
        """The operator picked a row."""
        rows = self.list.selectionModel().selectedRows()
        if rows:
            item = self.list.item(rows[0].row(), 0)
            if item is not None and item.text() != self.selected_id:
                self.select(item.text())

    def _selection_changed(self) -> None:
        """Panels that keep per-deployment data start over for the newly selected deployment."""
        self.nccl.show_deployment(self.selected_id)
        self.logs.set_text("")
        self._poll_log(force=True)

    def _poll_log(self, force: bool = False) -> None:
        deploy = self.context.deploy
        snapshot = self._snapshot(self.selected_id)
        command = self.logs.worker.currentText()
        if deploy is None or snapshot is None or not command:
            return
        if not force and not (
            self.isVisible() and self.tabs.currentWidget() is self.logs and self.logs.follow.isChecked()
        ):
            return
        if self.context.jobs.running("log tail") is not None:
            return
        if snapshot.id in self.found.snapshots:
            job = self.found.tail(snapshot.id, command, LOG_LINES)
        else:
            job = self.context.jobs.start("log tail", lambda _p: deploy.logs(snapshot.id, command, LOG_LINES))
        job.succeeded.connect(self.logs.set_text)

    def worker_id(self, command: str) -> str:
        assert self.selected_id is not None
        return worker_id(self.selected_id, command)
