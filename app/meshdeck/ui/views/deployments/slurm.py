"""The deployments view's Slurm tab: every job meshdeck submitted, its Slurm state as the cluster reports it, and
what to do with it — submit the chosen profile (the dialog in slurm_submit.py), cancel a job (scancel, after a
confirmation naming it), read the end of its output file.

Rows come from the store once and then from the Slurm follower's events (services/slurm_service.py, through the
bridge): PENDING with Slurm's reason, RUNNING on its nodes, COMPLETING, and the final state (COMPLETED, FAILED,
CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, ...) beside meshdeck's own word for it. The detail line says the
states seen in order, the output file, what was asked (partition, account, QOS, time) and, when something cannot
be shown (the login node is not connected, the job's agents did not answer), why. A hidden tab redraws nothing
and catches up when shown. Every text from the cluster is shown as plain text.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QShowEvent
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from meshdeck.core.text import printable, printable_lines
from meshdeck.services.slurm_jobs import deployment_state
from meshdeck.services.slurm_service import SlurmJobChanged, SlurmJobRecord
from meshdeck.ui.context import ConsoleContext
from meshdeck.ui.jobs import Progress
from meshdeck.ui.views.deployments.panels import set_row
from meshdeck.ui.views.deployments.slurm_submit import SlurmSubmission, SlurmSubmitDialog
from meshdeck.ui.views.deployments.status import action_message
from meshdeck.ui.widgets.tables import row_table

COLUMNS = ("deployment", "cluster", "job", "Slurm state", "reason", "nodes", "state")
OUTPUT_LINES = 200
OUTPUT_BLOCKS = 10_000  # lines the output box keeps


def job_details(event: SlurmJobChanged) -> str:
    """The selected job in full: its states in order, output file, what it asked for, and any problem."""
    record = event.record
    lines = [
        f"{record.deployment}: Slurm job {record.job_id} on {record.cluster} — {record.state}"
        + (f" ({record.reason})" if record.reason else "")
        + f"; meshdeck: {deployment_state(record.state)}",
        f"profile {record.profile} ({record.engine}), {record.nodes} node(s)"
        + (f" on {', '.join(record.node_names)}" if record.node_names else ""),
        "states seen: " + (" → ".join(record.states_seen) or record.state),
    ]
    asked = ", ".join(f"{key}={value}" for key, value in sorted(record.options.items()))
    if asked:
        lines.append(f"asked: {asked}")
    if record.output:
        lines.append(f"output: {record.output} (on the cluster)")
    if event.problem:
        lines.append(f"not shown: {event.problem}")
    return "\n".join(printable(line, 2000) for line in lines)


class SlurmJobsPanel(QWidget):
    def __init__(self, context: ConsoleContext, profile_name: Callable[[], str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("slurmJobsPanel")
        self.context = context
        self.profile_name = profile_name
        self.jobs: dict[str, SlurmJobChanged] = {}
        self._order: list[str] = []
        self.selected_id: str | None = None
        self._stale = True
        self.dialog: SlurmSubmitDialog | None = None  # the open submit dialog (tests drive it)

        self.table = row_table("slurmJobs", COLUMNS)
        self.table.itemSelectionChanged.connect(self._chosen)
        self.submit_button = QPushButton("Submit to Slurm…")
        self.submit_button.setObjectName("slurmSubmitButton")
        self.submit_button.setToolTip("Submit the chosen profile as one Slurm job through a cluster's login node")
        self.cancel_button = QPushButton("Cancel job…")
        self.cancel_button.setObjectName("slurmCancelButton")
        self.cancel_button.setToolTip("scancel the selected job (asks first)")
        self.output_button = QPushButton("Read output")
        self.output_button.setObjectName("slurmOutputButton")
        self.output_button.setToolTip(f"The last {OUTPUT_LINES} lines of the job's output file, read on the cluster")
        self.submit_button.clicked.connect(self.open_submit)
        self.cancel_button.clicked.connect(self.ask_cancel)
        self.output_button.clicked.connect(self.read_output)
        self.message = QLabel()
        self.message.setObjectName("slurmMessage")
        self.details = QLabel("Select a Slurm job to see its states, output file and options.")
        self.details.setObjectName("slurmDetails")
        for label in (self.message, self.details):
            label.setWordWrap(True)
            label.setTextFormat(Qt.TextFormat.PlainText)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.output = QPlainTextEdit()
        self.output.setObjectName("slurmOutput")
        self.output.setReadOnly(True)
        self.output.setMaximumBlockCount(OUTPUT_BLOCKS)
        self.output.setPlaceholderText("Read output: the end of the selected job's output file")
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        self.output.setFont(mono)
        buttons = QHBoxLayout()
        for button in (self.submit_button, self.cancel_button, self.output_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.table)
        split.addWidget(self.output)
        split.setSizes([300, 200])
        layout = QVBoxLayout(self)
        layout.addLayout(buttons)
        layout.addWidget(self.message)
        layout.addWidget(self.details)
        layout.addWidget(split, 1)
        context.bridge.slurm_job_changed.connect(self._changed)
        self._load()
        self.update_buttons()

    # -- data --------------------------------------------------------------------------------------

    def _load(self) -> None:
        slurm = self.context.slurm
        if slurm is None:
            self.message.setText("No Slurm service in this console.")
            return

        def work(_progress: Progress) -> list[SlurmJobRecord]:
            return slurm.jobs()

        job = self.context.jobs.start("slurm jobs", work, abandon_on_cancel=True)
        job.succeeded.connect(self._loaded)
        job.failed.connect(lambda message: self._say(f"Slurm jobs could not be read: {message}"))

    def _loaded(self, records: list[SlurmJobRecord]) -> None:
        for record in records:
            self.jobs.setdefault(record.deployment, SlurmJobChanged(record))  # an event already here is newer
        self.refresh()

    def _changed(self, event: SlurmJobChanged) -> None:
        self.jobs[event.record.deployment] = event
        self.refresh()

    def refresh(self) -> None:
        if not self.isVisible():
            self._stale = True
            return
        self._stale = False
        events = sorted(self.jobs.values(), key=lambda e: e.record.submitted_at, reverse=True)
        self._order = [e.record.deployment for e in events]
        self.table.setRowCount(len(events))
        for row, event in enumerate(events):
            record = event.record
            cells = (
                record.deployment,
                record.cluster,
                str(record.job_id),
                record.state,
                record.reason or "",
                ",".join(record.node_names) or str(record.nodes),
                deployment_state(record.state) + (" (not current)" if event.problem and not record.final else ""),
            )
            # the id stays whole: a row is found again by it
            set_row(self.table, row, (record.deployment, *(printable(cell, 200) for cell in cells[1:])))
        if self.selected_id in self._order:
            wanted = self._order.index(self.selected_id)
            rows = self.table.selectionModel().selectedRows()
            if not rows or rows[0].row() != wanted:
                self.table.selectRow(wanted)
        self._show_selected()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._stale:
            self.refresh()

    def _chosen(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        item = self.table.item(rows[0].row(), 0) if rows else None
        if item is not None and item.text() != self.selected_id:
            self.selected_id = item.text()
            self.output.clear()
            self._show_selected()

    def select(self, deployment: str) -> None:
        self.selected_id = deployment
        self.refresh()

    def _show_selected(self) -> None:
        event = self.jobs.get(self.selected_id or "")
        if event is not None:
            self.details.setText(job_details(event))
        self.update_buttons()

    def update_buttons(self) -> None:
        event = self.jobs.get(self.selected_id or "")
        ready = self.context.slurm is not None
        self.submit_button.setEnabled(ready and bool(self.profile_name()))
        self.cancel_button.setEnabled(ready and event is not None and not event.record.final)
        self.output_button.setEnabled(ready and event is not None)

    def _say(self, text: str) -> None:
        self.message.setText(action_message(text))

    # -- actions -----------------------------------------------------------------------------------

    def open_submit(self) -> None:
        """The submit dialog for the chosen profile; on Submit, the job is sent (a job, never the GUI thread)."""
        name = self.profile_name()
        if not name:
            return
        self.dialog = SlurmSubmitDialog(self.context, name, self)
        accepted = self.dialog.exec() == QDialog.DialogCode.Accepted
        if accepted:
            self.submit(self.dialog.submission())
        self.dialog = None

    def submit(self, submission: SlurmSubmission) -> None:
        slurm = self.context.slurm
        assert slurm is not None

        def work(_progress: Progress) -> SlurmJobRecord:
            return slurm.submit(submission.cluster, submission.profile, submission.options, run_id=submission.run_id)

        self._say(f"submitting {submission.profile.name} to {submission.cluster}…")
        self.selected_id = submission.run_id
        job = self.context.jobs.start(f"slurm submit {submission.run_id}", work)
        job.succeeded.connect(
            lambda record: self._say(
                f"{record.deployment}: submitted as Slurm job {record.job_id} on {record.cluster} ({record.state})"
            )
        )
        job.failed.connect(lambda message: self._say(f"submit to {submission.cluster} refused: {message}"))

    def ask_cancel(self) -> None:
        event = self.jobs.get(self.selected_id or "")
        if event is None or event.record.final:
            return
        record = event.record
        box = QMessageBox(
            QMessageBox.Icon.Warning,
            "Cancel Slurm job?",
            f"scancel job {record.job_id} ({record.deployment}) on {record.cluster}? Its processes on "
            f"{', '.join(record.node_names) or 'its nodes'} are ended and in-flight requests are lost.",
            QMessageBox.StandardButton.Cancel,
            self,
        )
        box.setObjectName("confirmDialog")
        box.setTextFormat(Qt.TextFormat.PlainText)
        yes = box.addButton(f"scancel {record.job_id}", QMessageBox.ButtonRole.AcceptRole)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        if box.clickedButton() is yes:
            self.cancel(record.deployment)

    def cancel(self, deployment: str) -> None:
        """scancel the job and wait for its final state (a job; `ask_cancel` asks first)."""
        slurm = self.context.slurm
        assert slurm is not None
        self._say(f"cancelling {deployment}…")
        job = self.context.jobs.start(f"slurm cancel {deployment}", lambda _p: slurm.stop(deployment))
        job.succeeded.connect(
            lambda record: self._say(f"{record.deployment}: Slurm job {record.job_id} {record.state}")
        )
        job.failed.connect(lambda message: self._say(f"cancel of {deployment} failed: {message}"))

    def read_output(self) -> None:
        slurm, deployment = self.context.slurm, self.selected_id
        if slurm is None or deployment is None:
            return
        job = self.context.jobs.start(
            "slurm output", lambda _p: slurm.logs(deployment, OUTPUT_LINES), abandon_on_cancel=True
        )
        job.succeeded.connect(lambda text: self._output_read(deployment, text))
        job.failed.connect(lambda message: self._say(f"output of {deployment} could not be read: {message}"))

    def _output_read(self, deployment: str, text: str) -> None:
        if deployment == self.selected_id:
            self.output.setPlainText(printable_lines(text))
            self._say(f"output of {deployment}: last {OUTPUT_LINES} lines at most")
