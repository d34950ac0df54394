"""Stacked per-GPU memory bars: where each GPU's memory goes under a layout.

One bar per pipeline stage (all GPUs of a stage hold the same), left to right: weights, the
reserve vLLM keeps out of the KV cache (activation peak, sampler, NCCL and CUDA context), the KV
cache, what is left inside `gpu_memory_utilization`, CUDA graphs captured outside that budget
(vLLM < 0.20), memory outside the utilization fraction, and what the driver keeps (nvidia-smi
total minus what torch sees). Hover a segment for its exact size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QHelpEvent, QPainter, QPalette
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


@dataclass(frozen=True)
class MemoryBar:
    label: str
    total_bytes: int
    segments: tuple[tuple[str, int], ...]  # (name, bytes), in drawing order


def memory_bars(layout: LayoutPlan, total_bytes: int, torch_visible_bytes: int) -> list[MemoryBar]:
    """One bar per pipeline stage of `layout` on GPUs of `total_bytes` (torch sees `torch_visible_bytes`)."""
    usable = layout.usable_bytes_per_gpu
    bars = []
    for stage in layout.stages:
        reserve = stage.reserve
        kv = max(stage.kv_cache_bytes, 0)
        used = stage.weights_bytes + reserve.in_budget_bytes + kv
        segments = [
            ("weights", stage.weights_bytes),
            ("reserve", reserve.in_budget_bytes),
            ("kv cache", kv),
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
        bars.append(MemoryBar(label, total_bytes, tuple((n, b) for n, b in segments if b > 0)))
    return bars


class MemoryBarsWidget(QWidget):
    """Paints `MemoryBar`s with a legend; tooltips give each segment's size."""

    BAR_HEIGHT = 26
    LABEL_WIDTH = 190

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("memoryBars")
        self.bars: list[MemoryBar] = []
        self._hit: list[tuple[QRectF, str]] = []
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set_bars(self, bars: Sequence[MemoryBar]) -> None:
        self.bars = list(bars)
        self.updateGeometry()
        self.update()

    def sizeHint(self) -> QSize:
        return QSize(600, 34 + len(self.bars) * (self.BAR_HEIGHT + 8) + 26)

    def minimumSizeHint(self) -> QSize:
        return self.sizeHint()

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
                painter.fillRect(rect, QColor(SEGMENT_COLORS[name]))
                if w > 56:
                    painter.setPen(
                        QColor("#000000") if name in ("free in budget", "outside utilization") else QColor("#FFFFFF")
                    )
                    painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, format_bytes(size))
                self._hit.append((rect, f"{name}: {format_bytes(size, 2)} of {format_bytes(bar.total_bytes, 2)}"))
                x += w
            y += self.BAR_HEIGHT + 8
        x = float(self.LABEL_WIDTH)
        for name, color in SEGMENT_COLORS.items():
            painter.fillRect(QRectF(x, y + 4, 10, 10), QColor(color))
            painter.setPen(text)
            label_width = painter.fontMetrics().horizontalAdvance(name) + 22
            painter.drawText(QRectF(x + 14, y, label_width, 18), Qt.AlignmentFlag.AlignVCenter, name)
            x += label_width
        painter.end()

    def event(self, event: QEvent) -> bool:
        if isinstance(event, QHelpEvent):
            for rect, text in self._hit:
                if rect.contains(event.position() if hasattr(event, "position") else event.pos()):
                    QToolTip.showText(event.globalPos(), text, self)
                    return True
            QToolTip.hideText()
            return True
        return super().event(event)
