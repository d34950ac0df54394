"""The fleet grid as pixels: what each pixel of the cells' area shows, worked out once per layout, so that
a refresh colours every cell with one numpy lookup and the canvas draws them with one `drawImage`.

Why not one Qt call per colour: PySide releases the GIL around every Qt call, and in the console's
process (a supervisor thread per host: ~280 busy threads at 278 hosts) each re-take of the GIL costs
milliseconds, so a paint of a few dozen Qt calls took 100-200 ms there. numpy needs a handful.

Each pixel gets a code, an index into the colour table that `colour_table` builds per refresh:

- 0: between the cells (transparent: the widget's background shows);
- 1 + c: inside cell c, deeper than `SELECTION_WIDTH` from its edge: the cell's colour (none without data);
- 1 + n + c: within `SELECTION_WIDTH` of cell c's edge: the selection frame when c is selected;
- 1 + 2n + c: a dot of cell c's dotted outline (its outermost pixels, one in `DOT_PERIOD`): what a cell
  without data shows (an outline, never a colour of the scale), the frame when selected.

Pure numpy (no Qt): the canvas wraps `pixels` in a QImage (ARGB32, premultiplied) that it reuses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SELECTION_WIDTH = 2  # logical pixels of a selected cell's frame
DOT_PERIOD = 3  # the no-data outline: one pixel on, two off (Qt's DotLine)
TRANSPARENT = 0
DEEP, FRAME, DOT = 0, 1, 2  # the three kinds of a cell's pixels, in code order


@dataclass(frozen=True, eq=False)  # one per layout and pixel ratio, compared by identity
class Raster:
    left: int  # where the image goes, in the widget's logical pixels
    top: int
    cells: int
    codes: np.ndarray  # (height, width) intp, in device pixels: each pixel's index into the colour table
    pixels: np.ndarray  # (height, width) uint32 ARGB32 premultiplied, rewritten by `paint`

    @property
    def width(self) -> int:
        return int(self.codes.shape[1])

    @property
    def height(self) -> int:
        return int(self.codes.shape[0])

    def paint(self, table: np.ndarray) -> None:
        """Every pixel's colour from `table` (one entry per code), into `pixels` in place."""
        np.take(table, self.codes, out=self.pixels, mode="clip")


def _cell_kinds(size: int) -> np.ndarray:
    """(size, size) DEEP / FRAME / DOT of each pixel of one cell."""
    inward = np.arange(size)
    depth = np.minimum(inward, inward[::-1])  # distance to the nearest edge along one axis
    edge_distance = np.minimum(depth[:, None], depth[None, :])
    kinds = np.where(edge_distance < SELECTION_WIDTH, FRAME, DEEP)
    dotted = (edge_distance == 0) & ((inward[:, None] + inward[None, :]) % DOT_PERIOD == 0)
    return np.where(dotted, DOT, kinds).astype(np.intp)


def rasterize(cell_rects: np.ndarray, cell_size: int, ratio: float = 1.0) -> Raster:
    """The codes of the pixels around the placed cells of `cell_rects` ((cells, 4): x, y, w, h; w < 1 for
    a cell in no block, all placed ones `cell_size` square), at `ratio` device pixels per logical one."""
    cells = int(cell_rects.shape[0])
    placed = np.flatnonzero(cell_rects[:, 2] > 0)
    if not placed.size or cell_size < 1:
        empty = np.zeros((0, 0), dtype=np.intp)
        return Raster(0, 0, cells, empty, np.zeros((0, 0), dtype=np.uint32))
    xs, ys = cell_rects[placed, 0].astype(np.intp), cell_rects[placed, 1].astype(np.intp)
    left, top = int(xs.min()), int(ys.min())
    width, height = int(xs.max()) + cell_size - left, int(ys.max()) + cell_size - top
    logical = np.zeros((height, width), dtype=np.intp)
    inward = np.arange(cell_size)
    rows = (ys - top)[:, None, None] + inward[None, :, None]
    columns = (xs - left)[:, None, None] + inward[None, None, :]
    logical[rows, columns] = 1 + _cell_kinds(cell_size)[None, :, :] * cells + placed[:, None, None]
    if ratio == 1.0:
        codes = logical
    else:  # each device pixel shows the logical pixel it lies in: edges stay sharp
        device_rows = np.minimum((np.arange(math.ceil(height * ratio)) / ratio).astype(np.intp), height - 1)
        device_columns = np.minimum((np.arange(math.ceil(width * ratio)) / ratio).astype(np.intp), width - 1)
        codes = logical[device_rows[:, None], device_columns[None, :]]
    return Raster(left, top, cells, codes, np.zeros(codes.shape, dtype=np.uint32))


def premultiplied(argb: int) -> int:
    """A QColor.rgba() value (0xAARRGGBB) with its colour channels multiplied by its alpha."""
    alpha = (argb >> 24) & 0xFF
    if alpha == 0xFF:
        return argb
    channels = [((argb >> shift) & 0xFF) * alpha // 0xFF for shift in (16, 8, 0)]
    return (alpha << 24) | (channels[0] << 16) | (channels[1] << 8) | channels[2]


def colour_table(bins: np.ndarray, selected: np.ndarray, scale: np.ndarray, outline: int, highlight: int) -> np.ndarray:
    """The colour of each code for this refresh (uint32 ARGB32 premultiplied): `scale[bin]` inside a cell
    with data (bin >= 0), nothing inside one without, `outline` on the dots of a cell without data,
    `highlight` on the frame of a selected one."""
    has_data = bins >= 0
    coloured = np.take(scale, bins, mode="clip")
    fill = np.where(has_data, coloured, np.uint32(TRANSPARENT)).astype(np.uint32)
    frame = np.where(selected, np.uint32(highlight), fill)
    dots = np.where(selected, np.uint32(highlight), np.where(has_data, coloured, np.uint32(outline)))
    return np.concatenate((np.array([TRANSPARENT], dtype=np.uint32), fill, frame, dots)).astype(np.uint32)
