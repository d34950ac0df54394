"""The topology view shows a host's GPU x GPU links and GPU <-> NIC affinity as its agent reports them."""

from __future__ import annotations

import pytest
from gui_helpers import connect_hosts
from meshdeck.ui import theme
from meshdeck.ui.views.topology import TopologyView, link_class
from PySide6.QtGui import QColor


@pytest.fixture
def topology(qtbot, console_context, simulated_inventory):
    connect_hosts(qtbot, console_context, {"demo-a": simulated_inventory})
    view = TopologyView(console_context)
    qtbot.addWidget(view)
    view.show()
    return view


def test_gpu_matrix_is_the_agents_matrix_coloured_by_link_class(topology, simulated_inventory) -> None:
    matrix = simulated_inventory["topology"]["matrix"]
    assert topology.host.currentText() == "demo-a"
    assert topology.matrix.rowCount() == len(matrix) == 8
    cell = topology.matrix.item(0, 1)
    assert cell.text() == matrix[0][1] == "NV18"
    assert cell.background().color() == QColor(theme.LINK_COLORS["nvlink"])
    assert topology.matrix.item(3, 3).text() == "X"
    assert "SIMULATED" in topology.summary.text()
    assert "driver 570" in topology.summary.text()


def test_nic_affinity_names_each_port_with_its_kind_and_rate(topology, simulated_inventory) -> None:
    affinity = simulated_inventory["topology"]["gpu_nic_affinity"]
    nics = [nic["name"] for nic in simulated_inventory["nics"]]
    assert topology.nics.columnCount() == len(nics)
    header = topology.nics.horizontalHeaderItem(0).text()
    assert header.startswith(nics[0]) and "400 Gb/s" in header and "infiniband" in header
    assert topology.nics.item(0, 0).text() == affinity["0"][nics[0]]
    assert topology.gpus.rowCount() == 8
    assert topology.gpus.item(0, 6).text() == "18 of 18"


@pytest.mark.parametrize(
    "code, expected",
    [
        ("NV18", "nvlink"),
        ("NV4", "nvlink"),
        ("PIX", "pix"),
        ("PXB", "pxb"),
        ("PHB", "phb"),
        ("NODE", "node"),
        ("SYS", "sys"),
        ("X", "self"),
        ("??", "unknown"),
    ],
)
def test_link_codes_map_to_their_class(code: str, expected: str) -> None:
    assert link_class(code) == expected


def test_strings_from_the_server_are_shown_as_text_not_markup(qtbot, console_context, simulated_inventory) -> None:
    hostile = {**simulated_inventory, "hostname": "<img src=x>gpu-07", "driver": "<b>570</b>"}
    connect_hosts(qtbot, console_context, {"demo-a": hostile})
    view = TopologyView(console_context)
    qtbot.addWidget(view)
    assert "&lt;img src=x&gt;gpu-07" in view.summary.text() and "<img" not in view.summary.text()
    assert "driver &lt;b&gt;570&lt;/b&gt;" in view.summary.text()
