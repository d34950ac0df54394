"""Submitting a profile to a Slurm cluster from the console: the cluster, its partitions, accounts and QOS as the
login node reports them, the time limit, and the batch script shown verbatim before anything is sent.

The dialog asks nothing on the GUI thread: the profile, the clusters and each cluster's info are read in jobs and
fill the fields as they come. The partition, account and QOS are editable lists (a cluster without accounting does
not say which accounts exist: the note says so and any name may be typed); every value is checked by Slurm's own
rules (launch/slurm_options.py) when the script is shown and when Submit is pressed, the error naming the field.
The deployment id is chosen when the dialog opens, so "Show batch script" prints exactly what Submit sends.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from meshdeck.core.errors import InputError
from meshdeck.launch.profile import Profile, SlurmSettings
from meshdeck.launch.slurm_options import SlurmOptions, slurm_options
from meshdeck.services import profiles as profile_service
from meshdeck.services.deployments.model import new_deployment_id
from meshdeck.services.slurm import SlurmClusterInfo, cluster_text
from meshdeck.ui.context import ConsoleContext
from meshdeck.ui.jobs import Progress


@dataclass(frozen=True)
class SlurmSubmission:
    """What Submit sends: `profile` on `cluster` with `options`, as deployment `run_id`."""

    cluster: str
    profile: Profile
    options: SlurmOptions
    run_id: str


class SlurmSubmitDialog(QDialog):
    def __init__(self, context: ConsoleContext, profile_name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("slurmSubmitDialog")
        self.setWindowTitle(f"Submit {profile_name} to Slurm")
        self.context = context
        self.profile_name = profile_name
        self.run_id = new_deployment_id(profile_name)
        self.profile: Profile | None = None
        self.infos: dict[str, SlurmClusterInfo] = {}

        self.cluster = QComboBox()
        self.cluster.setObjectName("slurmCluster")
        self.cluster.currentTextChanged.connect(self._cluster_chosen)
        self.partition = self._editable("slurmPartition", "the cluster's default")
        self.account = self._editable("slurmAccount", "none (the user's default)")
        self.qos = self._editable("slurmQos", "none (the account's default)")
        self.time_limit = QLineEdit()
        self.time_limit.setObjectName("slurmTime")
        self.time_limit.setPlaceholderText("the partition's default, e.g. 4:00:00 or 2-00:00:00")
        self.job_name = QLineEdit(profile_name)
        self.job_name.setObjectName("slurmJobName")
        self.cluster_info = QLabel("Reading the profile and the clusters…")
        self.cluster_info.setObjectName("slurmClusterInfo")
        self.cluster_info.setWordWrap(True)
        self.cluster_info.setTextFormat(Qt.TextFormat.PlainText)  # names come from the cluster
        self.error = QLabel()
        self.error.setObjectName("fieldError")
        self.error.setWordWrap(True)
        self.error.setTextFormat(Qt.TextFormat.PlainText)
        self.error.setVisible(False)
        self.script = QPlainTextEdit()
        self.script.setObjectName("slurmScript")
        self.script.setReadOnly(True)
        self.script.setPlaceholderText("Show batch script: the script Submit sends, verbatim (nothing is sent)")
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        self.script.setFont(mono)
        self.show_script = QPushButton("Show batch script")
        self.show_script.setObjectName("slurmShowScript")
        self.show_script.clicked.connect(self.preview)

        form = QFormLayout()
        form.addRow("Cluster (login node)", self.cluster)
        form.addRow("Partition", self.partition)
        form.addRow("Account", self.account)
        form.addRow("QOS", self.qos)
        form.addRow("Time limit", self.time_limit)
        form.addRow("Job name", self.job_name)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.submit_button = self.buttons.addButton("Submit", QDialogButtonBox.ButtonRole.AcceptRole)
        self.submit_button.setObjectName("slurmSubmit")
        self.submit_button.setEnabled(False)
        self.buttons.accepted.connect(self._accept_if_valid)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.cluster_info)
        layout.addWidget(self.error)
        layout.addWidget(self.show_script)
        layout.addWidget(self.script, 1)
        layout.addWidget(self.buttons)
        for edit in (self.time_limit, self.job_name):
            edit.textChanged.connect(self._fields_changed)
        for combo in (self.partition, self.account, self.qos):
            combo.currentTextChanged.connect(self._fields_changed)
        self.resize(760, 620)
        self._load()

    @staticmethod
    def _editable(name: str, placeholder: str) -> QComboBox:
        combo = QComboBox()
        combo.setObjectName(name)
        combo.setEditable(True)
        line = combo.lineEdit()
        assert line is not None  # an editable combo box has one
        line.setPlaceholderText(placeholder)
        return combo

    # -- loading -----------------------------------------------------------------------------------

    def _load(self) -> None:
        db, slurm = self.context.db, self.context.slurm
        if db is None or slurm is None:
            self._problem("the console has no database or Slurm service")
            return
        name = self.profile_name

        def work(_progress: Progress) -> tuple[Profile, list[str]]:
            return profile_service.profile_for_launch(db, name), slurm.clusters()

        job = self.context.jobs.start(f"slurm dialog {name}", work)
        job.succeeded.connect(self._loaded)
        job.failed.connect(self._problem)

    def _loaded(self, answer: tuple[Profile, list[str]]) -> None:
        self.profile, clusters = answer
        saved = self.profile.slurm or SlurmSettings()
        self.partition.setCurrentText(saved.partition or "")
        self.account.setCurrentText(saved.account or "")
        self.qos.setCurrentText(saved.qos or "")
        self.time_limit.setText(saved.time or "")
        if not clusters:
            self.cluster_info.setText("No Slurm cluster: add its login node in the hosts view (Slurm login node).")
            return
        self.cluster.addItems(clusters)  # chooses the first: its info is read

    def _cluster_chosen(self, name: str) -> None:
        slurm = self.context.slurm
        self._fields_changed()
        if not name or slurm is None:
            return
        if name in self.infos:
            self._show_info(self.infos[name])
            return
        self.cluster_info.setText(f"Asking {name}'s login node for its partitions…")

        def work(_progress: Progress) -> SlurmClusterInfo:
            return slurm.info(name)

        job = self.context.jobs.start(f"slurm info {name}", work, abandon_on_cancel=True)
        job.succeeded.connect(self._info_read)
        job.failed.connect(lambda message: self._info_failed(name, message))

    def _info_read(self, info: SlurmClusterInfo) -> None:
        self.infos[info.login] = info
        if info.login == self.cluster.currentText():
            self._show_info(info)

    def _info_failed(self, name: str, message: str) -> None:
        if name == self.cluster.currentText():
            self.cluster_info.setText(f"{name}: could not be asked ({message}); fields may still be typed")
            self._fields_changed()

    def _show_info(self, info: SlurmClusterInfo) -> None:
        """Offer what the cluster has; what the profile or the operator chose stays."""
        for combo, names in (
            (self.partition, [p.name for p in info.partitions]),
            (self.account, list(info.accounts)),
            (self.qos, list(info.qos)),
        ):
            chosen = combo.currentText()
            combo.blockSignals(True)
            combo.clear()
            combo.addItems(names)
            combo.setCurrentText(chosen)
            combo.blockSignals(False)
        self.cluster_info.setText(cluster_text(info))
        self._fields_changed()

    # -- checking, showing, submitting -------------------------------------------------------------

    def _fields_changed(self) -> None:
        """A changed field makes a shown script stale: it is cleared (Show again prints the new one)."""
        self.script.clear()
        self.error.setVisible(False)
        self.submit_button.setEnabled(self.profile is not None and bool(self.cluster.currentText()))

    def _problem(self, message: str) -> None:
        self.error.setText(message)
        self.error.setVisible(True)

    def options(self) -> SlurmOptions:
        """The fields as Slurm options; InputError names the field that Slurm would refuse."""

        def value(text: str) -> str | None:
            return text.strip() or None

        return slurm_options(
            job_name=self.job_name.text().strip(),
            job_name_field="job name",
            partition=value(self.partition.currentText()),
            account=value(self.account.currentText()),
            qos=value(self.qos.currentText()),
            time_limit=value(self.time_limit.text()),
        )

    def submission(self) -> SlurmSubmission:
        """What Submit sends; InputError when a field is wrong or nothing is loaded yet."""
        if self.profile is None or not self.cluster.currentText():
            raise InputError("cluster", "choose a Slurm cluster (the profile and clusters are still loading)")
        return SlurmSubmission(self.cluster.currentText(), self.profile, self.options(), self.run_id)

    def preview(self) -> None:
        """The batch script Submit would send now, verbatim (asks the login node how its agent runs)."""
        slurm = self.context.slurm
        try:
            submission = self.submission()
        except InputError as exc:
            self._problem(str(exc))
            return
        assert slurm is not None  # submission() needs a loaded profile, which needs the service

        def work(_progress: Progress) -> str:
            return slurm.script(submission.cluster, submission.profile, submission.options, run_id=submission.run_id)

        self.script.setPlainText(f"# building the script on {submission.cluster}…")
        job = self.context.jobs.start(f"slurm script {self.profile_name}", work, abandon_on_cancel=True)
        job.succeeded.connect(self.script.setPlainText)
        job.failed.connect(self._preview_failed)

    def _preview_failed(self, message: str) -> None:
        self.script.clear()
        self._problem(message)

    def _accept_if_valid(self) -> None:
        try:
            self.submission()
        except InputError as exc:
            self._problem(str(exc))
            return
        self.accept()
