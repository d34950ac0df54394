"""The topology view: per host, how its GPUs and NICs are wired, as the agent's inventory reports it.

The GPU × GPU matrix uses `nvidia-smi topo -m`'s codes and legend (NV# = that many bonded NVLinks;
PIX / PXB = one or more PCIe switches; PHB = the CPU's host bridge; NODE = across host bridges
inside one NUMA node; SYS = across the CPU interconnect), coloured from fastest to slowest. The
GPU ↔ NIC table shows which InfiniBand / Ethernet port is nearest each GPU (what NCCL picks).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from meshdeck.ui import theme
from meshdeck.ui.context import ConsoleContext

LEGEND = (
    ("nvlink", "NV#", "NVLink (# bonded links)"),
    ("pix", "PIX", "one PCIe switch"),
    ("pxb", "PXB", "several PCIe switches"),
    ("phb", "PHB", "PCIe host bridge (CPU)"),
    ("node", "NODE", "across host bridges in a NUMA node"),
    ("sys", "SYS", "across NUMA nodes (CPU interconnect)"),
)
_NV = re.compile(r"^NV\d+$")


def link_class(code: str) -> str:
    """The colour class of a topo code: nvlink, pix, pxb, phb, node, sys, self or unknown."""
    code = code.strip().upper()
    if code == "X":
        return "self"
    if _NV.match(code):
        return "nvlink"
    return code.lower() if code.lower() in theme.LINK_COLORS else "unknown"


def _cell(text: str) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
    colour = QColor(theme.LINK_COLORS[link_class(text)])
    item.setBackground(colour)
    item.setForeground(QColor("#FFFFFF") if colour.lightness() < 170 else QColor("#000000"))
    return item


def _table(name: str) -> QTableWidget:
    table = QTableWidget()
    table.setObjectName(name)
    table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    return table


class TopologyView(QWidget):
    def __init__(self, context: ConsoleContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("topologyView")
        self.context = context
        self.host = QComboBox()
        self.host.setObjectName("topologyHost")
        self.host.setAccessibleName("Host")
        self.host.currentTextChanged.connect(self.show_host)
        self.summary = QLabel("Connect a host to see its GPUs, links and NICs.")
        self.summary.setObjectName("topologySummary")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.matrix = _table("gpuMatrix")
        self.nics = _table("gpuNicAffinity")
        self.gpus = _table("gpuList")
        legend = QHBoxLayout()
        for key, code, meaning in LEGEND:
            label = QLabel(f" {code} ")
            colour = QColor(theme.LINK_COLORS[key])
            fore = "#FFFFFF" if colour.lightness() < 170 else "#000000"
            label.setStyleSheet(f"background: {colour.name()}; color: {fore}; border-radius: 3px;")
            legend.addWidget(label)
            legend.addWidget(QLabel(meaning))
        legend.addStretch(1)

        top = QHBoxLayout()
        top.addWidget(QLabel("Host"))
        top.addWidget(self.host)
        top.addWidget(self.summary, 1)
        tables = QHBoxLayout()
        left = QVBoxLayout()
        left.addWidget(QLabel("GPU × GPU links"))
        left.addWidget(self.matrix, 1)
        right = QVBoxLayout()
        right.addWidget(QLabel("GPU ↔ NIC affinity"))
        right.addWidget(self.nics, 1)
        tables.addLayout(left, 1)
        tables.addLayout(right, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addLayout(legend)
        layout.addLayout(tables, 3)
        layout.addWidget(QLabel("GPUs"))
        layout.addWidget(self.gpus, 2)
        assert context.hosts is not None
        context.hosts.changed.connect(self._hosts_changed)
        self._hosts_changed("")

    def _hosts_changed(self, host: str) -> None:
        assert self.context.hosts is not None
        known = sorted(name for name, view in self.context.hosts.hosts.items() if view.inventory)
        current = [self.host.itemText(i) for i in range(self.host.count())]
        if known != current:
            chosen = self.host.currentText()
            self.host.blockSignals(True)
            self.host.clear()
            self.host.addItems(known)
            self.host.blockSignals(False)
            self.host.setCurrentText(chosen if chosen in known else (known[0] if known else ""))
            self.show_host(self.host.currentText())
        elif host and host == self.host.currentText():
            self.show_host(host)

    def show_host(self, host: str) -> None:
        assert self.context.hosts is not None
        view = self.context.hosts.hosts.get(host)
        if view is None or not view.inventory:
            return
        self.show_inventory(host, view.inventory)

    def show_inventory(self, host: str, inventory: Mapping[str, Any]) -> None:
        gpus = [g for g in inventory.get("gpus") or [] if isinstance(g, dict)]
        nics = [n for n in inventory.get("nics") or [] if isinstance(n, dict)]
        topology = inventory.get("topology") or {}
        cpu = inventory.get("cpu") or {}
        names = sorted({str(g.get("name")) for g in gpus})
        memory = max((g.get("memory_total_bytes") or 0 for g in gpus), default=0)
        simulated = " — <b>SIMULATED</b> (meshdeck-agent --simulate)" if inventory.get("simulated") else ""
        self.summary.setText(
            f"<b>{inventory.get('hostname', host)}</b>{simulated}<br>"
            f"{len(gpus)}× {', '.join(names) or 'no GPU'}, {memory / 2**30:.1f} GiB each · "
            f"driver {inventory.get('driver') or '—'} · CUDA {inventory.get('cuda') or '—'} · "
            f"{cpu.get('sockets', '?')}× {cpu.get('model', 'CPU')} ({cpu.get('cores', '?')} cores) · "
            f"RAM {(inventory.get('ram_total_bytes') or 0) / 2**30:.0f} GiB"
            + (f"<br>no GPUs: {inventory.get('gpu_reason')}" if inventory.get("gpu_reason") and not gpus else "")
        )
        self._fill_matrix(topology.get("matrix") or [])
        self._fill_nics(len(gpus), nics, topology.get("gpu_nic_affinity") or {})
        self._fill_gpus(gpus)

    def _fill_matrix(self, matrix: list[list[str]]) -> None:
        size = len(matrix)
        self.matrix.setRowCount(size)
        self.matrix.setColumnCount(size)
        labels = [f"GPU{i}" for i in range(size)]
        self.matrix.setHorizontalHeaderLabels(labels)
        self.matrix.setVerticalHeaderLabels(labels)
        for row, codes in enumerate(matrix):
            for column, code in enumerate(codes[:size]):
                self.matrix.setItem(row, column, _cell(str(code)))

    def _fill_nics(self, gpu_count: int, nics: list[dict[str, Any]], affinity: Mapping[str, Mapping[str, str]]) -> None:
        names = [str(n.get("name")) for n in nics] or sorted({nic for row in affinity.values() for nic in row})
        by_name = {str(n.get("name")): n for n in nics}
        headers = []
        for name in names:
            nic = by_name.get(name, {})
            rate = f"{nic['rate_gbps']:g} Gb/s" if isinstance(nic.get("rate_gbps"), int | float) else ""
            headers.append(
                "\n".join(
                    part for part in (name, str(nic.get("kind") or ""), rate, str(nic.get("state") or "")) if part
                )
            )
        self.nics.setRowCount(gpu_count)
        self.nics.setColumnCount(len(names))
        self.nics.setHorizontalHeaderLabels(headers)
        self.nics.setVerticalHeaderLabels([f"GPU{i}" for i in range(gpu_count)])
        for gpu in range(gpu_count):
            row = affinity.get(str(gpu)) or {}
            for column, name in enumerate(names):
                code = row.get(name)
                self.nics.setItem(gpu, column, _cell(str(code)) if code else QTableWidgetItem("—"))

    def _fill_gpus(self, gpus: list[dict[str, Any]]) -> None:
        columns = ("GPU", "model", "memory", "reserved", "NUMA node", "PCI bus", "NVLinks up", "arch")
        self.gpus.setColumnCount(len(columns))
        self.gpus.setHorizontalHeaderLabels(columns)
        self.gpus.setRowCount(len(gpus))
        self.gpus.verticalHeader().setVisible(False)
        for row, gpu in enumerate(gpus):
            links = gpu.get("nvlink_links") or []
            up = sum(1 for link in links if isinstance(link, dict) and link.get("active"))
            values = (
                str(gpu.get("index")),
                str(gpu.get("name")),
                f"{(gpu.get('memory_total_bytes') or 0) / 2**30:.1f} GiB",
                f"{(gpu.get('memory_reserved_bytes') or 0) / 2**20:.0f} MiB",
                str(gpu.get("numa_node", "—")),
                str(gpu.get("pci_bus_id", "—")),
                f"{up} of {len(links)}",
                str(gpu.get("arch", "—")),
            )
            for column, text in enumerate(values):
                self.gpus.setItem(row, column, QTableWidgetItem(text))
