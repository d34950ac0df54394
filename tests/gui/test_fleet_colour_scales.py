"""The fleet view colours load, memory, KV cache and temperature as operators read them (green → yellow → red
at the thresholds ui/color_scales.py documents, exact at each threshold), keeps viridis for the neutral
quantities (power, link throughput), says the thresholds in its legend, and writes counts in good English."""

from __future__ import annotations

import time

import numpy as np
import pytest
from gui_helpers import shown
from meshdeck.core.plural import counted, noun
from meshdeck.remote.events import HostStateChanged, SamplesReceived
from meshdeck.services.synthetic_samples import sample_batch
from meshdeck.ui import color_scales
from meshdeck.ui.views.fleet.view import FleetView
from PySide6.QtGui import QColor
from wire_samples import GIB, wire_sample

TOTAL = 143771 * 2**20  # the wire samples' memory on the board


def _post(context, host: str, ts: float, gpus: int = 8, **gpu_values) -> None:
    if host not in context.hosts.hosts:
        context.bridge.post(HostStateChanged(host, "connected"))
    sample = wire_sample(1, ts, gpus=gpus, nvlinks=1, nics=1, workers=0)
    for gpu in sample["gpus"]:
        gpu.update(gpu_values)
    context.bridge.post(SamplesReceived(host, sample_batch([sample])))
    context.bridge.drain()


@pytest.fixture
def fleet(qtbot, console_context):
    return shown(qtbot, FleetView(console_context), 1200, 800)


def _hue(color: QColor) -> str:
    """green, yellow or red, as a person names the colour (HSV hue)."""
    hue = color.hsvHue()
    return "red" if hue < 15 or hue > 345 else "yellow" if 35 <= hue <= 60 else "green" if 90 <= hue <= 150 else "?"


def _colour(fleet: FleetView, host: str) -> str:
    cell = fleet.table.cell_of(host, 0)
    return _hue(fleet.canvas.colors[fleet.canvas.bins[cell]])


def test_memory_load_and_temperature_are_green_yellow_red_at_their_thresholds(fleet) -> None:
    context, now = fleet.context, time.time()
    for host, share, util, temp in (("idle", 0.05, 5.0, 40.0), ("busy", 0.5, 50.0, 80.0), ("full", 0.9, 95.0, 90.0)):
        _post(context, host, now, memory_used_bytes=share * TOTAL, utilization_pct=util, temperature_c=temp)
    _post(context, "edge", now, memory_used_bytes=0.8 * TOTAL, utilization_pct=74.9, temperature_c=85.0)
    fleet.set_metric("vram")
    assert [_colour(fleet, h) for h in ("idle", "busy", "full", "edge")] == ["green", "yellow", "red", "red"]
    assert "red ≥ 80 %" in fleet.legend.note and "10 %" in [text for _, text in fleet.legend.edges]
    fleet.set_metric("utilization")
    assert [_colour(fleet, h) for h in ("idle", "busy", "full", "edge")] == ["green", "yellow", "red", "yellow"]
    fleet.set_metric("temperature")
    assert [_colour(fleet, h) for h in ("idle", "busy", "full", "edge")] == ["green", "yellow", "red", "red"]
    assert "thresholds at 75 °C, 85 °C" in fleet.legend.toolTip()


def test_neutral_quantities_keep_viridis(fleet) -> None:
    _post(fleet.context, "node", time.time())
    fleet.set_metric("power")
    viridis = [QColor(stop).name() for stop in color_scales.VIRIDIS_STOPS]
    assert fleet.canvas.colors[0].name() == viridis[0] and fleet.canvas.colors[-1].name() == viridis[-1]
    assert fleet.legend.edges == []
    fleet.set_metric("vram")
    assert fleet.canvas.colors[0].name() != viridis[0]


def test_a_value_at_a_threshold_takes_the_upper_colour_and_nan_is_no_colour() -> None:
    values = np.array([0.0, 9.99, 10.0, 79.99, 80.0, 100.0, 250.0, np.nan])
    bins = color_scales.value_bins(color_scales.MEMORY, values, 0.0, 100.0, 64)
    colours = color_scales.bin_colors(color_scales.MEMORY, 64)
    names = [_hue(colours[b]) if b >= 0 else None for b in bins]
    assert names == ["green", "green", "yellow", "yellow", "red", "red", "red", None]
    assert bins[0] < bins[1] < bins[2] < bins[3] < bins[4] < bins[5] == 63  # darker towards each band's end


def test_counts_agree_with_their_noun(fleet) -> None:
    assert (counted(1, "host"), counted(2224, "GPU"), counted(3, "series", "series")) == (
        "1 host",
        "2,224 GPUs",
        "3 series",
    )
    assert noun(0, "outlier") == "outliers"
    _post(fleet.context, "solo", time.time())
    fleet.refresh()
    assert fleet.status.text().startswith("8 GPUs on 1 host")
    fleet.canvas.select_cells([0], add=False)
    assert "selected: 1 host, 1 GPU" in fleet.status.text()


def test_memory_is_written_in_gib_everywhere() -> None:
    from meshdeck.services.sizes import format_size

    assert format_size(50 * 10**9) == "46.6GiB"  # typed as 50GB: read back in the unit GPUs are shown in
    assert format_size(140 * GIB) == "140.0GiB"
    assert format_size(0) == "0B"
