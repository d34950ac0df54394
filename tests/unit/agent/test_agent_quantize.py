"""Rates are rounded to what a chart can show; everything else in a sample is left exact."""

from __future__ import annotations

from meshdeck_agent.quantize import quantize, round_significant
from meshdeck_agent.wire_sample import GpuSample, NicSample


def test_round_significant_keeps_the_leading_digits():
    assert round_significant(123_456_789, 4) == 123_500_000
    assert round_significant(0.012345, 3) == 0.0123
    assert round_significant(0, 4) == 0
    assert round_significant(None, 4) is None
    assert round_significant(999, 4) == 999


def test_quantize_rounds_rates_and_links_but_not_memory_or_power():
    gpu = GpuSample.of(
        0,
        None,
        memory_used_bytes=123_456_789_012,
        power_w=301.27,
        nvlink_tx_bytes_per_s=77_931_546_799,
        pcie_rx_bytes_per_s=None,
        nvlink_links=[[4_321_987_654, 4_299_123_456], [12_345, None]],
    )
    nic = NicSample("mlx5_0/1", "infiniband", 49_876_543_210.5, None)
    [gpu], [nic] = quantize([gpu], [nic])
    assert gpu.value("memory_used_bytes") == 123_456_789_012 and gpu.value("power_w") == 301.27
    assert gpu.value("nvlink_tx_bytes_per_s") == 77_930_000_000
    assert gpu.nvlink_links[0] == (4_320_000_000, 4_300_000_000)
    assert gpu.nvlink_links[1] == (0, None)  # a trickle next to a busy link rounds to nothing
    assert nic.tx_bytes_per_s == 49_880_000_000
