"""The fleet grid: every GPU of every host as one square, drawn by one widget in one paintEvent.

A widget per cell would be 2,224 widgets, and even one Qt call per colour is too many: PySide releases
the GIL around each Qt call, and in the console's process (hundreds of busy threads at fleet scale) each
re-take costs milliseconds. So the cells are one image: `raster` works out once per layout what each
pixel shows, a refresh fills the pixels with one numpy lookup, and a paint is a handful of Qt calls
(the background, that image, the cached layer of host names and group titles) whatever the fleet's
size. Hosts whose data is stale or who are disconnected are hatched and say so in their label (not only a
colour); a cell without data is a dotted outline, never a colour; a selected cell has a frame.

Mouse: hover shows a GPU's values (the view writes the text: everything a server sent is escaped);
a click opens the host; Ctrl+click toggles a host in the selection, Shift+click adds it, and dragging
draws a rubber band that selects the GPUs it touches (with Ctrl: adds them). The selection is what the
view hands to the dashboard.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
from PySide6.QtCore import QEvent, QPoint, QRect, QSize, Qt, Signal
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFont,
    QImage,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
    QPixmap,
    QResizeEvent,
)
from PySide6.QtWidgets import QRubberBand, QSizePolicy, QToolTip, QWidget

from meshdeck.ui.views.fleet.layout import BLOCK_GAP_X, Group, Layout, cell_at, cells_in, compute_layout
from meshdeck.ui.views.fleet.raster import Raster, colour_lut, premultiplied, rasterize, selection_offsets

HOST_LIVE, HOST_STALE, HOST_DISCONNECTED = 0, 1, 2
DRAG_THRESHOLD_PX = 4
STATE_BADGES = {HOST_STALE: "stale", HOST_DISCONNECTED: "offline"}  # the word over a block's cells
STALE_COLOR = "#C62828"  # the label and dashed frame of a stale or disconnected host
HOSTS_LAYER_REDRAW_SHARE = 0.25  # more hosts changed than this share: the whole layer is drawn again


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
        self._scale = np.array([premultiplied(colour.rgba()) for colour in self.colors], dtype=np.uint32)
        self.describe: Callable[[int], str] = lambda _cell: ""  # the tooltip of a cell (the view sets it)
        self.groups: tuple[Group, ...] = ()
        self.cells = 0
        self.cell_host = np.empty(0, dtype=np.intp)
        self.host_labels: list[str] = []
        self.host_state = np.empty(0, dtype=np.int8)
        self.bins = np.empty(0, dtype=np.intp)  # colour bin per cell, -1: no data
        self._selected = np.empty(0, dtype=bool)
        self._offsets = np.empty(0, dtype=np.intp)  # selection_offsets of the selection
        self.layout_: Layout | None = None
        self._viewport_height = 0
        self._press: QPoint | None = None
        self._band = QRubberBand(QRubberBand.Shape.Rectangle, self)
        self._hovered: int | None = None
        self.paints = 0
        self._hosts_layer: QPixmap | None = None
        self._hosts_layer_key: tuple[object, ...] = ()  # the layout (by identity), palette, ratio and size drawn
        self._hosts_shown: list[tuple[str, int]] = []  # each host's label and state in the layer
        self.hosts_layer_draws = self.hosts_layer_renders = 0  # paints of the layer, and whole renders of it
        self._raster: Raster | None = None  # the cells' pixels, for the layout and pixel ratio of
        self._raster_key: tuple[object, ...] = ()
        self._image: QImage | None = None  # wraps self._raster.pixels (no copy): kept as long as they are
        self._size = (0, 0)
        self._read_palette()

    def _read_palette(self) -> None:
        """The palette's colours a paint uses, read once (not per paint) and again when it changes."""
        palette = self.palette()
        self._base = palette.color(QPalette.ColorRole.Base)
        self._text = palette.color(QPalette.ColorRole.Text)
        self._outline = premultiplied(palette.color(QPalette.ColorRole.Mid).rgba())
        highlight = premultiplied(palette.color(QPalette.ColorRole.Highlight).rgba())
        self._lut = colour_lut(self._scale, self._outline, highlight)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.StyleChange):
            self._read_palette()
            self.update()

    # ------------------------------------------------------------------ inputs

    @property
    def selected(self) -> np.ndarray:
        """Which cells are selected (bool per cell). Replace it, don't change it in place."""
        return self._selected

    @selected.setter
    def selected(self, chosen: np.ndarray) -> None:
        self._selected = chosen
        self._offsets = selection_offsets(chosen, len(self.colors))

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

    def set_scale(self, colors: Sequence[QColor]) -> bool:
        """Another colour scale (the metric changed); False when it is the one shown."""
        if [c.rgba() for c in colors] == [c.rgba() for c in self.colors]:
            return False
        self.colors = list(colors)
        self._scale = np.array([premultiplied(colour.rgba()) for colour in self.colors], dtype=np.uint32)
        self._read_palette()
        self.selected = self._selected  # the offsets depend on how many colours there are
        self.update()
        return True

    def set_colors(self, bins: np.ndarray, host_state: np.ndarray, host_labels: list[str]) -> bool:
        """New colour bins and host states; False when they are what the canvas already shows."""
        same = (
            np.array_equal(bins, self.bins)
            and np.array_equal(host_state, self.host_state)
            and host_labels == self.host_labels
        )
        self.bins = bins
        self.host_state = host_state
        self.host_labels = host_labels
        return not same

    def _relayout(self) -> None:
        metrics = self.fontMetrics()
        label = metrics.height() + 1
        self.layout_ = compute_layout(
            self.groups, self.cells, max(self.width(), 200), max(self._viewport_height, 100), label, label + 6
        )
        self.setMinimumHeight(self.layout_.height)
        self.update()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._size = (event.size().width(), event.size().height())
        if event.size().width() != event.oldSize().width():
            self._relayout()

    def sizeHint(self) -> QSize:
        return QSize(800, self.layout_.height if self.layout_ else 400)

    # ------------------------------------------------------------------ painting

    def paintEvent(self, event: QPaintEvent) -> None:
        """The background, the cells' image, the host names and titles: a handful of Qt calls."""
        self.paints += 1
        layout = self.layout_
        painter = QPainter(self)
        painter.fillRect(0, 0, self._size[0], self._size[1], self._base)
        if layout is None or not self.cells:
            painter.setPen(self._text)
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "No hosts yet: add one in Hosts")
            painter.end()
            return
        ratio = self.devicePixelRatioF()
        raster, image = self._cells_image(layout, ratio)
        if image is not None:
            raster.paint(self.bins, self._offsets, self._lut)
            painter.drawImage(raster.left, raster.top, image)
        self._paint_hosts(painter, layout, ratio)
        painter.end()

    def _cells_image(self, layout: Layout, ratio: float) -> tuple[Raster, QImage | None]:
        """The raster of this layout at this pixel ratio and the QImage over its pixels (None: no cell)."""
        key = (layout, ratio)
        if self._raster is None or self._raster_key != key:
            self._raster = rasterize(layout.cell_rects, layout.cell_size, ratio)
            self._raster_key = key
            self._image = None
            if self._raster.width and self._raster.height:
                pixels = self._raster.pixels
                self._image = QImage(
                    pixels.data,
                    pixels.shape[1],
                    pixels.shape[0],
                    pixels.strides[0],
                    QImage.Format.Format_ARGB32_Premultiplied,
                )
                self._image.setDevicePixelRatio(ratio)
        return self._raster, self._image

    def _paint_hosts(self, painter: QPainter, layout: Layout, ratio: float) -> None:
        """Group titles; each block's host name above its cells; stale / disconnected blocks hatched and
        labelled.

        Drawn into a pixmap kept while the layout, the palette, the pixel ratio and the size stay: 278
        `drawText` calls cost more than all the cells, and labels rarely change between refreshes. When
        only some hosts' labels or states changed (a host going stale, coming back), only their blocks are
        cleared and drawn again; more than HOSTS_LAYER_REDRAW_SHARE of them redraw the whole layer."""
        base = (layout, self._text.rgba(), ratio, self._size)
        shown = list(zip(self.host_labels, self.host_state.tolist(), strict=False))
        if self._hosts_layer is None or self._hosts_layer_key != base or len(shown) != len(self._hosts_shown):
            self._hosts_layer = self._render_hosts_layer(layout, self._text, ratio)
        else:
            changed = {h for h, (now, before) in enumerate(zip(shown, self._hosts_shown, strict=True)) if now != before}
            if len(changed) > HOSTS_LAYER_REDRAW_SHARE * max(1, len(shown)):
                self._hosts_layer = self._render_hosts_layer(layout, self._text, ratio)
            elif changed:
                self._redraw_blocks(self._hosts_layer, layout, self._text, changed)
        self._hosts_layer_key = base
        self._hosts_shown = shown
        self.hosts_layer_draws += 1
        painter.drawPixmap(0, 0, self._hosts_layer)

    def _render_hosts_layer(self, layout: Layout, text: QColor, ratio: float) -> QPixmap:
        pixmap = QPixmap(int(self.width() * ratio) + 1, int(max(self.height(), layout.height) * ratio) + 1)
        pixmap.setDevicePixelRatio(ratio)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        bold = self.font()
        bold.setBold(True)
        painter.setPen(text)
        painter.setFont(bold)
        for x, y, title in layout.titles:
            painter.drawText(x, y + painter.fontMetrics().ascent() + 2, title)
        self._draw_blocks(painter, layout, text, range(layout.block_hosts.shape[0]))
        painter.end()
        self.hosts_layer_renders += 1
        return pixmap

    def _redraw_blocks(self, pixmap: QPixmap, layout: Layout, text: QColor, hosts: set[int]) -> None:
        """Clear and draw again the blocks of `hosts` only (their label and frame stay inside the block's
        rectangle widened by BLOCK_GAP_X - 1 to the right and by a pixel above and below)."""
        blocks = [b for b, host in enumerate(layout.block_hosts.tolist()) if host in hosts]
        painter = QPainter(pixmap)
        painter.setCompositionMode(QPainter.CompositionMode.CompositionMode_Clear)
        for b in blocks:
            x, y, width, height = layout.block_rects[b].tolist()
            painter.fillRect(x - 1, y - 1, width + BLOCK_GAP_X, height + 2, Qt.GlobalColor.transparent)
        painter.setCompositionMode(QPainter.CompositionMode.CompositionMode_SourceOver)
        self._draw_blocks(painter, layout, text, blocks)
        painter.end()

    def _draw_blocks(self, painter: QPainter, layout: Layout, text: QColor, blocks: Iterable[int]) -> None:
        painter.setFont(self.font())
        metrics = painter.fontMetrics()
        hatch = QBrush(text, Qt.BrushStyle.BDiagPattern)
        warn = QColor(STALE_COLOR)
        badge_font = self.font()
        badge_font.setBold(True)
        rects, block_hosts = layout.block_rects, layout.block_hosts
        for b in blocks:
            x, y, width, height = rects[b].tolist()
            host = int(block_hosts[b])
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
                area = QRect(*(int(v) for v in self.layout_.cell_rects[cell])) if self.layout_ is not None else QRect()
                QToolTip.showText(event.globalPosition().toPoint(), self.describe(cell), self, area)

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
