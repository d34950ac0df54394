"""The hosts view: every stored or supervised host, its live state and why, its GPU load, and what to do.

Rows come from the database (stored hosts) and the fleet (supervised ones, e.g. the demo's local
agents). The state column follows the fleet's events — connecting, bootstrapping (the agent being
uploaded), connected, degraded, failed — with the reason in the last column: the HostsModel says which
host changed and only its row is redrawn (all rows when a host comes or goes). Like nvitop's header, each
row gives its GPUs' utilization (mean and max) and VRAM used / total from the newest sample, read from the
charts' live rings (`load.HostLoads`) for the hosts whose samples came, once per delivery pass.

The short numeric columns come first and are always on screen; the long ones (route, GPU models, reason)
are capped and elided, with the whole text as a tooltip and in the details under the table (the selected
host). A timer only ages labels, once a second while the view is shown: the "last sample" column and the
"retrying in N s" of hosts waiting to reconnect; a hidden view does nothing and catches up when shown.
A Slurm cluster's login node also shows, in the details, its partitions (nodes, GPUs per node, up/down), the
user's accounts and QOS — asked of the login node once it is connected and selected (a job), asked again after
it reconnects. A host that failed on an unknown or changed host key gets "Review host key…"; "Test connection" probes
the selected stored host once (a job: SSH never runs on the GUI thread). Adding, connecting,
disconnecting and removing run as jobs: they read ssh configs, write the database and wait for SSH threads.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QColor, QHideEvent, QResizeEvent, QShowEvent
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QPushButton,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from meshdeck.core.plural import counted
from meshdeck.services import hosts as host_service
from meshdeck.services.events import SamplesReceived
from meshdeck.services.hosts import HostKeyChanged, HostKeyUnknown, HostRecord, ProbeReport
from meshdeck.services.inventory import Inventory, describe_gpus
from meshdeck.services.slurm import SlurmClusterInfo, cluster_text
from meshdeck.ui import theme
from meshdeck.ui.context import ConsoleContext, HostView
from meshdeck.ui.jobs import Progress
from meshdeck.ui.views.hosts.dialogs import AddHostDialog, HostKeyDialog, NewHost
from meshdeck.ui.views.hosts.load import HostLoads
from meshdeck.ui.widgets.tables import row_table

log = logging.getLogger(__name__)

COLUMNS = ("host", "state", "GPU util", "VRAM", "last sample", "GPUs", "reached through", "reason")
HOST_COLUMN, STATE_COLUMN, UTIL_COLUMN, VRAM_COLUMN, AGE_COLUMN, GPUS_COLUMN, THROUGH_COLUMN, REASON_COLUMN = range(
    len(COLUMNS)
)
# Where the columns do not fit, the long ones give way, the reason first, down to these widths (px; elided,
# the whole text in the tooltip and the details) so that the numeric ones, first, stay on screen; the
# reason, last, stretches over what is left.
CAPPED_WIDTHS = {REASON_COLUMN: 320, THROUGH_COLUMN: 220, GPUS_COLUMN: 240}
BUSY_STATES = ("connecting", "bootstrapping")


def reason_text(view: HostView, now: float | None = None) -> str:
    """The reason as a row shows it: a host waiting to reconnect counts down to its next try."""
    if view.retry_at is None or view.state != "disconnected":
        return view.reason
    left = view.retry_at - (time.time() if now is None else now)
    return f"{view.cause} ({f'retrying in {left:.0f} s' if left >= 0.5 else 'retrying now'})"


def probe_summary(name: str, report: host_service.ProbeReport) -> str:
    agent = "uploaded" if report.uploaded else "already there"
    return (
        f"{name}: reached {report.route} with {report.auth}; host key {report.host_key}; python "
        f"{report.python_version} on {report.machine}; agent {report.agent_version} {agent}; "
        f"{counted(len(report.inventory.gpus), 'GPU')} in {report.seconds:.1f} s"
        + (f"; {report.note}" if report.note else "")
    )


def gpu_summary(inventory: Inventory | None) -> str:
    if inventory is None:
        return "—"
    text = describe_gpus(inventory)
    text += f", driver {inventory.driver}" if inventory.driver else ""
    return text + (" (simulated)" if inventory.simulated else "")


class HostsView(QWidget):
    def __init__(self, context: ConsoleContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("hostsView")
        self.context = context
        self.records: dict[str, HostRecord] = {}
        self.ssh_config_hosts: list[str] = []
        self._names: list[str] = []  # the hosts as the rows show them
        self._row_of: dict[str, int] = {}
        self._stale = True  # something changed while hidden: redraw every row when shown
        self._fit_pending = False  # rows came: the columns are sized to them once events are absorbed
        self._natural_widths: list[int] = []  # each column's width for its contents, when last measured
        self.redraws = 0  # how many times every row was drawn
        self.rows_drawn = 0  # rows drawn, one by one or all together
        self._select_next: str | None = None  # a host to select once the rows are drawn (asked while hidden)
        self.clusters: dict[str, str] = {}  # Slurm login node -> what its cluster said (or why it could not)
        self._clusters_asked: set[str] = set()  # login nodes being asked now

        self.loads = HostLoads(context.live)
        self._loads_due: set[str] = set()  # hosts whose samples came in this delivery pass
        self._loads_stale = False  # samples came while hidden
        self._retrying: set[str] = set()  # hosts whose reason counts down (the timer redraws those cells)
        self.table = row_table("hostsTable", COLUMNS, stretch_last=True)
        # Sized to the contents once per redraw of all rows, not on every changed cell: ResizeToContents
        # measures every row per change, and the age column changes every second (5 s a tick at 278 hosts).
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.table.setWordWrap(False)
        self.table.itemSelectionChanged.connect(self._update_buttons)

        self.add_button = QPushButton("Add host…")
        self.add_button.setObjectName("addHost")
        self.connect_button = QPushButton("Connect")
        self.connect_button.setObjectName("connectHost")
        self.disconnect_button = QPushButton("Disconnect")
        self.disconnect_button.setObjectName("disconnectHost")
        self.retry_button = QPushButton("Retry")
        self.retry_button.setObjectName("retryHost")
        self.key_button = QPushButton("Review host key…")
        self.key_button.setObjectName("reviewHostKey")
        self.remove_button = QPushButton("Remove")
        self.remove_button.setObjectName("removeHost")
        self.probe_button = QPushButton("Test connection")
        self.probe_button.setObjectName("probeHost")
        self.probe_button.setToolTip("Connect once, bootstrap the agent if needed, and report what was found")
        self.add_button.clicked.connect(self.add_host)
        self.connect_button.clicked.connect(lambda: self.connect_host(self.selected()))
        self.disconnect_button.clicked.connect(lambda: self.disconnect_host(self.selected()))
        self.retry_button.clicked.connect(lambda: self.retry_host(self.selected()))
        self.key_button.clicked.connect(lambda: self.review_host_key(self.selected()))
        self.remove_button.clicked.connect(lambda: self.remove_host(self.selected()))
        self.probe_button.clicked.connect(lambda: self.probe_host(self.selected()))
        buttons = QHBoxLayout()
        for button in (
            self.add_button,
            self.connect_button,
            self.disconnect_button,
            self.retry_button,
            self.probe_button,
            self.key_button,
        ):
            buttons.addWidget(button)
        buttons.addStretch(1)
        buttons.addWidget(self.remove_button)
        self.details = QLabel()  # the selected host in full: what the capped columns cut
        self.details.setObjectName("hostDetails")
        self.details.setWordWrap(True)
        self.details.setTextFormat(Qt.TextFormat.PlainText)  # reasons and names come from servers
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message = QLabel()
        self.message.setObjectName("hostsMessage")
        self.message.setWordWrap(True)
        self.message.setTextFormat(Qt.TextFormat.PlainText)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        layout = QVBoxLayout(self)
        layout.addLayout(buttons)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.details)
        layout.addWidget(self.message)

        assert context.hosts is not None
        context.hosts.changed.connect(self._host_changed)
        context.bridge.samples_received.connect(self._samples_received)
        self._ages = QTimer(self)  # ages the "last sample" column only, while shown
        self._ages.setInterval(1000)
        self._ages.timeout.connect(self._age_rows)
        self.reload_records()
        self.refresh()

    # ------------------------------------------------------------------ data

    def reload_records(self) -> None:
        db = self.context.db
        if db is None:
            return

        def work(_progress: Progress) -> tuple[list[HostRecord], list[str]]:
            settings = self.context.fleet.settings if self.context.fleet else None
            return host_service.list_hosts(db), host_service.ssh_config_aliases(settings)

        job = self.context.jobs.start("load hosts", work)
        job.succeeded.connect(self._records_loaded)

    def _records_loaded(self, answer: tuple[list[HostRecord], list[str]]) -> None:
        records, self.ssh_config_hosts = answer
        self.records = {r.name: r for r in records}
        self.refresh()

    def host_names(self) -> list[str]:
        assert self.context.hosts is not None
        names = set(self.records) | set(self.context.hosts.hosts)
        if self.context.fleet is not None:
            names |= set(self.context.fleet.hosts())
        return sorted(names)

    def _through(self, name: str) -> str:
        record = self.records.get(name)
        if record is not None:
            via = record.target + (f":{record.port}" if record.port else "")
            via += f" via {record.jump}" if record.jump else ""
            via += f" (simulate {record.simulate})" if record.simulate else ""
            via += " (Slurm login node)" if record.scheduler == "slurm" else ""
            return via + (f" (exporter {record.prometheus})" if record.prometheus else "")
        if self.context.fleet is not None and name in self.context.fleet.hosts():
            return self.context.fleet.supervisor(name).connector.describe()
        return "—"

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._stale:
            self.refresh()
        elif self._loads_stale:  # samples came while hidden: every row's load, once
            self._loads_due.update(self._names)
            self._draw_loads()
        self._loads_stale = False
        self._ages.start()

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self._ages.stop()

    def refresh(self) -> None:
        """Draw every row (the hosts came or went); hidden: only remember to when shown."""
        if not self.isVisible():
            self._stale = True
            return
        self._stale = False
        self.redraws += 1
        selected, self._select_next = self._select_next or self.selected(), None
        self._names = self.host_names()
        self._row_of = {name: row for row, name in enumerate(self._names)}
        self.table.setRowCount(len(self._names))
        supervised = self._supervised()
        self._retrying.clear()
        for row, name in enumerate(self._names):
            self._draw_row(row, name, supervised)
            self._draw_load(row, name)
        self._fit_columns()
        if selected in self._row_of:
            self.table.selectRow(self._row_of[selected])
        self._update_buttons()

    def _supervised(self) -> set[str]:
        return set(self.context.fleet.hosts()) if self.context.fleet else set()

    def _host_changed(self, name: str) -> None:
        """The model has news of `name`: redraw its row; a host that came gets a row of its own at its
        place (hundreds connecting together are not hundreds of redraws of every row); one that went
        redraws every row."""
        if not self.isVisible():
            self._stale = True
            return
        assert self.context.hosts is not None
        view = self.context.hosts.hosts.get(name)
        if view is None or view.state not in ("connected", "degraded"):
            self.clusters.pop(name, None)  # read again once it is back
        row = self._row_of.get(name)
        if row is None:
            names = self.host_names()
            if len(names) != len(self._names) + 1 or name not in names:
                self.refresh()
                return
            row = bisect.bisect_left(self._names, name)
            self.table.insertRow(row)
            self._names.insert(row, name)
            self._row_of = {host: index for index, host in enumerate(self._names)}
            self._fit_columns_soon()
            self._draw_load(row, name)
        elif name not in self.context.hosts.hosts and name not in self.records:
            self.loads.forget(name)
            self.refresh()  # it went
            return
        self._draw_row(row, name, self._supervised())
        self._update_buttons()

    def _samples_received(self, event: SamplesReceived) -> None:
        """Samples of a host came (the live rings have them already): its load cells are redrawn once the
        delivery pass is over, however many batches it brought. Hidden: nothing (shown, every row is)."""
        if not self.isVisible():
            self._loads_stale = True
            return
        if event.host not in self._row_of:
            return
        if not self._loads_due:
            QTimer.singleShot(0, self._draw_loads)
        self._loads_due.add(event.host)

    def _draw_loads(self) -> None:
        due, self._loads_due = self._loads_due, set()
        for name in due:
            row = self._row_of.get(name)
            if row is not None:
                self._draw_load(row, name)
        if self.selected() in due:
            self._show_details()

    def _draw_load(self, row: int, name: str) -> None:
        load = self.loads.load(name)
        cells = (load.util_text(), load.vram_text()) if load is not None else ("—", "—")
        for column, text in zip((UTIL_COLUMN, VRAM_COLUMN), cells, strict=True):
            item = self._item(row, column)
            if item.text() != text:
                item.setText(text)

    def _fit_columns_soon(self) -> None:
        """Size the columns to their contents once the events of this pass are absorbed (measuring every
        row is what made ResizeToContents slow)."""
        if not self._fit_pending:
            self._fit_pending = True
            QTimer.singleShot(0, self._fit_columns)

    def _fit_columns(self) -> None:
        """Every column to its contents, then the long ones cut where they do not all fit."""
        self._fit_pending = False
        self.table.resizeColumnsToContents()
        header = self.table.horizontalHeader()
        self._natural_widths = [header.sectionSize(column) for column in range(len(COLUMNS))]
        self._cut_long_columns()

    def _cut_long_columns(self) -> None:
        """Narrow the reason, the route and the GPU models (in that order, down to their caps) by what the
        columns exceed the table's width; no measuring of rows."""
        if not self._natural_widths:
            return
        widths = list(self._natural_widths)
        excess = sum(widths) - self.table.viewport().width()
        for column, cap in CAPPED_WIDTHS.items():
            cut = min(max(excess, 0), max(widths[column] - cap, 0))
            widths[column] -= cut
            excess -= cut
        header = self.table.horizontalHeader()
        for column, width in enumerate(widths):
            if header.sectionSize(column) != width:
                header.resizeSection(column, width)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._cut_long_columns()

    def _draw_row(self, row: int, name: str, supervised: set[str]) -> None:
        assert self.context.hosts is not None
        self.rows_drawn += 1
        view = self.context.hosts.hosts.get(name) or HostView(name)
        state = view.state if name in supervised or view.state != "disconnected" else "not connected"
        if state in BUSY_STATES:
            state += "…"
        if view.retry_at is not None and view.state == "disconnected":
            self._retrying.add(name)
        else:
            self._retrying.discard(name)
        cells = {
            HOST_COLUMN: name,
            STATE_COLUMN: state,
            AGE_COLUMN: self._age(view),
            GPUS_COLUMN: gpu_summary(view.inventory),
            THROUGH_COLUMN: self._through(name),
            REASON_COLUMN: reason_text(view),
        }
        for column, text in cells.items():
            item = self._item(row, column)
            if item.text() != text:
                item.setText(text)
                if column in CAPPED_WIDTHS:
                    item.setToolTip(text)  # what the elided cell cuts
            if column == STATE_COLUMN:
                item.setForeground(QColor(theme.STATE_COLORS.get(view.state, "#757575")))

    def _age_rows(self, now: float | None = None) -> None:
        """The timer's one job, ageing labels: how long ago each host's last sample came, and how long a
        host waiting to reconnect has left."""
        assert self.context.hosts is not None
        hosts = self.context.hosts.hosts
        for row, name in enumerate(self._names):
            text = self._age(hosts.get(name) or HostView(name), now)
            item = self._item(row, AGE_COLUMN)
            if item.text() != text:
                item.setText(text)
        for name in self._retrying:
            at, view = self._row_of.get(name), hosts.get(name)
            if at is None or view is None:
                continue
            text = reason_text(view, now)
            item = self._item(at, REASON_COLUMN)
            if item.text() != text:
                item.setText(text)
                item.setToolTip(text)
        if self.selected() in self._retrying:
            self._show_details(now)

    @staticmethod
    def _age(view: HostView, now: float | None = None) -> str:
        if not view.last_sample_ts:
            return "—"
        return f"{(time.time() if now is None else now) - view.last_sample_ts:.0f} s ago"

    def _item(self, row: int, column: int) -> QTableWidgetItem:
        item = self.table.item(row, column)
        if item is None:
            item = QTableWidgetItem()
            self.table.setItem(row, column, item)
        return item

    def select_host(self, name: str) -> None:
        """Select `name`'s row; hidden, or before its row is drawn, when the rows are next drawn."""
        self._select_next = name
        if name in self._row_of and not self._stale:
            self.table.selectRow(self._row_of[name])
            self._select_next = None

    def selected(self) -> str | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        item = self.table.item(rows[0].row(), 0)
        return item.text() if item else None

    def _update_buttons(self) -> None:
        name = self.selected()
        assert self.context.hosts is not None
        view = self.context.hosts.hosts.get(name or "")
        supervised = bool(name and self.context.fleet and name in self.context.fleet.hosts())
        self.connect_button.setEnabled(bool(name in self.records and not supervised))
        self.disconnect_button.setEnabled(supervised)
        self.retry_button.setEnabled(supervised and view is not None and view.state in ("failed", "disconnected"))
        self.key_button.setEnabled(view is not None and isinstance(view.error, HostKeyUnknown | HostKeyChanged))
        self.remove_button.setEnabled(name in self.records)
        self.probe_button.setEnabled(name in self.records and self.context.fleet is not None)
        self.add_button.setEnabled(self.context.db is not None and self.context.fleet is not None)
        self._show_details()

    def _show_details(self, now: float | None = None) -> None:
        """The selected host in full, what the capped columns cut: state and reason, route, GPUs, load."""
        name = self.selected()
        if not name:
            self.details.setText("Select a host to see its whole reason, route and GPUs.")
            return
        assert self.context.hosts is not None
        view = self.context.hosts.hosts.get(name) or HostView(name)
        reason = reason_text(view, now)
        load = self.loads.load(name)
        lines = [
            f"{name}: {view.state}" + (f" — {reason}" if reason else ""),
            f"reached through {self._through(name)}",
            f"GPUs: {gpu_summary(view.inventory)}",
        ]
        if load is not None:
            lines.append(f"GPU utilization {load.util_text()}; VRAM {load.vram_text()}")
        record = self.records.get(name)
        if record is not None and record.scheduler == "slurm":
            lines.append(self._cluster_details(name, view))
        text = "\n".join(lines)
        if self.details.text() != text:
            self.details.setText(text)

    def _cluster_details(self, name: str, view: HostView) -> str:
        """A Slurm login node's cluster (partitions, GPUs per node, accounts, QOS), read once it is connected."""
        known = self.clusters.get(name)
        if known is not None:
            return known
        if view.state not in ("connected", "degraded") or self.context.slurm is None:
            return "Slurm cluster: its partitions, accounts and QOS are read once the login node is connected"
        self._read_cluster(name)
        return f"Slurm cluster: asking {name} for its partitions…"

    def _read_cluster(self, name: str) -> None:
        slurm = self.context.slurm
        if slurm is None or name in self._clusters_asked:
            return
        self._clusters_asked.add(name)

        def work(_progress: Progress) -> SlurmClusterInfo:
            return slurm.info(name)

        job = self.context.jobs.start(f"hosts slurm info {name}", work, abandon_on_cancel=True)
        job.succeeded.connect(lambda info: self._cluster_read(name, cluster_text(info)))
        job.failed.connect(lambda message: self._cluster_read(name, f"Slurm cluster: could not be asked: {message}"))
        job.ended.connect(lambda: self._clusters_asked.discard(name))

    def _cluster_read(self, name: str, text: str) -> None:
        self.clusters[name] = text
        if self.selected() == name:
            self._show_details()

    # ------------------------------------------------------------------ actions

    def _run(self, name: str, work: Callable[[Progress], object], done: str) -> None:
        job = self.context.jobs.start(name, work)
        job.succeeded.connect(lambda _result: self._say(done))
        job.failed.connect(lambda message: self._say(message, error=True))
        job.ended.connect(self.reload_records)

    def _say(self, text: str, error: bool = False) -> None:
        self.message.setText(text)
        self.message.setObjectName("fieldError" if error else "hostsMessage")
        self.message.style().unpolish(self.message)
        self.message.style().polish(self.message)

    def add_host(self) -> None:
        dialog = AddHostDialog(self.ssh_config_hosts, self)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return
        self.add(dialog.new_host())

    def add(self, new: NewHost) -> None:
        db, fleet = self.context.db, self.context.fleet
        assert db is not None and fleet is not None

        def work(_progress: Progress) -> HostRecord:
            record = host_service.add_host(
                db,
                new.name,
                new.target,
                port=new.port,
                identity_file=new.identity_file,
                jump=new.jump,
                simulate=new.simulate,
                prometheus=new.prometheus,
                settings=fleet.settings,
                scheduler=new.scheduler,
                node_port=new.node_port,
            )
            fleet.add_record(record)
            return record

        self._run(f"add host {new.name}", work, f"{new.name} added; connecting…")

    def connect_host(self, name: str | None) -> None:
        record = self.records.get(name or "")
        fleet = self.context.fleet
        if record is None or fleet is None:
            return
        self._run(f"connect {record.name}", lambda _p: fleet.add_record(record), f"connecting to {record.name}…")

    def disconnect_host(self, name: str | None) -> None:
        fleet = self.context.fleet
        if not name or fleet is None:
            return
        self._run(
            f"disconnect {name}", lambda _p: fleet.remove_host(name), f"{name} disconnected (its agent keeps running)"
        )

    def retry_host(self, name: str | None) -> None:
        if name and self.context.fleet is not None:
            self.context.fleet.retry(name)  # wakes the supervisor thread; no I/O here

    def remove_host(self, name: str | None) -> None:
        db, fleet = self.context.db, self.context.fleet
        if not name or db is None:
            return
        answer = QMessageBox.question(self, "Remove host", f"Forget {name}? Its agent and workers keep running.")
        if answer != QMessageBox.StandardButton.Yes:
            return

        def work(_progress: Progress) -> None:
            if fleet is not None and name in fleet.hosts():
                fleet.remove_host(name)
            host_service.remove_host(db, name)

        self._run(f"remove {name}", work, f"{name} removed")
        assert self.context.hosts is not None
        self.context.hosts.forget(name)

    def probe_host(self, name: str | None) -> None:
        """Connect once and bootstrap, showing each step (probing python, uploading the agent, ...)."""
        record = self.records.get(name or "")
        fleet = self.context.fleet
        if record is None or fleet is None:
            return

        def work(progress: Progress) -> ProbeReport:
            return host_service.probe(
                record.target,
                port=record.port,
                identity_file=record.identity_file,
                jump=record.jump,
                simulate=record.simulate,
                prometheus=record.prometheus,
                settings=fleet.settings,
                progress=lambda message: progress.report(None, message),
            )

        job = self.context.jobs.start(f"test {record.name}", work)
        job.progressed.connect(lambda _fraction, message: self._say(f"{record.name}: {message}…"))
        job.succeeded.connect(lambda report: self._say(probe_summary(record.name, report)))
        job.failed.connect(lambda message: self._probe_failed(record.name, job.exception, message))

    def _probe_failed(self, name: str, error: BaseException | None, message: str) -> None:
        if isinstance(error, HostKeyUnknown | HostKeyChanged):
            dialog = HostKeyDialog(name, error, self)
            accepted = dialog.exec() == QDialog.DialogCode.Accepted
            if accepted and isinstance(error, HostKeyUnknown) and self.context.fleet is not None:
                store = self.context.fleet.host_keys
                self._run(
                    f"accept key of {name}",
                    lambda _p: store.accept(error.known_hosts_name, error.key_type, error.key_base64),
                    f"{name}: {error.key_type} {error.fingerprint} saved; test again to connect",
                )
                return
        self._say(message, error=True)

    def review_host_key(self, name: str | None) -> None:
        assert self.context.hosts is not None
        view = self.context.hosts.hosts.get(name or "")
        if view is None or not isinstance(view.error, HostKeyUnknown | HostKeyChanged):
            return
        dialog = HostKeyDialog(view.name, view.error, self)
        accepted = dialog.exec() == QDialog.DialogCode.Accepted
        self.decide_host_key(view.name, view.error, accepted)

    def decide_host_key(self, name: str, error: HostKeyUnknown | HostKeyChanged, accepted: bool) -> None:
        """Save an accepted unknown key and reconnect; a refused or changed key leaves the host failed."""
        fleet = self.context.fleet
        if not accepted or isinstance(error, HostKeyChanged) or fleet is None:
            self._say(f"{name}: host key not accepted; the host stays disconnected", error=True)
            return
        self._run(
            f"accept key of {name}",
            lambda _p: fleet.accept_host_key(name, error),
            f"{name}: {error.key_type} {error.fingerprint} saved to meshdeck's known_hosts; reconnecting…",
        )
