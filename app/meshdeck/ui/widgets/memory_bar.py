"""Stacked per-GPU memory bars: where each GPU's memory goes under a layout.

One bar per pipeline stage (all GPUs of a stage hold the same), left to right: weights, the
reserve vLLM keeps out of the KV cache (activation peak, sampler, NCCL and CUDA context), the KV
cache, what is left inside `gpu_memory_utilization`, CUDA graphs captured outside that budget
(vLLM < 0.20), memory outside the utilization fraction, and what the driver keeps (nvidia-smi
total minus what torch sees). Hover a segment for its exact size.

DeepSeek-V4 keeps several kinds of KV in one block pool (core.v4_kv): its KV cache is drawn as those parts,
in proportion to the layout's bytes per token by part (`LayoutPlan.kv_bytes_per_token_by_part`), in shades
of the KV green; their tooltips add each part's bytes per token. The legend names the parts present only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QFontMetrics, QHelpEvent, QPainter, QPalette
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from meshdeck.core.layout_plan import LayoutPlan
from meshdeck.ui.charts.units import format_bytes

SEGMENT_COLORS = {
    "weights": "#4E79A7",
    "reserve": "#F28E2B",
    "kv cache": "#59A14F",
    "free in budget": "#BAB0AC",
    "NCCL / graphs outside budget": "#B07AA1",
    "outside utilization": "#D7D7D7",
    "driver / not visible": "#8C8C8C",
}
KV_CACHE = "kv cache"
# DeepSeek-V4's KV parts (core.v4_kv): (the name a bar and its legend show, its shade of the KV green)
KV_PARTS = {
    # dark and light alternate along the bar, green and teal apart, so neighbours stay distinct
    "swa": ("KV: sliding window", "#1B5E20"),
    "c4_latent": ("KV: C4 compressed", "#43A047"),
    "c128_latent": ("KV: C128 compressed", "#26A69A"),
    "indexer": ("KV: indexer keys", "#C5E1A5"),
    "compressor_state": ("KV: compressor state", "#00695C"),
    "padding": ("KV: page padding", "#E8F5E9"),  # hatched: unused bytes
}
KV_PART_COLORS = dict(KV_PARTS.values())
KV_PART_EXPLAINED = {
    "KV: sliding window": "the last 128 tokens every layer keeps uncompressed",
    "KV: C4 compressed": "latents of the layers that compress 4 tokens into one",
    "KV: C128 compressed": "latents of the layers that compress 128 tokens into one",
    "KV: indexer keys": "the sparse indexer's keys (C4 layers)",
    "KV: compressor state": "the compressors' fp32 states of tokens not yet compressed",
    "KV: page padding": "what rounding each page to its size leaves unused",
}
OTHER_KV_COLOR = "#7FBF7B"  # a part this console does not know by name (drawn, named as core names it)
DARK_TEXT = frozenset({"free in budget", "outside utilization", "KV: indexer keys", "KV: page padding"})


def segment_color(name: str) -> str:
    return SEGMENT_COLORS.get(name) or KV_PART_COLORS.get(name) or OTHER_KV_COLOR


def kv_part_label(part: str) -> str:
    known = KV_PARTS.get(part)
    return known[0] if known else f"KV: {part.replace('_', ' ')}"


@dataclass(frozen=True)
class MemoryBar:
    label: str
    total_bytes: int
    segments: tuple[tuple[str, int], ...]  # (name, bytes), in drawing order
    # DeepSeek-V4: the KV parts' bytes per token of capacity on this stage (name as in `segments`)
    per_token: tuple[tuple[str, float], ...] = ()
    note: str = ""  # said under every KV part's tooltip on this bar

    def tooltip(self, name: str, size: int) -> str:
        text = f"{name}: {format_bytes(size, 2)} of {format_bytes(self.total_bytes, 2)} per GPU"
        per_token = dict(self.per_token).get(name)
        if per_token is None:
            return text
        explained = KV_PART_EXPLAINED.get(name)
        lines = [text, f"{per_token:,.1f} bytes per token", *([explained] if explained else []), self.note]
        return "\n".join(line for line in lines if line)


def kv_part_segments(
    parts: Sequence[tuple[str, float]], kv_bytes: int, scale: float = 1.0
) -> tuple[list[tuple[str, int]], list[tuple[str, float]]]:
    """`kv_bytes` split in proportion to `parts` (bytes per token by part), as (label, bytes) summing to
    `kv_bytes` exactly, and each part's bytes per token × `scale` (label, bytes)."""
    shown = [(part, value) for part, value in parts if value > 0]
    total = sum(value for _part, value in shown)
    if kv_bytes <= 0 or total <= 0:
        return [], []
    segments, running, placed = [], 0.0, 0
    for part, value in shown:
        running += value
        end = round(kv_bytes * running / total)  # cumulative rounding: the parts add up to kv_bytes
        segments.append((kv_part_label(part), end - placed))
        placed = end
    return segments, [(kv_part_label(part), value * scale) for part, value in shown]


def memory_bars(layout: LayoutPlan, total_bytes: int, torch_visible_bytes: int) -> list[MemoryBar]:
    """One bar per pipeline stage of `layout` on GPUs of `total_bytes` (torch sees `torch_visible_bytes`)."""
    usable = layout.usable_bytes_per_gpu
    parts = layout.kv_bytes_per_token_by_part
    # the parts are the stage holding the most KV per token (every stage has the same blocks: the one with the
    # largest pool); another stage's bytes per token scale with its pool, its split is taken to be the same
    largest = max((stage for stage in layout.stages), key=lambda stage: stage.kv_cache_bytes, default=None)
    bars = []
    for stage in layout.stages:
        reserve = stage.reserve
        kv = max(stage.kv_cache_bytes, 0)
        used = stage.weights_bytes + reserve.in_budget_bytes + kv
        kv_segments: list[tuple[str, int]] = [(KV_CACHE, kv)]
        per_token: list[tuple[str, float]] = []
        note = ""
        if parts and largest is not None and largest.kv_cache_bytes > 0:
            split, per_token = kv_part_segments(parts, kv, kv / largest.kv_cache_bytes)
            kv_segments = split or kv_segments
            if stage is not largest:
                note = f"split as on stage {largest.stage} (its layers may mix the kinds a little differently)"
        segments = [
            ("weights", stage.weights_bytes),
            ("reserve", reserve.in_budget_bytes),
            *kv_segments,
            ("free in budget", max(usable - used, 0)),
            ("NCCL / graphs outside budget", reserve.outside_budget_bytes),
            ("outside utilization", max(torch_visible_bytes - usable - reserve.outside_budget_bytes, 0)),
            ("driver / not visible", max(total_bytes - torch_visible_bytes, 0)),
        ]
        label = (
            f"stage {stage.stage} (layers {stage.first_layer}–{stage.end_layer - 1})"
            if len(layout.stages) > 1
            else "every GPU"
        )
        kept = tuple((n, b) for n, b in segments if b > 0)
        bars.append(MemoryBar(label, total_bytes, kept, tuple(per_token), note))
    return bars


def legend_names(bars: Sequence[MemoryBar]) -> list[str]:
    """The legend: every fixed segment kind (V3's bars unchanged); where the bars show V4's KV parts, those
    present take the place of "kv cache"."""
    present = {name for bar in bars for name, _size in bar.segments}
    parts = [name for name in dict.fromkeys(n for bar in bars for n, _s in bar.segments) if name not in SEGMENT_COLORS]
    names = []
    for name in SEGMENT_COLORS:
        if name == KV_CACHE and parts:
            names += [*([KV_CACHE] if KV_CACHE in present else []), *parts]
        else:
            names.append(name)
    return names


class MemoryBarsWidget(QWidget):
    """Paints `MemoryBar`s with a legend (wrapped over as many lines as it needs); tooltips give each
    segment's size (and a V4 KV part's bytes per token)."""

    BAR_HEIGHT = 26
    LABEL_WIDTH = 190
    LEGEND_LINE = 20

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("memoryBars")
        self.bars: list[MemoryBar] = []
        self._hit: list[tuple[QRectF, str]] = []
        self.setMouseTracking(True)
        policy = QSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    def set_bars(self, bars: Sequence[MemoryBar]) -> None:
        self.bars = list(bars)
        self.updateGeometry()
        self.update()

    def _legend_places(self, width: int) -> list[tuple[str, float, int]]:
        """(name, x, line) of each legend entry, wrapped to fit `width`."""
        metrics = QFontMetrics(self.font())
        right = max(width - 10, self.LABEL_WIDTH + 200)
        places, x, line = [], float(self.LABEL_WIDTH), 0
        for name in legend_names(self.bars):
            advance = metrics.horizontalAdvance(name) + 26
            if x + advance > right and x > self.LABEL_WIDTH:
                x, line = float(self.LABEL_WIDTH), line + 1
            places.append((name, x, line))
            x += advance
        return places

    def _height(self, width: int) -> int:
        lines = max((line for _n, _x, line in self._legend_places(width)), default=0) + 1
        return 14 + len(self.bars) * (self.BAR_HEIGHT + 8) + lines * self.LEGEND_LINE

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self._height(width)

    def sizeHint(self) -> QSize:
        return QSize(600, self._height(self.width() if self.width() > 100 else 600))

    def minimumSizeHint(self) -> QSize:
        return self.sizeHint()

    def resizeEvent(self, event: object) -> None:
        self.updateGeometry()  # the legend may wrap over another number of lines

    def paintEvent(self, event: object) -> None:
        painter = QPainter(self)
        text = self.palette().color(QPalette.ColorRole.Text)
        painter.setPen(text)
        self._hit = []
        width = max(self.width() - self.LABEL_WIDTH - 10, 50)
        y = 6.0
        for bar in self.bars:
            painter.setPen(text)
            painter.drawText(
                QRectF(0, y, self.LABEL_WIDTH - 6, self.BAR_HEIGHT), Qt.AlignmentFlag.AlignVCenter, bar.label
            )
            x = float(self.LABEL_WIDTH)
            for name, size in bar.segments:
                w = width * size / bar.total_bytes if bar.total_bytes else 0
                rect = QRectF(x, y, w, self.BAR_HEIGHT)
                self._fill(painter, rect, name)
                if w > 56:
                    painter.setPen(QColor("#000000") if name in DARK_TEXT else QColor("#FFFFFF"))
                    painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, format_bytes(size))
                self._hit.append((rect, bar.tooltip(name, size)))
                x += w
            y += self.BAR_HEIGHT + 8
        for name, x, line in self._legend_places(self.width()):
            top = y + line * self.LEGEND_LINE
            self._fill(painter, QRectF(x, top + 4, 10, 10), name)
            painter.setPen(text)
            label_width = painter.fontMetrics().horizontalAdvance(name) + 22
            painter.drawText(QRectF(x + 14, top, label_width, 18), Qt.AlignmentFlag.AlignVCenter, name)
        painter.end()

    @staticmethod
    def _fill(painter: QPainter, rect: QRectF, name: str) -> None:
        painter.fillRect(rect, QColor(segment_color(name)))
        if name == KV_PARTS["padding"][0]:  # unused bytes: hatched over their shade
            painter.fillRect(rect, QBrush(QColor("#66BB6A"), Qt.BrushStyle.BDiagPattern))

    def event(self, event: QEvent) -> bool:
        if isinstance(event, QHelpEvent):
            for rect, text in self._hit:
                if rect.contains(event.position() if hasattr(event, "position") else event.pos()):
                    QToolTip.showText(event.globalPos(), text, self)
                    return True
            QToolTip.hideText()
            return True
        return super().event(event)
