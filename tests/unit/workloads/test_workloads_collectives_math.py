"""Collective bandwidth arithmetic as nccl-tests defines it, and the layout read from MESHDECK_* env."""

from __future__ import annotations

import pytest
from meshdeck.workloads import collectives, layout_mesh


@pytest.mark.parametrize(
    ("op", "group", "factor"),
    [("all_reduce", 8, 2 * 7 / 8), ("all_gather", 4, 3 / 4), ("all_to_all", 16, 15 / 16), ("send_recv", 2, 1.0)],
)
def test_bus_bandwidth_uses_the_nccl_tests_factors(op: str, group: int, factor: float) -> None:
    algbw, busbw = collectives.bus_bandwidth(op, 1_000_000_000, 0.5, group)
    assert algbw == pytest.approx(2.0)  # GB/s = 1e9 bytes / s
    assert busbw == pytest.approx(2.0 * factor)


def test_message_sizes_double_from_1kib_to_the_cap() -> None:
    sizes = collectives.message_sizes(1024, 256 * 1024 * 1024)
    assert sizes[0] == 1024 and sizes[-1] == 256 * 1024 * 1024 and len(sizes) == 19


def test_layout_comes_from_the_documented_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MESHDECK_TENSOR_PARALLEL", "2")
    monkeypatch.setenv("MESHDECK_PIPELINE_PARALLEL", "2")
    monkeypatch.setenv("MESHDECK_DATA_PARALLEL", "2")
    monkeypatch.setenv("MESHDECK_EXPERT_PARALLEL", "1")
    sizes = layout_mesh.layout_from_env(8)
    assert sizes == layout_mesh.LayoutSizes(2, 2, 2, True)


def test_without_env_a_job_is_all_data_parallel(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MESHDECK_TENSOR_PARALLEL", "MESHDECK_PIPELINE_PARALLEL", "MESHDECK_DATA_PARALLEL"):
        monkeypatch.delenv(name, raising=False)
    assert layout_mesh.layout_from_env(4) == layout_mesh.LayoutSizes(1, 1, 4, False)


def test_a_layout_that_does_not_match_the_world_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MESHDECK_TENSOR_PARALLEL", "2")
    monkeypatch.setenv("MESHDECK_DATA_PARALLEL", "2")
    with pytest.raises(SystemExit, match="torchrun started 3"):
        layout_mesh.layout_from_env(3)
    monkeypatch.setenv("MESHDECK_TENSOR_PARALLEL", "two")
    with pytest.raises(SystemExit, match="positive integer"):
        layout_mesh.layout_from_env(4)


def test_the_running_line_the_launcher_waits_for_is_the_one_ranks_print() -> None:
    import re

    from meshdeck.launch.torch_launch import RANK_RUNNING_LINE

    assert re.search(RANK_RUNNING_LINE, layout_mesh.RUNNING_MARK % (3, 4))
    assert layout_mesh.RESULT_MARK == "MESHDECK_RESULT "
