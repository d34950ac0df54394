"""The topology view: per host, how its GPUs and NICs are wired, as the agent's inventory reports it.

The GPU × GPU matrix uses `nvidia-smi topo -m`'s codes and legend (NV# = that many bonded NVLinks;
PIX / PXB = one or more PCIe switches; PHB = the CPU's host bridge; NODE = across host bridges
inside one NUMA node; SYS = across the CPU interconnect), coloured from fastest to slowest. The
GPU ↔ NIC table shows which InfiniBand / Ethernet port is nearest each GPU (what NCCL picks).
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

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

from meshdeck.services.inventory import Gpu, Inventory, Nic, Topology
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


def legend_html() -> str:
    """The link legend as rich text: each entry (colour chip and meaning) kept whole, wrapping between them."""
    entries = []
    for key, code, meaning in LEGEND:
        colour = QColor(theme.LINK_COLORS[key])
        fore = "#FFFFFF" if colour.lightness() < 170 else "#000000"
        chip = f'<span style="background-color: {colour.name()}; color: {fore};">&nbsp;{html.escape(code)}&nbsp;</span>'
        entries.append(f"{chip}&nbsp;{html.escape(meaning).replace(' ', '&nbsp;')}")
    return " &nbsp; ".join(entries)


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
        self.legend = QLabel(legend_html())  # one wrapping line: at 1280 px the six entries take two rows
        self.legend.setObjectName("topologyLegend")
        self.legend.setWordWrap(True)
        self.legend.setTextFormat(Qt.TextFormat.RichText)

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
        layout.addWidget(self.legend)
        layout.addLayout(tables, 3)
        layout.addWidget(QLabel("GPUs"))
        layout.addWidget(self.gpus, 2)
        assert context.hosts is not None
        context.hosts.changed.connect(self._hosts_changed)
        self._hosts_changed("")

    def _hosts_changed(self, host: str) -> None:
        assert self.context.hosts is not None
        known = sorted(name for name, view in self.context.hosts.hosts.items() if view.inventory is not None)
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

    def select_host(self, host: str) -> None:
        """Choose `host` in the host list (it shows once its inventory came)."""
        index = self.host.findText(host)
        if index >= 0:
            self.host.setCurrentIndex(index)

    def show_host(self, host: str) -> None:
        assert self.context.hosts is not None
        view = self.context.hosts.hosts.get(host)
        if view is None or view.inventory is None:
            return
        self.show_inventory(host, view.inventory)

    def show_inventory(self, host: str, inventory: Inventory) -> None:
        gpus = inventory.gpus
        cpu = inventory.cpu
        names = ", ".join(inventory.gpu_names) or "no GPU"
        memory = inventory.largest_gpu_memory_bytes
        simulated = " — <b>SIMULATED</b> (meshdeck-agent --simulate)" if inventory.simulated else ""
        text = html.escape  # the summary is rich text: what the server says is shown as text, never as markup
        self.summary.setText(
            f"<b>{text(inventory.hostname or host)}</b>{simulated}<br>"
            f"{len(gpus)}× {text(names)}, {memory / 2**30:.1f} GiB each · "
            f"driver {text(inventory.driver or '—')} · CUDA {text(inventory.cuda or '—')} · "
            f"{cpu.sockets or '?'}× {text(cpu.model or 'CPU')} ({cpu.cores or '?'} cores) · "
            f"RAM {(inventory.ram_total_bytes or 0) / 2**30:.0f} GiB"
            + (f"<br>no GPUs: {text(inventory.gpu_reason)}" if inventory.gpu_reason and not gpus else "")
        )
        self._fill_matrix(inventory.topology.matrix)
        self._fill_nics(len(gpus), inventory.nics, inventory.topology)
        self._fill_gpus(gpus)

    def _fill_matrix(self, matrix: Sequence[Sequence[str]]) -> None:
        size = len(matrix)
        self.matrix.setRowCount(size)
        self.matrix.setColumnCount(size)
        labels = [f"GPU{i}" for i in range(size)]
        self.matrix.setHorizontalHeaderLabels(labels)
        self.matrix.setVerticalHeaderLabels(labels)
        for row, codes in enumerate(matrix):
            for column, code in enumerate(codes):
                self.matrix.setItem(row, column, _cell(code))

    def _fill_nics(self, gpu_count: int, nics: Sequence[Nic], topology: Topology) -> None:
        names = [n.name for n in nics] or sorted({nic for _gpu, row in topology.gpu_nic_affinity for nic, _ in row})
        by_name = {n.name: n for n in nics}
        headers = []
        for name in names:
            nic = by_name.get(name)
            parts = [name]
            if nic is not None:
                rate = f"{nic.rate_gbps:g} Gb/s" if nic.rate_gbps is not None else ""
                parts += [nic.kind, rate, nic.state or ""]
            headers.append("\n".join(part for part in parts if part))
        self.nics.setRowCount(gpu_count)
        self.nics.setColumnCount(len(names))
        self.nics.setHorizontalHeaderLabels(headers)
        self.nics.setVerticalHeaderLabels([f"GPU{i}" for i in range(gpu_count)])
        for gpu in range(gpu_count):
            row = topology.affinity(gpu)
            for column, name in enumerate(names):
                code = row.get(name)
                self.nics.setItem(gpu, column, _cell(code) if code else QTableWidgetItem("—"))

    def _fill_gpus(self, gpus: Sequence[Gpu]) -> None:
        columns = ("GPU", "model", "memory", "reserved", "NUMA node", "PCI bus", "NVLinks up", "arch")
        self.gpus.setColumnCount(len(columns))
        self.gpus.setHorizontalHeaderLabels(columns)
        self.gpus.setRowCount(len(gpus))
        self.gpus.verticalHeader().setVisible(False)
        for row, gpu in enumerate(gpus):
            values = (
                str(gpu.index),
                str(gpu.name),
                f"{(gpu.memory_total_bytes or 0) / 2**30:.1f} GiB",
                f"{(gpu.memory_reserved_bytes or 0) / 2**20:.0f} MiB",
                "—" if gpu.numa_node is None else str(gpu.numa_node),
                gpu.pci_bus_id or "—",
                f"{gpu.active_nvlinks} of {len(gpu.nvlink_links)}",
                gpu.arch or "—",
            )
            for column, text in enumerate(values):
                self.gpus.setItem(row, column, QTableWidgetItem(text))
