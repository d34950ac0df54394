"""Dialogs of the hosts view: adding a host, and deciding about a server's host key.

The add-host dialog checks the Prometheus exporter address as it is typed (HOST:PORT, core.host_address):
what is wrong shows under the form and OK waits until it is right or empty. The other fields are checked
by the hosts service when the host is added (their errors show in the view).

The host-key dialog shows what OpenSSH would: the name the key is filed under in known_hosts, the
key type and its SHA256 fingerprint. An unknown key can be accepted (it is saved to meshdeck's own
known_hosts) or refused; a changed key is only shown, with both fingerprints and the command that
removes the old entry — meshdeck never replaces a known key.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from meshdeck.core.errors import InputError
from meshdeck.core.host_address import parse_listen_address
from meshdeck.core.plural import counted
from meshdeck.services.hosts import HostKeyChanged, HostKeyUnknown


@dataclass(frozen=True)
class NewHost:
    name: str
    target: str
    port: int | None
    identity_file: str | None
    jump: str | None
    simulate: str | None
    prometheus: str | None = None  # HOST:PORT where its agent serves Prometheus metrics
    scheduler: str | None = None  # "slurm": a cluster's login node (its compute nodes are reached through it)
    node_port: int | None = None  # the compute nodes' SSH port (a Slurm login node only)


class AddHostDialog(QDialog):
    """Name, target (a ~/.ssh/config alias or user@address), and optional port, key, jump, simulation and
    Prometheus exporter address; or a Slurm cluster's login node (its compute nodes' SSH port beside it)."""

    def __init__(self, ssh_config_hosts: list[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("addHostDialog")
        self.setWindowTitle("Add host")
        self.name = QLineEdit()
        self.name.setObjectName("hostName")
        self.name.setPlaceholderText("gpu-a")
        self.target = QComboBox()
        self.target.setObjectName("hostTarget")
        self.target.setEditable(True)
        self.target.addItems(ssh_config_hosts)
        self.target.setCurrentText("")
        target_line = self.target.lineEdit()
        assert target_line is not None  # an editable combo box has one
        target_line.setPlaceholderText("alias from ~/.ssh/config, or user@address")
        self.target.currentTextChanged.connect(self._suggest_name)
        self.port = QSpinBox()
        self.port.setRange(0, 65535)
        self.port.setSpecialValueText("from ssh config / 22")
        self.identity = QLineEdit()
        self.identity.setPlaceholderText("from ssh config / ssh-agent")
        self.jump = QLineEdit()
        self.jump.setPlaceholderText("ProxyJump, e.g. bastion or user@bastion:2222")
        self.simulate = QLineEdit()
        self.simulate.setObjectName("hostSimulate")
        self.simulate.setPlaceholderText("empty: real GPUs; e.g. 8xH200: a simulated agent")
        self.prometheus = QLineEdit()
        self.prometheus.setObjectName("hostPrometheus")
        self.prometheus.setPlaceholderText("empty: none; HOST:PORT on the server, e.g. 10.0.0.5:9400")
        self.prometheus.setToolTip(
            "The agent also serves Prometheus metrics there, for your Prometheus to scrape. It applies when "
            "meshdeck starts the agent; one already running keeps its own settings (the host's reason says so)."
        )
        self.slurm = QCheckBox("a Slurm cluster's login node: jobs are submitted through it")
        self.slurm.setObjectName("hostSlurm")
        self.slurm.setToolTip(
            "meshdeck runs sinfo/sbatch/squeue/scancel there, and reaches the agents a job starts on its compute "
            "nodes with this host as the jump host"
        )
        self.node_port = QSpinBox()
        self.node_port.setObjectName("hostNodePort")
        self.node_port.setRange(0, 65535)
        self.node_port.setSpecialValueText("from ssh config / 22")
        self.node_port.setEnabled(False)
        self.slurm.toggled.connect(self.node_port.setEnabled)
        self.prometheus_error = QLabel()
        self.prometheus_error.setObjectName("fieldError")
        self.prometheus_error.setWordWrap(True)
        self.prometheus_error.setVisible(False)
        form = QFormLayout()
        form.addRow("Name", self.name)
        form.addRow("Target", self.target)
        form.addRow("Port", self.port)
        form.addRow("Key file", self.identity)
        form.addRow("Jump host", self.jump)
        form.addRow("Simulate", self.simulate)
        form.addRow("Prometheus exporter", self.prometheus)
        form.addRow("Slurm", self.slurm)
        form.addRow("Compute nodes' SSH port", self.node_port)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        if ssh_config_hosts:
            layout.addWidget(
                QLabel(f"{counted(len(ssh_config_hosts), 'host')} in ~/.ssh/config: pick one or type a target.")
            )
        layout.addLayout(form)
        layout.addWidget(self.prometheus_error)
        layout.addWidget(self.buttons)
        self.prometheus.textChanged.connect(self._check_prometheus)
        self.name.textChanged.connect(self._check_prometheus)

    def _check_prometheus(self) -> None:
        """Say what is wrong with the exporter address under the form; OK waits until it is right or empty."""
        text = self.prometheus.text().strip()
        problem = ""
        if text:
            try:
                parse_listen_address(text, f"Prometheus exporter (host {self.name.text().strip() or 'new'})")
            except InputError as exc:
                problem = str(exc)
        self.prometheus_error.setText(problem)
        self.prometheus_error.setVisible(bool(problem))
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        assert ok is not None  # the box was made with one
        ok.setEnabled(not problem)

    def _suggest_name(self, target: str) -> None:
        if not self.name.isModified():
            self.name.setText(target.rsplit("@", 1)[-1].split(":")[0])

    def new_host(self) -> NewHost:
        def text(edit: QLineEdit) -> str | None:
            return edit.text().strip() or None

        return NewHost(
            name=self.name.text().strip(),
            target=self.target.currentText().strip(),
            port=self.port.value() or None,
            identity_file=text(self.identity),
            jump=text(self.jump),
            simulate=text(self.simulate),
            prometheus=text(self.prometheus),
            scheduler="slurm" if self.slurm.isChecked() else None,
            node_port=(self.node_port.value() or None) if self.slurm.isChecked() else None,
        )


class HostKeyDialog(QDialog):
    """Accept or refuse an unknown key; a changed key can only be looked at."""

    def __init__(self, host: str, error: HostKeyUnknown | HostKeyChanged, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("hostKeyDialog")
        self.accept_button: QPushButton | None = None
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        layout = QVBoxLayout(self)
        form = QFormLayout()
        if isinstance(error, HostKeyUnknown):
            self.setWindowTitle(f"Unknown host key: {host}")
            layout.addWidget(
                QLabel(
                    f"{host} presented a host key that is in no known_hosts file. Compare the fingerprint with the "
                    "one the server's administrator gives you (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub) before "
                    "accepting it."
                )
            )
            form.addRow("known_hosts name", QLabel(error.known_hosts_name))
            form.addRow("Key type", QLabel(error.key_type))
            self.fingerprint = QLabel(error.fingerprint)
            self.fingerprint.setObjectName("fingerprint")
            self.fingerprint.setFont(mono)
            form.addRow("SHA256 fingerprint", self.fingerprint)
            if error.other_known_types:
                form.addRow("Also known for it", QLabel(", ".join(error.other_known_types)))
            buttons = QDialogButtonBox()
            self.accept_button = buttons.addButton("Accept and connect", QDialogButtonBox.ButtonRole.AcceptRole)
            self.accept_button.setObjectName("acceptKey")
            refuse = buttons.addButton("Refuse", QDialogButtonBox.ButtonRole.RejectRole)
            refuse.setObjectName("refuseKey")
            refuse.setDefault(True)  # Return must not trust a key
        else:
            self.setWindowTitle(f"HOST KEY CHANGED: {host}")
            warning = QLabel(
                f"The {error.key_type} key {host} presented differs from the one on record. This can be an attack; "
                "meshdeck refuses to connect and never replaces a known key."
            )
            warning.setObjectName("fieldError")
            warning.setWordWrap(True)
            layout.addWidget(warning)
            form.addRow("known_hosts name", QLabel(error.known_hosts_name))
            expected, presented = QLabel(error.expected), QLabel(error.presented)
            for label in (expected, presented):
                label.setFont(mono)
            self.fingerprint = presented
            form.addRow("On record", expected)
            form.addRow("Presented now", presented)
            form.addRow("Recorded in", QLabel(error.known_in))
            command = QLineEdit(f"ssh-keygen -R '{error.known_hosts_name}' -f {error.known_in}")
            command.setReadOnly(True)
            form.addRow("If the server was reinstalled", command)
            buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addLayout(form)
        layout.addWidget(buttons)
