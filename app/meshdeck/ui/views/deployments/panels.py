"""The detail panels of a deployment: its workers, the NCCL transports each rank reported, and planned
beside measured.

Workers come from the deployment registry's snapshot (kept current by the fleet's `worker` events).
The log tab is log.py.
NCCL transports come from the agents' `log` events of kind nccl_transport (NCCL_DEBUG=INFO channel
lines): per rank, which transport reached which peer. Planned numbers are the planner's prediction
the launch carried; measured ones are what vLLM's startup log printed (parsed by the agent).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from PySide6.QtGui import QColor, QShowEvent
from PySide6.QtWidgets import (
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from meshdeck.core.plural import counted
from meshdeck.services.deployments.model import DeploymentSnapshot, describe_exit
from meshdeck.services.events import AgentEvent
from meshdeck.ui import theme
from meshdeck.ui.widgets.tables import row_table

GIB = 1 << 30
WORKER_COLUMNS = ("command", "host", "stage", "state", "restarts", "exit", "reason")
COMPARED = (
    ("weights_gib", "weights per GPU (GiB)", 2),
    ("available_kv_gib", "KV cache per GPU (GiB)", 2),
    ("kv_cache_tokens", "KV tokens per DP engine", 0),
    ("max_concurrency", "max concurrency at max_model_len", 2),
)


def set_row(table: QTableWidget, row: int, values: tuple[str, ...]) -> list[QTableWidgetItem]:
    """Put `values` in `row` (an item is written only when its text changed); returns the row's items."""
    items = []
    for column, text in enumerate(values):
        item = table.item(row, column)
        if item is None:
            item = QTableWidgetItem(text)
            table.setItem(row, column, item)
        elif item.text() != text:
            item.setText(text)
        items.append(item)
    return items


class WorkersPanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.table = row_table("deploymentWorkers", WORKER_COLUMNS)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table)

    def show_snapshot(self, snapshot: DeploymentSnapshot | None) -> None:
        workers = snapshot.workers if snapshot else ()
        self.table.setRowCount(len(workers))
        for row, worker in enumerate(workers):
            exit_text = (
                describe_exit(worker.state, worker.exit_code, worker.signal, "")
                if worker.exit_code is not None or worker.signal
                else ""
            )
            items = set_row(
                self.table,
                row,
                (
                    worker.command,
                    worker.host,
                    str(worker.stage),
                    worker.state,
                    str(worker.restarts),
                    exit_text,
                    worker.reason,
                ),
            )
            items[3].setForeground(QColor(theme.STATE_COLORS.get(worker.state, "#757575")))


class NcclPanel(QWidget):
    """Per rank: the transports NCCL chose to each peer, from `nccl_transport` log events. Events of
    every deployment are kept (workers are `<deployment>.<command>`); the table shows one deployment."""

    COLUMNS = ("worker", "rank", "transport", "peers", "channels", "GPU Direct RDMA")

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.table = row_table("ncclTransports", self.COLUMNS)
        self.network = QLabel("No NCCL_DEBUG=INFO lines yet (gloo on CPU and simulated vLLM print none).")
        self.network.setObjectName("ncclNetwork")
        self.network.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(self.network)
        layout.addWidget(self.table, 1)
        self._links: dict[tuple[str, int, str], dict[str, Any]] = {}
        self._networks: dict[str, str] = {}
        self._events: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}  # deployment -> (worker, fields)
        self.deployment: str | None = None  # the one shown
        self._stale = False  # rows arrived while hidden: drawn when shown

    def agent_event(self, event: AgentEvent) -> None:
        """Keep an agent's nccl_transport log event; show it when it belongs to the deployment shown."""
        if event.event != "log" or event.data.get("kind") != "nccl_transport":
            return
        worker = str(event.data.get("worker"))
        deployment = worker.rsplit(".", 1)[0]
        fields = event.data.get("fields") or {}
        self._events.setdefault(deployment, []).append((worker, fields))
        if deployment == self.deployment:
            self.add(worker, fields)

    def show_deployment(self, deployment: str | None) -> None:
        self.deployment = deployment
        self.clear()
        for worker, fields in self._events.get(deployment or "", []):
            self.add(worker, fields)

    def clear(self) -> None:
        self._links.clear()
        self._networks.clear()
        self.table.setRowCount(0)

    def add(self, worker: str, fields: Mapping[str, Any]) -> None:
        what = fields.get("what")
        if what == "network":
            self._networks[worker] = str(fields.get("network"))
        elif what == "channel" and isinstance(fields.get("src_rank"), int):
            key = (worker, int(fields["src_rank"]), str(fields.get("transport") or fields.get("via")))
            entry = self._links.setdefault(key, {"peers": set(), "channels": set(), "gdrdma": False})
            entry["peers"].add(fields.get("dst_rank"))
            entry["channels"].add(fields.get("channel"))
            entry["gdrdma"] = entry["gdrdma"] or bool(fields.get("gdrdma"))
        else:
            return
        if self.isVisible():
            self._render()
        else:
            self._stale = True

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._stale:
            self._render()

    def _render(self) -> None:
        self._stale = False
        if self._networks:
            self.network.setText("network: " + ", ".join(f"{w}: {n}" for w, n in sorted(self._networks.items())))
        rows = sorted(self._links.items(), key=lambda item: (item[0][1], item[0][0], item[0][2]))
        self.table.setRowCount(len(rows))
        for row, ((worker, rank, transport), entry) in enumerate(rows):
            peers = ", ".join(str(p) for p in sorted(p for p in entry["peers"] if p is not None))
            set_row(
                self.table,
                row,
                (worker, str(rank), transport, peers, str(len(entry["channels"])), "yes" if entry["gdrdma"] else "no"),
            )


class PlannedPanel(QWidget):
    """Planned (the planner's prediction the launch carried) beside measured (vLLM's startup log)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.table = row_table("plannedVsMeasured", ("number", "planned", "measured", "difference"))
        self.note = QLabel()
        self.note.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(self.note)
        layout.addWidget(self.table, 1)

    def set_numbers(
        self, planned: Mapping[str, Any] | None, measured: Mapping[str, Mapping[str, Any]], *, simulated: bool = False
    ) -> None:
        """`simulated`: the hosts' agents stood in for vLLM, so the measured column is their estimate."""
        source = (
            "the startup lines the agents' simulated vLLM printed: their own estimate of what vLLM would measure "
            "on these simulated GPUs"
            if simulated
            else "the startup lines vLLM printed"
        )
        if planned is None:
            self.note.setText("No prediction for this deployment (a torch job, or a model meshdeck has no card for).")
        else:
            self.note.setText(
                f"Planned: meshdeck's planner for this layout. Measured: {source} ({counted(len(measured), 'worker')} so far)."
            )
        header = self.table.horizontalHeaderItem(2)
        if header is not None:
            header.setText("measured (simulated)" if simulated else "measured")
        rows: list[tuple[str, str, str, str]] = []
        for key, label, decimals in COMPARED:
            want = planned.get(key) if planned else None
            got = [m[key] for m in measured.values() if isinstance(m.get(key), int | float)]
            have = min(got) if got else None  # the tightest worker decides, as vLLM does
            rows.append((label, _number(want, decimals), _number(have, decimals), _difference(want, have)))
        # what one token costs: KV memory over KV tokens, on each side (vLLM logs no such line itself)
        want = _bytes_per_token(planned) if planned else None
        got = [b for m in measured.values() if (b := _bytes_per_token(m)) is not None]
        have = max(got) if got else None  # the worker whose tokens cost the most bounds the pool
        rows.append(("KV bytes per token", _number(want, 0), _number(have, 0), _difference(want, have)))
        self.table.setRowCount(len(rows))
        for row, values in enumerate(rows):
            set_row(self.table, row, values)


def _bytes_per_token(numbers: Mapping[str, Any]) -> float | None:
    memory, tokens = numbers.get("available_kv_gib"), numbers.get("kv_cache_tokens")
    if not isinstance(memory, int | float) or not isinstance(tokens, int | float) or tokens <= 0:
        return None
    return memory * GIB / tokens


def _number(value: object, decimals: int) -> str:
    if not isinstance(value, int | float) or not math.isfinite(value):
        return "—"
    return f"{value:,.{decimals}f}"


def _difference(planned: object, measured: object) -> str:
    if not isinstance(planned, int | float) or not isinstance(measured, int | float) or not planned:
        return "—"
    return f"{100 * (measured - planned) / planned:+.1f} %"
