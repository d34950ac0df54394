"""The fleet grid as pixels: what each pixel of the cells' area shows, worked out once per layout, so that
a refresh colours every cell with one numpy lookup and the canvas draws them with one `drawImage`.

Why not one Qt call per colour: PySide releases the GIL around every Qt call, and in the console's
process at 278 hosts (measured when a supervisor thread per host decoded samples: ~280 busy threads) each
re-take of the GIL cost milliseconds, so a paint of a few dozen Qt calls took 100-200 ms. numpy needs a handful.

Each pixel gets a code, an index into the colour table that `Raster.paint` fills per refresh:

- 0: between the cells (transparent: the widget's background shows);
- 1 + c: inside cell c, deeper than `SELECTION_WIDTH` from its edge: the cell's colour (none without data);
- 1 + n + c: within `SELECTION_WIDTH` of cell c's edge: the selection frame when c is selected;
- 1 + 2n + c: a dot of cell c's dotted outline (its outermost pixels, one in `DOT_PERIOD`): what a cell
  without data shows (an outline, never a colour of the scale), the frame when selected.

The table comes from a small lookup (`colour_lut`: the colour of each kind of pixel for each cell state:
its bin or no data, selected or not) in one gather, and the pixels from the table in another: numpy
releases the GIL in each call on more than a few hundred values, so a refresh makes as few as it can.

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
    table: np.ndarray  # (1 + 3 * cells) uint32: the colour of each code, rewritten by `paint`

    @property
    def width(self) -> int:
        return int(self.codes.shape[1])

    @property
    def height(self) -> int:
        return int(self.codes.shape[0])

    def paint(self, bins: np.ndarray, offsets: np.ndarray, lut: np.ndarray) -> None:
        """Every pixel's colour, into `pixels` in place: cell c in state `bins[c] + offsets[c]` (see
        `selection_offsets`) takes `lut[kind, state]` (see `colour_lut`) on its pixels of each kind."""
        self.table[0] = TRANSPARENT
        np.take(lut, bins + offsets, axis=1, out=self.table[1:].reshape(3, self.cells), mode="clip")
        np.take(self.table, self.codes, out=self.pixels, mode="clip")


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
        return Raster(0, 0, cells, empty, np.zeros((0, 0), dtype=np.uint32), np.zeros(1 + 3 * cells, np.uint32))
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
    return Raster(left, top, cells, codes, np.zeros(codes.shape, dtype=np.uint32), np.zeros(1 + 3 * cells, np.uint32))


def premultiplied(argb: int) -> int:
    """A QColor.rgba() value (0xAARRGGBB) with its colour channels multiplied by its alpha."""
    alpha = (argb >> 24) & 0xFF
    if alpha == 0xFF:
        return argb
    channels = [((argb >> shift) & 0xFF) * alpha // 0xFF for shift in (16, 8, 0)]
    return (alpha << 24) | (channels[0] << 16) | (channels[1] << 8) | channels[2]


def colour_lut(scale: np.ndarray, outline: int, highlight: int) -> np.ndarray:
    """(3, 2 * (len(scale) + 1)) uint32: the colour of a DEEP, FRAME and DOT pixel of a cell in each state.
    State 0 is no data, 1 + b colour bin b; the same again, `len(scale) + 1` further on, when selected.
    Inside a cell with data its bin's colour; inside one without, nothing (the background); on the dots of
    one without, `outline` (never a colour of the scale); on the frame of a selected one, `highlight`."""
    fill = np.concatenate(([TRANSPARENT], scale))
    dots = np.concatenate(([outline], scale))
    frame = np.full(fill.shape[0], highlight)
    return np.stack(
        (np.concatenate((fill, fill)), np.concatenate((fill, frame)), np.concatenate((dots, frame)))
    ).astype(np.uint32)


def selection_offsets(selected: np.ndarray, bins: int) -> np.ndarray:
    """What to add to each cell's colour bin (-1: no data) for its state in `colour_lut` of `bins` colours:
    made when the selection changes, not per refresh."""
    return (1 + (bins + 1) * selected.astype(np.intp)).astype(np.intp)
