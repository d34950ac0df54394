"""The rank map drawn on the real GPUs: which GPU of which host holds which TP / PP / DP / EP rank.

One row per node (named by its host when the plan came from detected hosts), one box per GPU.
A box's colour is its data-parallel replica (one hue per replica of each instance) and gets darker
with its pipeline stage, so a TP group reads as a run of equal colour and PP stages as steps.
GPUs the layout leaves idle are grey. With expert parallelism the box also gives the EP rank
(EP = TP × DP inside an instance, as vLLM forms it).

A box is never narrower than its text (measured with the widget's font): where the GPUs do not fit the
width, the widget asks for more (`minimumSizeHint`) and the scroll area it sits in scrolls, instead of
painting boxes past its edge or cutting their labels.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFontMetrics, QPainter, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from meshdeck.core.layout_plan import LayoutPlan
from meshdeck.core.placement import RankPlacement
from meshdeck.ui import theme


def rank_labels(rank: RankPlacement, layout: LayoutPlan) -> list[str]:
    """The text of one GPU box, e.g. ['rank 9', 'TP 1 · PP 1', 'DP 0 · EP 1']."""
    lines = [f"rank {rank.rank}" + (f" · inst {rank.instance}" if layout.instances > 1 else "")]
    lines.append(f"TP {rank.tensor_rank} · PP {rank.pipeline_stage}")
    third = f"DP {rank.data_parallel_rank}"
    if layout.expert_parallel:
        third += f" · EP {rank.data_parallel_rank * layout.tensor_parallel + rank.tensor_rank}"
    lines.append(third)
    return lines


class RankMapWidget(QWidget):
    BOX_W = 112  # the widest a box gets
    BOX_H = 66  # the least height of a box (more when four lines of the font need it)
    NAME_W = 110
    GAP = 6
    PAD = 4  # around a box's text
    SHOWN_NODES = 16

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("rankMap")
        self.layout_plan: LayoutPlan | None = None
        self.node_names: list[str] = []
        self.nodes = 0
        self.gpus_per_node = 0
        self._measured: tuple[tuple[int, int, int, str], tuple[float, float]] | None = None
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set_layout(
        self, layout: LayoutPlan | None, nodes: int, gpus_per_node: int, node_names: Sequence[str] = ()
    ) -> None:
        self.layout_plan = layout
        self.nodes = nodes
        self.gpus_per_node = gpus_per_node
        self.node_names = [node_names[i] if i < len(node_names) else f"node {i}" for i in range(nodes)]
        self._measured = None
        self.updateGeometry()
        self.update()

    def placements(self) -> dict[tuple[int, int], RankPlacement]:
        if self.layout_plan is None:
            return {}
        return {(r.node, r.gpu): r for r in self.layout_plan.rank_map}

    def _box_texts(self) -> list[str]:
        """Every box's text, as painted."""
        layout = self.layout_plan
        if layout is None:
            return []
        where = self.placements()
        texts = []
        for node in range(min(self.nodes, self.SHOWN_NODES)):
            for gpu in range(self.gpus_per_node):
                rank = where.get((node, gpu))
                texts.append(f"GPU {gpu}\n" + ("\n".join(rank_labels(rank, layout)) if rank else "idle"))
        return texts

    def _box_size(self) -> tuple[float, float]:
        """The least (width, height) of a box that holds every box's text in the current font (measured
        once per layout and font: layouts ask for size hints often)."""
        key = (id(self.layout_plan), self.nodes, self.gpus_per_node, self.font().key())
        if self._measured is not None and self._measured[0] == key:
            return self._measured[1]
        metrics = QFontMetrics(self.font())
        texts = self._box_texts()
        lines = [line for text in texts for line in text.split("\n")]
        width = max((metrics.horizontalAdvance(line) for line in lines), default=0) + 2 * self.PAD + 2
        rows = max((text.count("\n") + 1 for text in texts), default=1)
        height = max(float(self.BOX_H), rows * metrics.lineSpacing() + 2 * self.PAD)
        self._measured = (key, (float(width), height))
        return float(width), height

    def _row_height(self) -> float:
        return self._box_size()[1] + self.GAP

    def sizeHint(self) -> QSize:
        least_w, box_h = self._box_size()
        width = self.NAME_W + self.gpus_per_node * (max(least_w, self.BOX_W) + self.GAP)
        shown_nodes = min(self.nodes, self.SHOWN_NODES)
        height = 8 + shown_nodes * (box_h + self.GAP) + (20 if self.nodes > self.SHOWN_NODES else 0)
        return QSize(int(width), int(height))

    def minimumSizeHint(self) -> QSize:
        """Room for every box at the width of its text: narrower, the scroll area around scrolls."""
        least_w, _ = self._box_size()
        width = self.NAME_W + self.gpus_per_node * (least_w + self.GAP)
        return QSize(max(300, int(width + 0.5)), self.sizeHint().height())

    def tile_rects(self) -> dict[tuple[int, int], QRectF]:
        """(node, GPU) -> where its box is painted, at the widget's current width."""
        least_w, box_h = self._box_size()
        room = (self.width() - self.NAME_W) / max(self.gpus_per_node, 1) - self.GAP
        box_w = max(least_w, min(float(self.BOX_W), room))
        return {
            (node, gpu): QRectF(self.NAME_W + gpu * (box_w + self.GAP), 4 + node * (box_h + self.GAP), box_w, box_h)
            for node in range(min(self.nodes, self.SHOWN_NODES))
            for gpu in range(self.gpus_per_node)
        }

    def _color(self, rank: RankPlacement) -> QColor:
        layout = self.layout_plan
        assert layout is not None
        replica = rank.instance * layout.data_parallel + rank.data_parallel_rank
        color = QColor(theme.SERIES_COLORS[replica % len(theme.SERIES_COLORS)])
        return color.darker(100 + 35 * rank.pipeline_stage)

    def paintEvent(self, event: object) -> None:
        painter = QPainter(self)
        text = self.palette().color(QPalette.ColorRole.Text)
        layout = self.layout_plan
        if layout is None:
            painter.setPen(text)
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "choose a layout to see its ranks on the GPUs")
            return
        where = self.placements()
        tiles = self.tile_rects()
        _, box_h = self._box_size()
        for node in range(min(self.nodes, self.SHOWN_NODES)):
            y = 4 + node * (box_h + self.GAP)
            painter.setPen(text)
            painter.drawText(
                QRectF(0, y, self.NAME_W - 8, box_h),
                Qt.AlignmentFlag.AlignVCenter,
                QFontMetrics(self.font()).elidedText(
                    self.node_names[node], Qt.TextElideMode.ElideRight, self.NAME_W - 8
                ),
            )
            for gpu in range(self.gpus_per_node):
                rect = tiles[(node, gpu)]
                rank = where.get((node, gpu))
                if rank is None:
                    painter.fillRect(rect, QColor("#9E9E9E"))
                    painter.setPen(QColor("#FFFFFF"))
                    painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, f"GPU {gpu}\nidle")
                    continue
                fill = self._color(rank)
                painter.fillRect(rect, fill)
                painter.setPen(QPen(QColor("#000000") if fill.lightness() > 150 else QColor("#FFFFFF")))
                painter.drawText(
                    rect.adjusted(self.PAD, self.PAD, -self.PAD, -self.PAD),
                    Qt.AlignmentFlag.AlignCenter,
                    f"GPU {gpu}\n" + "\n".join(rank_labels(rank, layout)),
                )
        if self.nodes > self.SHOWN_NODES:
            painter.setPen(text)
            more = self.nodes - self.SHOWN_NODES
            painter.drawText(4, int(4 + self.SHOWN_NODES * (box_h + self.GAP) + 14), f"… and {more} more nodes")
        painter.end()
