"""The processes view: which processes hold each GPU, per host — nvitop's process table for the fleet.

A view of its own, not a tab of Hosts or Fleet: nvitop's users open its process list as the first thing
they look at ("who is on GPU 3?"), beside the GPU panel, not behind another screen; Hosts is about
connections and Fleet about metrics. One row per process and GPU: host, GPU index, PID, type (nvitop's
C / G / C+G), user, GPU memory (GiB), the meshdeck deployment and part it belongs to (its worker, or a
descendant of it such as a vLLM engine core), and the command line. Everything the agent sent is shown
escaped (core.text through the services' *_text); a command line is cut in the middle of its cell (its end
names the model) and whole, as far as the agent sent it, in its tooltip.

While shown, the view asks every chosen host's agent every REFRESH_MS (nvitop's default 2 s) through the
services' ProcessPoller: off the GUI thread, never a second request to a host before the first answered. A
host that cannot list them says why below the table (an agent too old for the `processes` method says so).
"All connected hosts" asks at most MAX_HOSTS hosts: pick one for a bigger fleet.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QHideEvent, QShowEvent
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QTableWidgetItem, QVBoxLayout, QWidget

from meshdeck.core.plural import counted
from meshdeck.core.text import printable
from meshdeck.services.processes import HostProcesses, Outcome, ProcessesUnavailable, ProcessPoller, ProcessRow
from meshdeck.ui.context import ConsoleContext
from meshdeck.ui.widgets.tables import row_table

REFRESH_MS = 2000
MAX_HOSTS = 32
ALL_HOSTS = "All connected hosts"
COLUMNS = ("Host", "GPU", "PID", "Type", "User", "GPU memory", "Deployment / part", "Command")


def _item(text: str, *, number: bool = False, tip: str | None = None) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    if number:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    if tip:
        item.setToolTip(tip)
    return item


class ProcessesView(QWidget):
    _arrived = Signal(str, object)  # host, HostProcesses | ProcessesUnavailable (from a poller thread)

    def __init__(self, context: ConsoleContext, parent: QWidget | None = None, *, refresh_ms: int = REFRESH_MS) -> None:
        super().__init__(parent)
        self.setObjectName("processesView")
        self.context = context
        self.outcomes: dict[str, Outcome] = {}  # host -> its last answer, or why there is none
        self.answered_at: dict[str, float] = {}
        self.host = QComboBox()
        self.host.setObjectName("processesHost")
        self.host.setAccessibleName("Host")
        self.host.addItem(ALL_HOSTS)
        self.host.currentIndexChanged.connect(self._host_chosen)
        self.status = QLabel()
        self.status.setObjectName("processesStatus")
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setWordWrap(True)  # never wider than the view at 1280 px
        top = QHBoxLayout()
        top.addWidget(QLabel("Host"))
        top.addWidget(self.host)
        top.addWidget(self.status, 1)
        self.table = row_table("processesTable", COLUMNS, stretch_last=True)
        self.table.setWordWrap(False)
        # a command line's end says the most (`python -m ... vllm serve MODEL`): cut in its middle
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.problems = QLabel()
        self.problems.setObjectName("processesProblems")
        self.problems.setWordWrap(True)
        self.problems.setTextFormat(Qt.TextFormat.PlainText)  # reasons come from servers
        self.problems.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.problems)

        self._arrived.connect(self._on_outcome, Qt.ConnectionType.QueuedConnection)
        self.poller: ProcessPoller | None = None
        fleet = context.fleet
        if fleet is not None:
            self.poller = ProcessPoller(fleet, self._arrived.emit, agent_version=self._agent_version)
            context.on_shutdown.append(self.poller.close)
        self.timer = QTimer(self)
        self.timer.setInterval(refresh_ms)
        self.timer.timeout.connect(self.poll)
        assert context.hosts is not None
        context.hosts.changed.connect(self._hosts_changed)
        self._hosts_changed()

    # ------------------------------------------------------------------ hosts

    def connected_hosts(self) -> list[str]:
        assert self.context.hosts is not None
        hosts = self.context.hosts.hosts
        return sorted(name for name, view in hosts.items() if view.state in ("connected", "degraded"))

    def chosen_hosts(self) -> list[str]:
        """The hosts the table shows and asks: the one picked, or (all) the first MAX_HOSTS connected ones."""
        connected = self.connected_hosts()
        picked = self.host.currentData()
        if picked is not None:
            return [picked] if picked in connected else []
        return connected[:MAX_HOSTS]

    def _agent_version(self, host: str) -> str | None:
        fleet = self.context.fleet
        try:
            return fleet.status(host).agent_version if fleet is not None else None
        except Exception:  # no longer in the fleet
            return None

    def _hosts_changed(self, _host: str = "") -> None:
        connected = self.connected_hosts()
        current = self.host.currentData()
        names = [self.host.itemData(i) for i in range(1, self.host.count())]
        if names != connected:
            self.host.blockSignals(True)
            self.host.clear()
            self.host.addItem(ALL_HOSTS)
            for name in connected:
                self.host.addItem(printable(name, 64), name)
            index = self.host.findData(current) if current is not None else 0
            self.host.setCurrentIndex(max(0, index))
            self.host.blockSignals(False)
        for gone in set(self.outcomes) - set(connected):
            del self.outcomes[gone]
            self.answered_at.pop(gone, None)
        if self.isVisible():
            self.redraw()

    def _host_chosen(self, _index: int) -> None:
        self.redraw()
        self.poll()

    # ------------------------------------------------------------------ polling

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.redraw()
        self.poll()
        self.timer.start()

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self.timer.stop()

    def poll(self) -> None:
        """Ask each chosen host that has no request in flight (the poller skips the others)."""
        if self.poller is None or not self.isVisible():
            return
        for host in self.chosen_hosts():
            self.poller.request(host)

    def _on_outcome(self, host: str, outcome: Outcome) -> None:
        if host not in self.connected_hosts():
            return  # it went away meanwhile
        self.outcomes[host] = outcome
        self.answered_at[host] = time.monotonic()
        if self.isVisible():
            self.redraw()

    # ------------------------------------------------------------------ drawing

    def redraw(self) -> None:
        hosts = self.chosen_hosts()
        listings = [o for h in hosts if isinstance(o := self.outcomes.get(h), HostProcesses)]
        rows = [row for listing in listings for row in listing.rows]
        self.table.setUpdatesEnabled(False)
        try:
            self.table.setRowCount(len(rows))
            simulated = {listing.host for listing in listings if listing.simulated}
            for index, row in enumerate(rows):
                host = printable(row.host, 64) + (" (simulated)" if row.host in simulated else "")
                cells = (
                    _item(host),
                    _item(str(row.gpu), number=True),
                    _item(str(row.pid), number=True),
                    _item(row.kind_code, tip=row.kind),
                    _item(row.user_text, tip=None if row.uid is None else f"uid {row.uid}"),
                    _item(row.memory_text, number=True),
                    _item(row.owner_text or "—", tip=None if row.worker_id is None else self._worker_tip(row)),
                    _item(row.command_text, tip=row.command_text),
                )
                for column, item in enumerate(cells):
                    self.table.setItem(index, column, item)
        finally:
            self.table.setUpdatesEnabled(True)
        self.status.setText(self._status_text(hosts, listings))
        self.problems.setText(self._problems_text(hosts))

    @staticmethod
    def _worker_tip(row: ProcessRow) -> str:
        name = f" ({row.worker_name})" if row.worker_name else ""
        return printable(f"agent worker {row.worker_id}{name}", 300)

    def _status_text(self, hosts: Sequence[str], listings: Sequence[HostProcesses]) -> str:
        if self.poller is None:
            return "No fleet: processes are listed for connected hosts."
        if not hosts:
            return "No connected host: connect one in Hosts to see which processes hold its GPUs."
        processes = sum(len(listing.rows) for listing in listings)
        gpus = sum(len(listing.gpus) for listing in listings)
        idle = sum(len(set(listing.gpus) - {r.gpu for r in listing.rows}) for listing in listings)
        waiting = [h for h in hosts if h not in self.outcomes]
        text = f"{counted(processes, 'process', 'processes')} on {counted(gpus, 'GPU')} of {counted(len(listings), 'host')}"
        text += f"; {counted(idle, 'GPU')} without any"
        if waiting:
            text += f"; asking {counted(len(waiting), 'host')}…"
        connected = len(self.connected_hosts())
        if self.host.currentData() is None and connected > MAX_HOSTS:
            text += f"; showing {MAX_HOSTS} of {connected} hosts: pick one above"
        return text + f" — refreshed every {self.timer.interval() / 1000:g} s while shown"

    def _problems_text(self, hosts: Sequence[str]) -> str:
        lines = []
        for host in hosts:
            outcome = self.outcomes.get(host)
            if isinstance(outcome, ProcessesUnavailable):
                lines.append(outcome.message)  # escaped by the services
            elif isinstance(outcome, HostProcesses):
                if not outcome.gpus:
                    why = printable(outcome.reason, 300) if outcome.reason else "the agent reports none"
                    lines.append(f"{printable(host, 64)}: no GPUs ({why})")
                if outcome.omitted:
                    lines.append(f"{printable(host, 64)}: {outcome.omitted} more process(es) not listed")
        return "\n".join(lines)

    def shutdown(self) -> None:
        """Stop asking (also done at the console's shutdown)."""
        self.timer.stop()
        if self.poller is not None:
            self.poller.close()
