"""The memory bar draws DeepSeek-V4's KV cache as its parts (sliding window, C4 / C128 latents, indexer keys,
compressor states, page padding) in proportion to the plan's bytes per token by part; V3's bars are unchanged."""

from __future__ import annotations

import pytest
from gui_helpers import shown
from meshdeck.core.cluster import ClusterSpec, default_inter_node_bytes_per_s, default_intra_node_link
from meshdeck.core.gpu_spec import resolve_gpu
from meshdeck.core.layout_plan import LayoutPlan
from meshdeck.core.planner import PlanRequest, PlanResult, plan
from meshdeck.services.catalog import load_gpu_catalog, load_model
from meshdeck.ui.widgets.memory_bar import (
    KV_CACHE,
    KV_PARTS,
    SEGMENT_COLORS,
    MemoryBarsWidget,
    kv_part_segments,
    legend_names,
    memory_bars,
    segment_color,
)
from PySide6.QtGui import QColor, QHelpEvent
from PySide6.QtWidgets import QApplication, QToolTip

PART_LABELS = [label for label, _color in KV_PARTS.values()]


def _plan(model: str, nodes: int = 2) -> PlanResult:
    gpu = resolve_gpu("H200-SXM-141GB", load_gpu_catalog())
    link = default_intra_node_link(gpu)
    cluster = ClusterSpec(nodes, 8, gpu, link, default_inter_node_bytes_per_s(8, link))
    return plan(PlanRequest(load_model(model), cluster))


@pytest.fixture(scope="module")
def v4_pro() -> PlanResult:
    return _plan("deepseek-v4-pro")


def _bars(result: PlanResult, layout: LayoutPlan):
    gpu = result.request.cluster.gpu
    return memory_bars(layout, gpu.memory_bytes, gpu.torch_visible_bytes)


def test_a_v4_layouts_kv_cache_is_drawn_as_its_parts_in_proportion(v4_pro) -> None:
    layout = v4_pro.fitting[0]
    parts = dict(layout.kv_bytes_per_token_by_part)
    assert set(parts) == set(KV_PARTS)  # V4-Pro has every part: the test sees each of them drawn
    (bar,) = _bars(v4_pro, layout)
    segments = dict(bar.segments)
    assert KV_CACHE not in segments
    kv = {name: size for name, size in bar.segments if name.startswith("KV: ")}
    assert list(kv) == PART_LABELS  # every part, in the order core names them
    assert sum(kv.values()) == layout.stages[0].kv_cache_bytes  # exactly: no byte lost to rounding
    total = sum(parts.values())
    for part, (label, _color) in KV_PARTS.items():
        assert kv[label] == pytest.approx(layout.stages[0].kv_cache_bytes * parts[part] / total, abs=1)
        assert dict(bar.per_token)[label] == pytest.approx(parts[part])
    assert sum(segments.values()) == pytest.approx(v4_pro.request.cluster.gpu.memory_bytes, rel=1e-9)
    assert segments["weights"] == layout.stages[0].weights_bytes
    tip = bar.tooltip("KV: C4 compressed", kv["KV: C4 compressed"])
    assert "per GPU" in tip and f"{parts['c4_latent']:,.1f} bytes per token" in tip
    assert "bytes per token" not in bar.tooltip("weights", segments["weights"])


def test_every_stage_of_a_v4_pipeline_splits_its_own_pool(v4_pro) -> None:
    layout = next(layout for layout in v4_pro.layouts if layout.pipeline_parallel == 2 and layout.fits)
    bars = _bars(v4_pro, layout)
    assert len(bars) == 2
    per_token = layout.kv_bytes_per_token_per_gpu
    largest = max(layout.stages, key=lambda stage: stage.kv_cache_bytes)
    for bar, stage in zip(bars, layout.stages, strict=True):
        kv = [size for name, size in bar.segments if name.startswith("KV: ")]
        assert sum(kv) == stage.kv_cache_bytes
        scaled = per_token * stage.kv_cache_bytes / largest.kv_cache_bytes
        assert sum(value for _name, value in bar.per_token) == pytest.approx(scaled, rel=1e-3)
        assert bool(bar.note) == (stage is not largest)


def test_v3_bars_are_unchanged() -> None:
    result = _plan("deepseek-v3.2")
    layout = result.fitting[0]
    assert layout.kv_bytes_per_token_by_part == ()
    (bar,) = _bars(result, layout)
    assert [name for name, _size in bar.segments][:3] == ["weights", "reserve", KV_CACHE]
    assert dict(bar.segments)[KV_CACHE] == layout.stages[0].kv_cache_bytes
    assert bar.per_token == () and bar.note == ""
    assert legend_names([bar]) == list(SEGMENT_COLORS)


def test_the_legend_names_the_parts_present_only() -> None:
    segments, per_token = kv_part_segments([("swa", 10.0), ("c4_latent", 30.0), ("c128_latent", 0.0)], 1001)
    assert segments == [("KV: sliding window", 250), ("KV: C4 compressed", 751)]
    assert [name for name, _value in per_token] == ["KV: sliding window", "KV: C4 compressed"]
    unknown, _ = kv_part_segments([("swa", 1.0), ("new_part", 1.0)], 10)
    assert unknown[1][0] == "KV: new part"  # a part core adds later is drawn under its own name


def test_the_parts_are_shades_of_the_kv_green_and_distinct() -> None:
    colors = [QColor(segment_color(label)) for label in PART_LABELS]
    assert len({color.name() for color in colors}) == len(colors)
    for color in colors:
        assert 80 <= color.hsvHue() <= 180  # green to teal, beside the KV cache's own green
    others = {QColor(color).name() for name, color in SEGMENT_COLORS.items() if name != KV_CACHE}
    assert not others & {color.name() for color in colors}


def test_the_widget_wraps_its_legend_and_tells_bytes_per_token(qtbot, v4_pro) -> None:
    layout = v4_pro.fitting[0]
    widget = MemoryBarsWidget()
    widget.set_bars(_bars(v4_pro, layout))
    shown(qtbot, widget, 1400, widget.heightForWidth(1400))
    assert widget.heightForWidth(700) > widget.heightForWidth(2400)  # more legend lines when narrow
    legend = legend_names(widget.bars)
    assert KV_CACHE not in legend and all(label in legend for label in PART_LABELS)
    widget.grab()  # paints: the segments' hit areas are laid out
    rect, text = next((rect, text) for rect, text in widget._hit if text.startswith("KV: compressor state"))
    assert "bytes per token" in text
    point = rect.center().toPoint()
    QApplication.sendEvent(widget, QHelpEvent(QHelpEvent.Type.ToolTip, point, widget.mapToGlobal(point)))
    assert QToolTip.text() == text
    QToolTip.hideText()
