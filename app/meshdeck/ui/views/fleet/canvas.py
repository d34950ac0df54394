"""The fleet grid: every GPU of every host as one square, drawn by one widget in one paintEvent.

A widget per cell would be 2,224 widgets; instead the cells are `QRect`s made once per layout and
painted with one `drawRects` call per colour bin (64 bins of the colour map), so a paint costs a few
dozen Qt calls whatever the fleet's size. Hosts whose data is stale or who are disconnected are
hatched and say so in their label (not only a colour); a cell without data is an empty outline.

Mouse: hover shows a GPU's values (the view writes the text: everything a server sent is escaped);
a click opens the host; Ctrl+click toggles a host in the selection, Shift+click adds it, and dragging
draws a rubber band that selects the GPUs it touches (with Ctrl: adds them). The selection is what the
view hands to the dashboard.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from PySide6.QtCore import QPoint, QRect, QSize, Qt, Signal
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFont,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
    QPixmap,
    QResizeEvent,
)
from PySide6.QtWidgets import QRubberBand, QSizePolicy, QToolTip, QWidget

from meshdeck.ui.views.fleet.layout import Group, Layout, cell_at, cells_in, compute_layout

HOST_LIVE, HOST_STALE, HOST_DISCONNECTED = 0, 1, 2
DRAG_THRESHOLD_PX = 4
STATE_BADGES = {HOST_STALE: "stale", HOST_DISCONNECTED: "offline"}  # the word over a block's cells
STALE_COLOR = "#C62828"  # the label and dashed frame of a stale or disconnected host


class FleetCanvas(QWidget):
    """Paints the cells; says which cell was clicked and when the selection changed."""

    cell_clicked = Signal(int)
    selection_changed = Signal()

    def __init__(self, colors: Sequence[QColor], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("fleetCanvas")
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.colors = list(colors)
        self.describe: Callable[[int], str] = lambda _cell: ""  # the tooltip of a cell (the view sets it)
        self.groups: tuple[Group, ...] = ()
        self.cells = 0
        self.cell_host = np.empty(0, dtype=np.intp)
        self.host_labels: list[str] = []
        self.host_state = np.empty(0, dtype=np.int8)
        self.bins = np.empty(0, dtype=np.intp)  # colour bin per cell, -1: no data
        self.selected = np.empty(0, dtype=bool)
        self.layout_: Layout | None = None
        self._rects: list[QRect] = []
        self._viewport_height = 0
        self._press: QPoint | None = None
        self._band = QRubberBand(QRubberBand.Shape.Rectangle, self)
        self._hovered: int | None = None
        self.paints = 0
        self._hosts_layer: QPixmap | None = None
        self._hosts_layer_key: tuple[object, ...] = ()  # what the layer shows (the layout by identity)

    # ------------------------------------------------------------------ inputs

    def set_structure(self, groups: tuple[Group, ...], cell_host: np.ndarray, host_labels: list[str]) -> None:
        """New hosts, GPUs or grouping: lay the cells out again (the selection is kept where cells stay)."""
        self.groups = groups
        self.cells = int(cell_host.shape[0])
        self.cell_host = cell_host
        self.host_labels = host_labels
        if self.selected.shape[0] != self.cells:
            self.selected = np.zeros(self.cells, dtype=bool)
        if self.bins.shape[0] != self.cells:
            self.bins = np.full(self.cells, -1, dtype=np.intp)
        if self.host_state.shape[0] != len(host_labels):
            self.host_state = np.zeros(len(host_labels), dtype=np.int8)
        self._relayout()

    def set_viewport_height(self, height: int) -> None:
        """How tall the scroll area shows the canvas: the cells shrink to fit it before it scrolls."""
        if height != self._viewport_height:
            self._viewport_height = height
            self._relayout()

    def set_colors(self, bins: np.ndarray, host_state: np.ndarray, host_labels: list[str]) -> None:
        self.bins = bins
        self.host_state = host_state
        self.host_labels = host_labels

    def _relayout(self) -> None:
        metrics = self.fontMetrics()
        label = metrics.height() + 1
        self.layout_ = compute_layout(
            self.groups, self.cells, max(self.width(), 200), max(self._viewport_height, 100), label, label + 6
        )
        self._rects = [QRect(*map(int, r)) for r in self.layout_.cell_rects]
        self.setMinimumHeight(self.layout_.height)
        self.update()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self._relayout()

    def sizeHint(self) -> QSize:
        return QSize(800, self.layout_.height if self.layout_ else 400)

    # ------------------------------------------------------------------ painting

    def paintEvent(self, event: QPaintEvent) -> None:
        self.paints += 1
        layout = self.layout_
        painter = QPainter(self)
        palette = self.palette()
        painter.fillRect(self.rect(), palette.color(QPalette.ColorRole.Base))
        if layout is None or not self.cells:
            painter.setPen(palette.color(QPalette.ColorRole.Text))
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "No hosts yet: add one in Hosts")
            return
        text = palette.color(QPalette.ColorRole.Text)
        bold = painter.font()
        bold.setBold(True)
        normal = painter.font()
        painter.setPen(text)
        painter.setFont(bold)
        for x, y, title in layout.titles:
            painter.drawText(x, y + painter.fontMetrics().ascent() + 2, title)
        painter.setFont(normal)

        rects = self._rects
        placed = layout.cell_rects[:, 2] > 0
        painter.setPen(Qt.PenStyle.NoPen)
        bins = self.bins
        order = np.argsort(bins, kind="stable")
        sorted_bins = bins[order]
        starts = np.flatnonzero(np.diff(sorted_bins, prepend=-2))
        ends = np.append(starts[1:], order.shape[0])
        for start, end in zip(starts, ends, strict=True):
            colour_bin = int(sorted_bins[start])
            if colour_bin < 0:
                continue
            painter.setBrush(self.colors[colour_bin])
            painter.drawRects([rects[i] for i in order[start:end] if placed[i]])
        missing = np.flatnonzero((bins < 0) & placed)
        if missing.size:  # no data: an empty outline, never a colour of the scale
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.setPen(QPen(palette.color(QPalette.ColorRole.Mid), 1, Qt.PenStyle.DotLine))
            painter.drawRects([rects[i].adjusted(0, 0, -1, -1) for i in missing])

        self._paint_hosts(painter, layout, text)
        chosen = np.flatnonzero(self.selected & placed)
        if chosen.size:
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.setPen(QPen(palette.color(QPalette.ColorRole.Highlight), 2))
            painter.drawRects([rects[i].adjusted(1, 1, -1, -1) for i in chosen])
        painter.end()

    def _paint_hosts(self, painter: QPainter, layout: Layout, text: QColor) -> None:
        """Each block's host name above its cells; stale / disconnected blocks hatched and labelled.

        Drawn into a pixmap kept until a label, a host's state, the layout or the palette changes: 278
        `drawText` calls cost more than all the cells, and labels rarely change between refreshes."""
        key = (
            layout,
            tuple(self.host_labels),
            self.host_state.tobytes(),
            text.rgba(),
            self.devicePixelRatioF(),
            self.size(),
        )
        if self._hosts_layer is None or self._hosts_layer_key != key:
            self._hosts_layer = self._render_hosts_layer(layout, text)
            self._hosts_layer_key = key
        painter.drawPixmap(0, 0, self._hosts_layer)

    def _render_hosts_layer(self, layout: Layout, text: QColor) -> QPixmap:
        ratio = self.devicePixelRatioF()
        pixmap = QPixmap(int(self.width() * ratio) + 1, int(max(self.height(), layout.height) * ratio) + 1)
        pixmap.setDevicePixelRatio(ratio)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        painter.setFont(self.font())
        metrics = painter.fontMetrics()
        hatch = QBrush(text, Qt.BrushStyle.BDiagPattern)
        warn = QColor(STALE_COLOR)
        badge_font = self.font()
        badge_font.setBold(True)
        for (x, y, width, height), host in zip(layout.block_rects.tolist(), layout.block_hosts.tolist(), strict=True):
            state = int(self.host_state[host]) if host < self.host_state.shape[0] else HOST_LIVE
            label = self.host_labels[host] if host < len(self.host_labels) else ""
            top, cells_height = y + layout.label_height, height - layout.label_height
            painter.setPen(warn if state != HOST_LIVE else text)
            # the end of a name tells hosts apart (gpu-node-017): elide its start
            painter.drawText(x, y + metrics.ascent(), metrics.elidedText(label, Qt.TextElideMode.ElideLeft, width + 6))
            if state == HOST_LIVE:
                continue
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(hatch)
            painter.drawRect(x, top, width, cells_height)
            painter.setPen(QPen(warn, 1, Qt.PenStyle.DashLine))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRect(x - 1, top - 1, width + 1, cells_height + 1)
            self._draw_badge(painter, badge_font, QRect(x, top, width, cells_height), STATE_BADGES[state], warn)
        painter.end()
        return pixmap

    def _draw_badge(self, painter: QPainter, font: QFont, area: QRect, word: str, colour: QColor) -> None:
        """`word` (stale, offline) in a small box over a block's cells, when it fits."""
        painter.setFont(font)
        metrics = painter.fontMetrics()
        box = metrics.boundingRect(word).adjusted(-3, -1, 3, 1)
        if box.width() <= area.width() + 2 and box.height() <= area.height() + 2:
            box.moveCenter(area.center())
            painter.setPen(colour)
            painter.setBrush(self.palette().color(QPalette.ColorRole.Base))
            painter.drawRect(box)
            painter.drawText(box, Qt.AlignmentFlag.AlignCenter, word)
        painter.setFont(self.font())

    # ------------------------------------------------------------------ mouse

    def _cell_at(self, point: QPoint) -> int | None:
        return cell_at(self.layout_, point.x(), point.y()) if self.layout_ is not None else None

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        point = event.position().toPoint()
        if self._press is not None and (point - self._press).manhattanLength() >= DRAG_THRESHOLD_PX:
            self._band.setGeometry(QRect(self._press, point).normalized())
            self._band.show()
            return
        cell = self._cell_at(point)
        if cell != self._hovered:
            self._hovered = cell
            if cell is None:
                QToolTip.hideText()
            else:
                QToolTip.showText(event.globalPosition().toPoint(), self.describe(cell), self, self._rects[cell])

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self._press = event.position().toPoint()

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() != Qt.MouseButton.LeftButton or self._press is None:
            return
        press, self._press = self._press, None
        modifiers = event.modifiers()
        adding = bool(modifiers & (Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier))
        if self._band.isVisible():
            self._band.hide()
            point = event.position().toPoint()
            touched: np.ndarray | list[int] = (
                cells_in(self.layout_, press.x(), press.y(), point.x(), point.y()) if self.layout_ else []
            )
            self.select_cells(touched, add=adding)
            return
        cell = self._cell_at(press)
        if modifiers & Qt.KeyboardModifier.ControlModifier and cell is not None:
            self.toggle_host(int(self.cell_host[cell]))
        elif modifiers & Qt.KeyboardModifier.ShiftModifier and cell is not None:
            self.select_cells(np.flatnonzero(self.cell_host == self.cell_host[cell]), add=True)
        elif cell is not None:
            self.cell_clicked.emit(cell)
        elif self.selected.any():
            self.select_cells([], add=False)

    # ------------------------------------------------------------------ selection

    def select_cells(self, cells: Sequence[int] | np.ndarray, *, add: bool) -> None:
        chosen = self.selected.copy() if add else np.zeros(self.cells, dtype=bool)
        chosen[np.asarray(cells, dtype=np.intp)] = True
        if not np.array_equal(chosen, self.selected):
            self.selected = chosen
            self.update()
            self.selection_changed.emit()

    def toggle_host(self, host: int) -> None:
        cells = np.flatnonzero(self.cell_host == host)
        chosen = self.selected.copy()
        chosen[cells] = not bool(self.selected[cells].all())
        self.selected = chosen
        self.update()
        self.selection_changed.emit()
