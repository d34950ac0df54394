"""Real `nvidia-smi topo -m` captures and agent inventories become link classes the planner uses."""

from __future__ import annotations

from pathlib import Path

import pytest
from meshdeck.core.cluster import LinkClass, parse_nvidia_smi_topology, topology_from_codes
from meshdeck.core.errors import InputError
from meshdeck.core.planner import plan

DATA = Path(__file__).parent / "data"


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_hgx_h100_nvswitch_is_one_nvlink_island_and_nics_are_ignored():
    topo = parse_nvidia_smi_topology(read("nvidia-smi_topo-m_h100_8gpu_nvswitch_6nic_princeton-della.txt"))
    assert topo.gpu_count == 8
    assert topo.nvlink_lanes(0, 7) == 18
    assert topo.fully_nvlinked and len(topo.nvlink_islands) == 1


def test_pcie_only_box_has_no_nvlink_and_knows_cross_socket_pairs():
    topo = parse_nvidia_smi_topology(read("nvidia-smi_topo-m_pcie-only_5gpu_club3090-issue46.txt"))
    assert topo.gpu_count == 5
    assert topo.link_class(1, 2) is LinkClass.PCIE
    assert topo.crosses_cpu_socket(0, 1) and not topo.crosses_cpu_socket(1, 2)
    assert len(topo.nvlink_islands) == 5


def test_space_aligned_paste_with_nv6_parses():
    topo = parse_nvidia_smi_topology(read("nvidia-smi_topo-m_h100_4gpu_nv6_4nic_nccl-issue1617_excerpt.txt"))
    assert topo.gpu_count == 4 and topo.nvlink_lanes(1, 3) == 6


def test_partial_nvlink_pairs_make_tp4_cross_pcie(request_for, v3):
    pairs = [
        ["X", "NV4", "SYS", "SYS"],
        ["NV4", "X", "SYS", "SYS"],
        ["SYS", "SYS", "X", "NV4"],
        ["SYS", "SYS", "NV4", "X"],
    ]
    topo = topology_from_codes(pairs)
    assert {frozenset({0, 1}), frozenset({2, 3})} == set(topo.nvlink_islands)
    result = plan(
        request_for(v3, "A100-SXM4-80GB", 8, 4, topology=topo, tensor_parallel=4, pipeline_parallel=8, data_parallel=1, expert_parallel=False)
    )  # fmt: skip
    lay = result.layouts[0]
    assert "tp_over_pcie" in lay.warning_codes
    assert "CPU interconnect" in next(w for w in lay.warnings if "PCIe" in w)
    tp2 = plan(
        request_for(v3, "A100-SXM4-80GB", 8, 4, topology=topo, tensor_parallel=2, pipeline_parallel=16, data_parallel=1, expert_parallel=False)
    ).layouts[0]  # fmt: skip
    assert "tp_over_pcie" not in tp2.warning_codes


def test_text_without_a_matrix_is_refused_naming_the_source():
    with pytest.raises(InputError) as err:
        parse_nvidia_smi_topology("hello\nworld\n", source="topo.txt")
    assert err.value.field == "topo.txt"


def test_bad_link_code_is_refused():
    with pytest.raises(InputError):
        topology_from_codes([["X", "QQ"], ["QQ", "X"]])


@pytest.mark.parametrize(
    ("nvml_name", "memory", "expected"),
    [
        ("NVIDIA H200", 150_754_820_096, "H200-SXM-141GB"),
        ("NVIDIA H20", 102_625_181_696, "H20"),
        ("NVIDIA H100 80GB HBM3", 85_520_809_984, "H100-SXM5-80GB"),
        ("NVIDIA GeForce RTX 4090", 25_757_220_864, "RTX-4090"),
        ("Tesla V100-SXM2-32GB", 34_089_730_048, None),
        ("NVIDIA H100 NVL", 100_485_038_080, None),  # 94 GB card: not the 80 GB catalog entry
    ],
)
def test_detected_gpus_map_to_catalog_entries_only_when_name_and_memory_agree(nvml_name, memory, expected):
    from meshdeck.core.gpu_spec import match_catalog_gpu
    from meshdeck.services.catalog import load_gpu_catalog

    spec = match_catalog_gpu(nvml_name, memory, load_gpu_catalog())
    assert (spec.name if spec else None) == expected
    if spec:
        assert spec.memory_bytes == memory
