"""Topology from NVML links and sysfs PCI paths reproduces recorded `nvidia-smi topo -m` matrices."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_sysfs_tree import (
    della_tree,
    direct_capture,
    nv6_tree,
    nvswitch_capture,
    parse_topo_matrix,
    pcie_only_tree,
)
from fake_pynvml import build
from meshdeck_agent.machine import RealMachine
from meshdeck_agent.topology import label_rank, normalize_bus_id, pci_label

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "agent"


def _fixture(name: str) -> tuple[list[str], dict[str, list[str]]]:
    return parse_topo_matrix((FIXTURES / name).read_text())


def _gpu_matrix(columns: list[str], rows: dict[str, list[str]]) -> list[list[str]]:
    gpus = [c for c in columns if c.startswith("GPU")]
    return [[rows[g][columns.index(h)] for h in gpus] for g in gpus]


def _nic_labels(columns: list[str], rows: dict[str, list[str]], names: list[str]) -> dict[str, dict[str, str]]:
    gpus = [c for c in columns if c.startswith("GPU")]
    nics = [c for c in columns if c.startswith("NIC")]
    return {str(i): {names[j]: rows[g][columns.index(n)] for j, n in enumerate(nics)} for i, g in enumerate(gpus)}


def test_hgx_h100_with_nvswitch_and_six_nics_matches_the_recorded_matrix(tmp_path):
    layout = della_tree(tmp_path)
    machine = RealMachine(root=str(tmp_path), nvml_module=build(nvswitch_capture(layout["gpu_bus_ids"])))
    inventory = machine.inventory()
    columns, rows = _fixture("nvidia-smi_topo-m_h100_8gpu_nvswitch_6nic_princeton-della.txt")
    assert inventory["topology"]["matrix"] == _gpu_matrix(columns, rows)
    assert inventory["topology"]["gpu_nic_affinity"] == _nic_labels(columns, rows, layout["nics"])
    assert inventory["topology"]["nearest_nic"]["4"] == "mlx5_3/1"
    assert [g["numa_node"] for g in inventory["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_four_h100_with_six_direct_links_per_pair_match_nv6_and_pix_sys(tmp_path):
    layout = nv6_tree(tmp_path)
    machine = RealMachine(root=str(tmp_path), nvml_module=build(direct_capture(layout["gpu_bus_ids"])))
    inventory = machine.inventory()
    columns, rows = _fixture("nvidia-smi_topo-m_h100_4gpu_nv6_4nic_nccl-issue1617_excerpt.txt")
    assert inventory["topology"]["matrix"] == _gpu_matrix(columns, rows)
    assert inventory["topology"]["gpu_nic_affinity"] == _nic_labels(columns, rows, layout["nics"])


def test_pcie_only_box_falls_back_to_pci_paths_and_numa_nodes(tmp_path):
    layout = pcie_only_tree(tmp_path)
    capture = direct_capture(layout["gpu_bus_ids"], per_peer=0)
    machine = RealMachine(root=str(tmp_path), nvml_module=build(capture))
    columns, rows = _fixture("nvidia-smi_topo-m_pcie-only_5gpu_club3090-issue46.txt")
    assert machine.inventory()["topology"]["matrix"] == _gpu_matrix(columns, rows)


def test_nvml_common_ancestor_is_used_when_it_answers(tmp_path):
    layout = pcie_only_tree(tmp_path)
    capture = direct_capture(layout["gpu_bus_ids"], per_peer=0)
    for index, device in enumerate(capture["devices"]):
        device["ancestor"] = {str(j): 20 for j in range(5) if j != index}  # NVML_TOPOLOGY_MULTIPLE
    machine = RealMachine(root=str(tmp_path), nvml_module=build(capture))
    matrix = machine.inventory()["topology"]["matrix"]
    assert matrix[0][1] == "PXB" and matrix[3][4] == "PXB"


@pytest.mark.parametrize(
    ("a", "b", "numa", "label"),
    [
        (
            ["pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0"],
            ["pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:19:00.0"],
            (0, 0),
            "PIX",
        ),
        (
            ["pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:20:00.0", "0000:21:00.0"],
            ["pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:19:00.0"],
            (0, 0),
            "PXB",
        ),
        (["pci0000:00", "0000:00:01.0", "0000:01:00.0"], ["pci0000:00", "0000:00:03.0", "0000:02:00.0"], (0, 0), "PHB"),
        (
            ["pci0000:00", "0000:00:01.0", "0000:01:00.0"],
            ["pci0000:40", "0000:40:01.0", "0000:41:00.0"],
            (0, 0),
            "NODE",
        ),
        (["pci0000:00", "0000:00:01.0", "0000:01:00.0"], ["pci0000:80", "0000:80:01.0", "0000:81:00.0"], (0, 1), "SYS"),
        (None, None, (0, None), "NODE"),
    ],
)
def test_pci_label_by_path_and_numa(a, b, numa, label):
    assert pci_label(a, b, *numa) == label


def test_labels_rank_from_nvlink_to_sys_and_bus_ids_normalize():
    assert sorted(["SYS", "PIX", "NV4", "NODE", "NV18", "PHB", "PXB"], key=label_rank) == [
        "NV18",
        "NV4",
        "PIX",
        "PXB",
        "PHB",
        "NODE",
        "SYS",
    ]
    assert normalize_bus_id("00000000:9A:00.0") == "0000:9a:00.0"
