"""Min–max bands under a chart's curves: the spread of a group of series around its median.

One filled polygon per band and finite run (a gap in the data is a gap in the band), translucent in
the band's colour, painted in one `drawPath` each. A fleet chart has a band per group (a deployment,
or all hosts): a dozen paths, however many GPUs they cover.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath


@dataclass(frozen=True)
class Band:
    """x (n,), low and high (n,) in axis units, and the colour of the group."""

    x: np.ndarray
    low: np.ndarray
    high: np.ndarray
    color: str


def _finite_runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) of each run of True in `mask`."""
    edges = np.flatnonzero(np.diff(np.concatenate([[False], mask, [False]]).astype(np.int8)))
    return [(int(a), int(b)) for a, b in zip(edges[0::2], edges[1::2], strict=True)]


class BandItem(pg.GraphicsObject):
    """Draws `Band`s as filled areas."""

    def __init__(self) -> None:
        super().__init__()
        self._paths: list[tuple[QColor, QPainterPath]] = []
        self._bands: list[Band] = []
        self._rect = QRectF()

    @property
    def bands(self) -> list[Band]:
        return list(self._bands)

    def set_bands(self, bands: Sequence[Band]) -> None:
        self.prepareGeometryChange()
        self._bands = list(bands)
        self._paths = []
        rect = QRectF()
        for band in bands:
            colour = QColor(band.color)
            colour.setAlpha(60)
            path = QPainterPath()
            path.setFillRule(Qt.FillRule.WindingFill)  # a band that narrows to a line has no holes
            finite = np.isfinite(band.low) & np.isfinite(band.high)
            for start, stop in _finite_runs(finite):
                x = band.x[start:stop].astype(np.float64)
                outline = np.concatenate(
                    [
                        np.column_stack([x, band.high[start:stop]]),
                        np.column_stack([x[::-1], band.low[start:stop][::-1]]),
                    ]
                )
                polygon = pg.functions.create_qpolygonf(outline.shape[0])
                pg.functions.ndarray_from_qpolygonf(polygon)[:] = outline
                path.addPolygon(polygon)
                path.closeSubpath()
            if not path.isEmpty():
                self._paths.append((colour, path))
                rect = rect.united(path.boundingRect())
        self._rect = rect
        self.informViewBoundsChanged()
        self.update()

    def y_bounds(self, x_low: float, x_high: float) -> tuple[float, float] | None:
        """Finite (lowest, highest) of the bands over [x_low, x_high]."""
        lows, highs = [], []
        for band in self._bands:
            inside = (band.x >= x_low) & (band.x <= x_high)
            low, high = band.low[inside], band.high[inside]
            low, high = low[np.isfinite(low)], high[np.isfinite(high)]
            if low.size and high.size:
                lows.append(float(low.min()))
                highs.append(float(high.max()))
        return (min(lows), max(highs)) if lows else None

    def boundingRect(self) -> QRectF:
        return QRectF(self._rect)

    def dataBounds(self, ax: int, frac: float = 1.0, orthoRange: Sequence[float] | None = None) -> None:
        return None  # the chart sets its ranges itself (TimeChart._fit_y reads y_bounds)

    def paint(self, painter: QPainter, option: object, widget: object = None) -> None:
        painter.setPen(Qt.PenStyle.NoPen)
        for colour, path in self._paths:
            painter.setBrush(colour)
            painter.drawPath(path)
