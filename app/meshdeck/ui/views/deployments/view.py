"""The deployments view: profile → launch (pre-flight first) / stop, and every deployment's live state.

Pre-flight, launch and stop run as jobs through the same services the CLI uses (`prepare_launch`,
`run_preflight`, the deployment registry `DeployService`): Launch is `launch_profile`, which runs the
pre-flight checks first, as `meshdeck launch` does. A failed check blocks it (nothing is started) and
offers "Launch anyway…", which asks first — listing the failed checks — and is recorded in the
deployment's events; Pre-flight alone checks without launching (and offers the same override). The
Pre-flight tab says which launch its report belongs to. The launch reports each step and can be
cancelled, which stops what was started in reverse. Every deployment the registry knows is listed —
launched here or found on the agents (launched elsewhere: marked so) — and each is stopped the same way,
after a confirmation naming its parts, their hosts and what is lost.

The view subscribes, it does not poll: the registry's change events reach it through the bridge and the
console's DeploymentsModel (`changed(id)`), and only what changed is redrawn (a row, and the panels when it
is the selected deployment); a new deployment redraws the list. The log tab asks the registry to watch
the selected part's log while it is shown with Follow on (its new text arrives as events); with Follow
off the log is read once. A hidden view does nothing: no redraw, no watch, no call; it catches up from
the model when shown. No timer runs here.

One source for each state: the list's rows, the highlighted row, the state line above it, the worker
table, the Stop button and planned vs measured are all drawn from the model's snapshots. The line
under the buttons only reports actions, stamped with their time (status.py).

Deployments run as Slurm jobs have a tab of their own (slurm.py): submitted there with the chosen profile,
followed by the Slurm follower's events, cancelled with scancel.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from meshdeck.core.plural import counted
from meshdeck.launch.preflight_rules import PreflightReport
from meshdeck.launch.profile import Profile
from meshdeck.services import profiles as profile_service
from meshdeck.services.deployments import hosts as deploy_hosts
from meshdeck.services.deployments.model import (
    DeploymentSnapshot,
    LaunchProgress,
    PartStopped,
    StopOutcome,
    new_deployment_id,
    stop_question,
    worker_id,
)
from meshdeck.services.deployments.preflight_gate import (
    FORCE_CONSOLE,
    PreflightBlocked,
    failure_lines,
    report_summary,
)
from meshdeck.services.deployments.registry import STOP_GRACE_S, LaunchFailed
from meshdeck.services.deployments.targets import PreparedLaunch, prepare_launch
from meshdeck.services.preflight import run_preflight
from meshdeck.ui.context import ConsoleContext
from meshdeck.ui.deployments_model import DeploymentsModel
from meshdeck.ui.jobs import Progress
from meshdeck.ui.views.deployments.log import LogPanel, WatchedLog
from meshdeck.ui.views.deployments.panels import NcclPanel, PlannedPanel, WorkersPanel, set_row
from meshdeck.ui.views.deployments.slurm import SlurmJobsPanel
from meshdeck.ui.views.deployments.status import (
    NOTHING_SELECTED,
    action_message,
    override_question,
    status_line,
)
from meshdeck.ui.widgets.tables import row_table

log = logging.getLogger(__name__)
LIST_COLUMNS = ("deployment", "engine", "state", "reason", "serving at")
PREFLIGHT_COLUMNS = ("check", "host", "result", "reason")


@dataclass(frozen=True)
class Blocked:
    """A launch its pre-flight stopped (or a manual pre-flight that failed): what "Launch anyway…" launches —
    exactly this plan, past exactly these failures, once the operator confirmed them."""

    name: str
    profile: Profile
    prepared: PreparedLaunch
    report: PreflightReport
    deployment_id: str


class _LaunchBlocked(Exception):
    """A launch job's failure that is its pre-flight's verdict (the job's `exception`)."""

    def __init__(self, blocked: Blocked) -> None:
        super().__init__(f"pre-flight failed ({report_summary(blocked.report)}); nothing was started")
        self.blocked = blocked


def ask(parent: QWidget, title: str, text: str, confirm: str) -> bool:
    """A modal question, Cancel by default; `text` is shown as plain text (it quotes what agents said)."""
    box = QMessageBox(QMessageBox.Icon.Warning, title, text, QMessageBox.StandardButton.Cancel, parent)
    box.setObjectName("confirmDialog")
    box.setTextFormat(Qt.TextFormat.PlainText)
    yes = box.addButton(confirm, QMessageBox.ButtonRole.AcceptRole)
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    box.exec()
    return box.clickedButton() is yes


class DeploymentsView(QWidget):
    launched = Signal(object)  # DeploymentSnapshot, once up
    _preflight_reported = Signal(object)  # (deployment id, report, overridden) from a launch job's thread

    def __init__(self, context: ConsoleContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("deploymentsView")
        self.context = context
        assert context.deployments is not None
        self.model: DeploymentsModel = context.deployments
        self.prepared: PreparedLaunch | None = None
        self.prepared_id: str | None = None  # the deployment id (and rendezvous id) the prepared plan was built with
        self.preflight: PreflightReport | None = None
        self.blocked: Blocked | None = None  # what "Launch anyway…" would launch
        self.reports: dict[str, tuple[PreflightReport, str]] = {}  # deployment id -> its pre-flight, as captioned
        self.selected_id: str | None = None
        self._launching_id: str | None = None  # selected as soon as the registry knows it
        self._order: list[str] = []  # the deployments as the list shows them, newest first
        self._stale = True  # the model changed while the view was hidden: redraw all when shown
        self.redraws = 0  # how many times the whole view was drawn (a hidden view draws nothing)

        self.profile = QComboBox()
        self.profile.setObjectName("deployProfile")
        self.profile.setAccessibleName("Profile")
        self.profile.currentTextChanged.connect(self._profile_changed)
        self.preflight_button = QPushButton("Pre-flight")
        self.preflight_button.setObjectName("preflightButton")
        self.launch_button = QPushButton("Launch")
        self.launch_button.setObjectName("launchButton")
        self.launch_anyway_button = QPushButton("Launch anyway…")
        self.launch_anyway_button.setObjectName("launchAnywayButton")
        self.launch_anyway_button.setToolTip(
            "Launch past the failed pre-flight checks shown in the Pre-flight tab (asks first; recorded)"
        )
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("stopButton")
        self.preflight_button.clicked.connect(self.run_preflight)
        self.launch_button.clicked.connect(self.launch)
        self.launch_anyway_button.clicked.connect(self.launch_anyway)
        self.stop_button.clicked.connect(lambda: self.ask_stop(self.selected_id))
        self._preflight_reported.connect(self._launch_preflight, Qt.ConnectionType.QueuedConnection)
        self.status = QLabel(NOTHING_SELECTED)  # the selected deployment's state, redrawn when it changes
        self.status.setObjectName("deployStatus")
        self.status.setWordWrap(True)
        self.message = QLabel()  # the last action (pre-flight, launch, stop) and when
        self.message.setObjectName("deployMessage")
        self.message.setWordWrap(True)
        for label in (self.status, self.message):  # they quote what agents said: never read as rich text
            label.setTextFormat(Qt.TextFormat.PlainText)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Profile"))
        bar.addWidget(self.profile, 1)
        for button in (self.preflight_button, self.launch_button, self.launch_anyway_button, self.stop_button):
            bar.addWidget(button)

        self.list = row_table("deploymentList", LIST_COLUMNS)
        self.list.itemSelectionChanged.connect(self._deployment_chosen)
        self.preflight_table = row_table("preflightResults", PREFLIGHT_COLUMNS)
        self.preflight_caption = QLabel(
            "No pre-flight yet: Launch runs one first; Pre-flight checks without launching."
        )
        self.preflight_caption.setObjectName("preflightCaption")
        self.preflight_caption.setWordWrap(True)
        self.preflight_caption.setTextFormat(Qt.TextFormat.PlainText)
        self.preflight_panel = QWidget()
        preflight_layout = QVBoxLayout(self.preflight_panel)
        preflight_layout.setContentsMargins(0, 0, 0, 0)
        preflight_layout.addWidget(self.preflight_caption)
        preflight_layout.addWidget(self.preflight_table, 1)
        self.workers = WorkersPanel()
        self.logs = LogPanel()
        self.nccl = NcclPanel()
        self.planned = PlannedPanel()
        self.slurm = SlurmJobsPanel(context, self.profile.currentText)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.preflight_panel, "Pre-flight")
        self.tabs.addTab(self.workers, "Workers")
        self.tabs.addTab(self.logs, "Log")
        self.tabs.addTab(self.nccl, "NCCL transports")
        self.tabs.addTab(self.planned, "Planned vs measured")
        self.tabs.addTab(self.slurm, "Slurm jobs")
        splitter = QSplitter()
        splitter.addWidget(self.list)
        splitter.addWidget(self.tabs)
        splitter.setSizes([520, 800])
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.message)
        layout.addWidget(self.status)
        layout.addWidget(splitter, 1)

        self.watched_log = WatchedLog(context, self.logs, self._log_seen)
        context.bridge.agent_event.connect(self.nccl.agent_event)
        self.model.changed.connect(self._deployment_changed)
        self.tabs.currentChanged.connect(lambda _index: self.watched_log.update())
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
        self.blocked = None
        self.preflight_table.setRowCount(0)
        self.preflight_caption.setText(f"No pre-flight of {self.profile.currentText() or 'this profile'} yet.")
        self.slurm.update_buttons()
        self._buttons()

    def _buttons(self, snapshot: DeploymentSnapshot | None = None) -> None:
        """Enable what can be done; Stop follows `snapshot` (the selected one, as it was drawn)."""
        ready = self.context.fleet is not None and self.context.deploy is not None and bool(self.profile.currentText())
        busy = self.context.jobs.running("launch") is not None
        self.preflight_button.setEnabled(ready and not busy)
        self.launch_button.setEnabled(ready and not busy)
        blocked = self.blocked is not None and self.blocked.name == self.profile.currentText()
        self.launch_anyway_button.setEnabled(ready and not busy and blocked)
        self.launch_anyway_button.setVisible(blocked)
        if snapshot is None:
            snapshot = self.model.get(self.selected_id)
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
        """Pre-flight alone: check the chosen profile on its hosts without launching (Launch runs it again)."""
        name = self.profile.currentText()
        fleet = self.context.fleet
        deployment_id = new_deployment_id(name)

        def work(progress: Progress) -> tuple[Profile, PreparedLaunch, PreflightReport, str]:
            progress.report(None, "asking the agents")
            profile, prepared = self._prepare(name, deployment_id)
            assert fleet is not None  # as _prepare: None only in tests of views that do not launch
            report = run_preflight(fleet, prepared.plan, profile, inventories=prepared.inventories)
            return profile, prepared, report, deployment_id

        self._say(f"pre-flight of {name}: asking the agents…")
        job = self.context.jobs.start("pre-flight", work)
        job.succeeded.connect(self._preflight_done)
        job.failed.connect(lambda message: self._say(f"pre-flight of {name} could not run: {message}"))

    def _preflight_done(self, answer: tuple[Profile, PreparedLaunch, PreflightReport, str]) -> None:
        profile, prepared, report, deployment_id = answer
        if prepared.plan.name != self.profile.currentText():  # the profile changed meanwhile: not its results
            self._say(f"pre-flight of {prepared.plan.name} finished after another profile was chosen; run it again")
            return
        self.prepared, self.preflight, self.prepared_id = prepared, report, deployment_id
        simulated = " (simulated hosts)" if prepared.simulated else ""
        name = prepared.plan.name
        if report.passed:
            self.blocked = None
            outcome = "Launch runs it again first"
        else:
            self.blocked = Blocked(name, profile, prepared, report, deployment_id)
            outcome = 'Launch refuses until they pass; "Launch anyway…" overrides (asks first; recorded)'
        caption = action_message(
            f"pre-flight of {name}{simulated} (not launched): {report_summary(report)} — {outcome}"
        )
        self._show_report(report, caption)
        self._say(f"pre-flight of {name}{simulated}: {report_summary(report)} — {outcome}")
        self.tabs.setCurrentWidget(self.preflight_panel)
        self._buttons()

    def _show_report(self, report: PreflightReport, caption: str) -> None:
        """Fill the Pre-flight tab with `report`; `caption` says when it ran and which launch it belongs to."""
        self.preflight = report
        results = report.results
        self.preflight_table.setRowCount(len(results))
        for row, result in enumerate(results):
            set_row(
                self.preflight_table,
                row,
                (result.check, result.host or "cluster", "pass" if result.passed else "FAIL", result.reason),
            )
        self.preflight_caption.setText(caption)

    def launch(self) -> None:
        """Launch the chosen profile: a fresh plan, its pre-flight checks, then its parts in order. A failed
        check blocks it (nothing is started) and offers "Launch anyway…"; its deployment is selected as soon
        as the registry has it, so the state line follows it from "starting" on."""
        self._start_launch(None)

    def launch_anyway(self) -> None:
        """Launch the plan whose pre-flight failed, past exactly those failures, once the operator confirmed
        them in a dialog that lists them; the override is recorded in the deployment's events."""
        blocked = self.blocked
        if blocked is None or blocked.name != self.profile.currentText():
            return
        question = override_question(blocked.name, failure_lines(blocked.report))
        if not ask(self, "Launch anyway?", question, "Launch anyway"):
            self._say(f"launch of {blocked.name} past its failed pre-flight: not confirmed; nothing was started")
            return
        self._start_launch(blocked)

    def _start_launch(self, blocked: Blocked | None) -> None:
        name = self.profile.currentText()
        deploy = self.context.deploy
        assert deploy is not None
        deployment_id = blocked.deployment_id if blocked is not None else new_deployment_id(name)
        self.blocked = None
        self.prepared = self.prepared_id = None  # one launch per plan: its ids (deployment, rendezvous) are its own

        def work(progress: Progress) -> DeploymentSnapshot:
            if blocked is not None:
                profile, prepared = blocked.profile, blocked.prepared
            else:
                progress.report(None, "preparing the plan (asking the agents)")
                profile, prepared = self._prepare(name, deployment_id)

            def report(update: LaunchProgress) -> None:
                progress.report(update.step / max(update.total, 1), update.message)

            def checked(report: PreflightReport) -> None:
                self._preflight_reported.emit((deployment_id, name, report, blocked is not None))

            try:
                return deploy.launch_profile(
                    profile,
                    prepared,
                    deployment_id=deployment_id,
                    override=FORCE_CONSOLE if blocked is not None else "",
                    report=blocked.report if blocked is not None else None,
                    on_preflight=checked,
                    progress=report,
                    cancel=progress.cancelled,
                )
            except PreflightBlocked as stopped:
                raise _LaunchBlocked(Blocked(name, profile, prepared, stopped.report, deployment_id)) from None
            except LaunchFailed as failed:
                raise RuntimeError(f"{failed.snapshot.state}: {failed.snapshot.reason.splitlines()[0]}") from None

        self._launching_id = deployment_id
        self._say(f"launch of {name}: preparing {deployment_id}…")
        job = self.context.jobs.start("launch", work)
        job.progressed.connect(lambda _f, message: self._say(f"launch of {name}: {message}"))
        job.succeeded.connect(self._launched)
        job.failed.connect(lambda message: self._launch_failed(name, job.exception, message))
        job.cancelled.connect(lambda: self._say(f"launch of {name} cancelled; what was started is stopped"))
        job.ended.connect(lambda: self._buttons())
        self._buttons()

    def _launch_preflight(self, answer: tuple[str, str, PreflightReport, bool]) -> None:
        """A launch's pre-flight report (queued from its job's thread): the Pre-flight tab shows it, captioned
        with the deployment it belongs to; it is kept for when that deployment is selected again."""
        deployment_id, name, report, overriding = answer
        if report.passed:
            outcome = "passed; the launch went ahead"
        elif overriding:
            outcome = "launched anyway, past the failed checks (the override is recorded in its events)"
        else:
            outcome = 'blocked: nothing was started — fix them and Launch again, or "Launch anyway…" (asks first)'
        caption = action_message(f"pre-flight of launch {deployment_id} ({name}): {report_summary(report)} — {outcome}")
        self.reports[deployment_id] = (report, caption)
        self._show_report(report, caption)
        if not report.passed:
            self.tabs.setCurrentWidget(self.preflight_panel)

    def _launch_failed(self, name: str, error: BaseException | None, message: str) -> None:
        if isinstance(error, _LaunchBlocked):
            self._launching_id = None
            blocked = error.blocked
            if blocked.name == self.profile.currentText():
                self.blocked = blocked
            lines = failure_lines(blocked.report)
            failed = "; ".join(lines[:3]) + (f"; {len(lines) - 3} more in the Pre-flight tab" if len(lines) > 3 else "")
            self._say(f"launch of {name} blocked by its pre-flight, nothing was started: {failed}")
            self._buttons()
            return
        self._say(f"launch of {name} failed: {message}")

    def _launched(self, snapshot: DeploymentSnapshot) -> None:
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

    def ask_stop(self, deployment_id: str | None) -> None:
        """Stop, once the operator confirmed a question naming the deployment, its parts and hosts, and what
        is lost (the engines' in-flight requests)."""
        snapshot = self.model.get(deployment_id)
        if snapshot is None:
            return
        if not ask(self, "Stop deployment?", stop_question(snapshot, STOP_GRACE_S), f"Stop {snapshot.id}"):
            return
        self.stop(snapshot.id)

    def stop(self, deployment_id: str | None) -> None:
        """Stop every part of a deployment, the last stage first, whoever launched it (a job; asks nothing:
        the Stop button asks first, `ask_stop`)."""
        deploy = self.context.deploy
        if not deployment_id or deploy is None:
            return

        def work(progress: Progress) -> StopOutcome:
            def said(part: PartStopped) -> None:
                progress.report(None, f"{part.worker.command} on {part.worker.host}: {part.state or part.error}")

            return deploy.stop(deployment_id, on_part=said)

        self._say(f"stopping {deployment_id}…")
        job = self.context.jobs.start(f"stop {deployment_id}", work)
        job.succeeded.connect(self._stopped)
        job.failed.connect(lambda message: self._say(f"stop of {deployment_id} failed: {message}"))

    def _stopped(self, outcome: StopOutcome) -> None:
        deployment_id = outcome.snapshot.id
        if outcome.failures:
            names = ", ".join(f"{p.worker.command} on {p.worker.host} ({p.error})" for p in outcome.failures)
            self._say(f"stop of {deployment_id}: not stopped: {names}")
            return
        if outcome.record_closed:
            record = "its record is closed"
        elif outcome.unsure_hosts:
            record = f"its record stays open: {', '.join(outcome.unsure_hosts)} could not be asked"
        else:
            record = "no open record of it in this database"
        self._say(f"stop of {deployment_id}: {counted(len(outcome.parts), 'part')} stopped; {record}")

    # ------------------------------------------------------------------ live state

    def deployments(self) -> list[DeploymentSnapshot]:
        """Every deployment the registry knows (launched here or found on the agents), newest first."""
        return self.model.newest_first()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._stale:
            self.refresh()
        self.watched_log.update()

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self.watched_log.update()

    def _deployment_changed(self, deployment_id: str) -> None:
        """The model has a new snapshot of `deployment_id`: redraw its row (the list when it is new or moved)
        and, when it is the one shown, the panels. Hidden: only remember to catch up."""
        if not self.isVisible():
            self._stale = True
            return
        if deployment_id == self._launching_id:
            self.select(deployment_id)
            return
        snapshots = self.model.newest_first()
        if [s.id for s in snapshots] != self._order:
            self._draw_list(snapshots)
        else:
            snapshot = self.model.get(deployment_id)
            assert snapshot is not None
            self._draw_row(self._order.index(deployment_id), snapshot)
        if deployment_id == self.selected_id:
            self._draw_selected()

    def refresh(self) -> None:
        """Redraw everything that shows a deployment's state from the model's snapshots (when visible)."""
        if not self.isVisible():
            self._stale = True
            return
        self._stale = False
        self.redraws += 1
        if self._launching_id is not None and self.model.get(self._launching_id) is not None:
            self.selected_id, self._launching_id = self._launching_id, None
            self._selection_changed()
        self._draw_list(self.model.newest_first())
        self._draw_selected()

    def _draw_list(self, snapshots: list[DeploymentSnapshot]) -> None:
        self._order = [s.id for s in snapshots]
        self.list.setRowCount(len(snapshots))
        for row, snapshot in enumerate(snapshots):
            self._draw_row(row, snapshot)
        self._highlight()

    def _draw_row(self, row: int, snapshot: DeploymentSnapshot) -> None:
        engine = snapshot.engine + (" (simulated)" if self._simulated(snapshot) else "")
        reason = snapshot.reason.splitlines()[0] if snapshot.reason else ""
        if snapshot.alarms and not snapshot.final:
            reason = f"ALARM: {snapshot.alarms[0]}"
        if snapshot.adopted:
            reason = reason or "found on the agents (launched elsewhere)"
        set_row(self.list, row, (snapshot.id, engine, snapshot.state, reason, snapshot.serving_url or ""))

    def _draw_selected(self) -> None:
        """The state line, the panels and the Stop button, from the selected deployment's snapshot."""
        snapshot = self.model.get(self.selected_id)
        simulated = snapshot is not None and self._simulated(snapshot)
        adopted = snapshot is not None and snapshot.adopted
        self.status.setText(status_line(snapshot, simulated=simulated, found=adopted))
        self.workers.show_snapshot(snapshot)
        if snapshot is not None:
            self.logs.set_workers([w.command for w in snapshot.workers])
            self.planned.set_numbers(
                snapshot.planned.startup if snapshot.planned else None, snapshot.measured, simulated=simulated
            )
        self._buttons(snapshot)

    def _highlight(self) -> None:
        """Keep the highlighted row on the selected deployment (rows move when a newer one arrives)."""
        rows = self.list.selectionModel().selectedRows()
        current = rows[0].row() if rows else None
        if self.selected_id in self._order:
            wanted = self._order.index(self.selected_id)
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

    def _deployment_chosen(self) -> None:
        """The operator picked a row."""
        rows = self.list.selectionModel().selectedRows()
        if rows:
            item = self.list.item(rows[0].row(), 0)
            if item is not None and item.text() != self.selected_id:
                self.select(item.text())

    def _selection_changed(self) -> None:
        """Panels that keep per-deployment data start over for the newly selected deployment; the Pre-flight
        tab shows its launch's report when this console ran it."""
        self.nccl.show_deployment(self.selected_id)
        known = self.reports.get(self.selected_id or "")
        if known is not None:
            self._show_report(*known)
        self.watched_log.update()

    def _log_seen(self) -> tuple[str, str] | None:
        """(deployment, command) whose log the tab shows now; None while it is not seen."""
        command = self.logs.worker.currentText()
        if not self.isVisible() or self.tabs.currentWidget() is not self.logs or not self.selected_id or not command:
            return None
        return self.selected_id, command

    def worker_id(self, command: str) -> str:
        assert self.selected_id is not None
        return worker_id(self.selected_id, command)
