"""The rank map drawn on the real GPUs: which GPU of which host holds which TP / PP / DP / EP rank.

One row per node (named by its host when the plan came from detected hosts), one box per GPU.
A box's colour is its data-parallel replica (one hue per replica of each instance) and gets darker
with its pipeline stage, so a TP group reads as a run of equal colour and PP stages as steps.
GPUs the layout leaves idle are grey. With expert parallelism the box also gives the EP rank
(EP = TP × DP inside an instance, as vLLM forms it).
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPalette, QPen
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
    BOX_W = 112
    BOX_H = 66
    NAME_W = 110
    GAP = 6

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("rankMap")
        self.layout_plan: LayoutPlan | None = None
        self.node_names: list[str] = []
        self.nodes = 0
        self.gpus_per_node = 0
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set_layout(
        self, layout: LayoutPlan | None, nodes: int, gpus_per_node: int, node_names: Sequence[str] = ()
    ) -> None:
        self.layout_plan = layout
        self.nodes = nodes
        self.gpus_per_node = gpus_per_node
        self.node_names = [node_names[i] if i < len(node_names) else f"node {i}" for i in range(nodes)]
        self.updateGeometry()
        self.update()

    def placements(self) -> dict[tuple[int, int], RankPlacement]:
        if self.layout_plan is None:
            return {}
        return {(r.node, r.gpu): r for r in self.layout_plan.rank_map}

    def sizeHint(self) -> QSize:
        shown_nodes = min(self.nodes, 16)
        width = self.NAME_W + self.gpus_per_node * (self.BOX_W + self.GAP)
        return QSize(width, 8 + shown_nodes * (self.BOX_H + self.GAP) + (20 if self.nodes > 16 else 0))

    def minimumSizeHint(self) -> QSize:
        return QSize(300, self.sizeHint().height())

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
        box_w = max(60.0, min(float(self.BOX_W), (self.width() - self.NAME_W) / max(self.gpus_per_node, 1) - self.GAP))
        for node in range(min(self.nodes, 16)):
            y = 4 + node * (self.BOX_H + self.GAP)
            painter.setPen(text)
            painter.drawText(
                QRectF(0, y, self.NAME_W - 8, self.BOX_H), Qt.AlignmentFlag.AlignVCenter, self.node_names[node]
            )
            for gpu in range(self.gpus_per_node):
                rect = QRectF(self.NAME_W + gpu * (box_w + self.GAP), y, box_w, self.BOX_H)
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
                    rect.adjusted(4, 2, -4, -2),
                    Qt.AlignmentFlag.AlignCenter,
                    f"GPU {gpu}\n" + "\n".join(rank_labels(rank, layout)),
                )
        if self.nodes > 16:
            painter.setPen(text)
            painter.drawText(4, 4 + 16 * (self.BOX_H + self.GAP) + 14, f"… and {self.nodes - 16} more nodes")
        painter.end()
