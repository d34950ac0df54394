"""The fleet grid's pixels (`raster`): every pixel of a cell shows that cell, the colour of its bin, a
dotted outline when it has no data, a frame when it is selected; between the cells nothing is drawn."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck.ui.views.fleet.layout import Block, Group, compute_layout
from meshdeck.ui.views.fleet.raster import (
    SELECTION_WIDTH,
    TRANSPARENT,
    colour_lut,
    rasterize,
    selection_offsets,
)

SCALE = (0xFF000000 | np.arange(1, 65, dtype=np.uint32) * 0x010203).astype(np.uint32)
OUTLINE, HIGHLIGHT = 0xFF808080, 0xFF3070C0


@st.composite
def fleets(draw: st.DrawFn) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """(cell rects, cell size, colour bins (-1: no data), selected) of a random fleet laid out."""
    gpus = draw(st.lists(st.integers(1, 8), min_size=1, max_size=40))
    first = np.concatenate(([0], np.cumsum(gpus)))
    blocks = tuple(Block(h, tuple(range(int(first[h]), int(first[h + 1])))) for h in range(len(gpus)))
    cells = int(first[-1])
    layout = compute_layout(
        (Group("", blocks),), cells, draw(st.integers(200, 900)), draw(st.integers(100, 700)), 12, 18
    )
    bins = np.asarray(draw(st.lists(st.integers(-1, 63), min_size=cells, max_size=cells)), dtype=np.intp)
    selected = np.asarray(draw(st.lists(st.booleans(), min_size=cells, max_size=cells)), dtype=bool)
    return layout.cell_rects, layout.cell_size, bins, selected


@settings(deadline=None, max_examples=200)
@given(fleets())
def test_every_pixel_of_a_cell_shows_its_bin_its_outline_or_its_frame(fleet) -> None:
    rects, size, bins, selected = fleet
    raster = rasterize(rects, size)
    raster.paint(bins, selection_offsets(selected, len(SCALE)), colour_lut(SCALE, OUTLINE, HIGHLIGHT))
    covered = np.zeros(raster.pixels.shape, dtype=bool)
    edge = np.minimum(np.arange(size), np.arange(size)[::-1])
    depth = np.minimum(edge[:, None], edge[None, :])  # each pixel's distance to its cell's edge
    for cell, (x, y, w, h) in enumerate(rects.tolist()):
        assert (w, h) == (size, size)
        rows, columns = slice(y - raster.top, y - raster.top + h), slice(x - raster.left, x - raster.left + w)
        pixels, codes = raster.pixels[rows, columns], raster.codes[rows, columns]
        covered[rows, columns] = True
        assert ((codes - 1) % raster.cells == cell).all()  # every pixel of the square is this cell's
        inside, rim = pixels[depth >= SELECTION_WIDTH], pixels[depth < SELECTION_WIDTH]
        colour = SCALE[bins[cell]] if bins[cell] >= 0 else TRANSPARENT
        assert (inside == colour).all()
        if selected[cell]:
            assert (rim == HIGHLIGHT).all()
        elif bins[cell] >= 0:
            assert (rim == colour).all()
        else:  # no data: a dotted outline on its outermost pixels, never a colour of the scale
            outermost = pixels[depth == 0]
            assert set(np.unique(outermost).tolist()) == {OUTLINE, TRANSPARENT}
            assert (pixels[depth > 0] == TRANSPARENT).all()
    assert (raster.pixels[~covered] == TRANSPARENT).all() and (raster.codes[~covered] == 0).all()


@settings(deadline=None, max_examples=50)
@given(fleets(), st.sampled_from([1.25, 1.5, 2.0, 3.0]))
def test_on_a_high_density_screen_each_device_pixel_shows_the_logical_pixel_it_lies_in(fleet, ratio) -> None:
    rects, size, _bins, _selected = fleet
    logical, device = rasterize(rects, size), rasterize(rects, size, ratio)
    assert (device.left, device.top) == (logical.left, logical.top)
    assert device.codes.shape == (int(np.ceil(logical.height * ratio)), int(np.ceil(logical.width * ratio)))
    rows = np.minimum((np.arange(device.height) / ratio).astype(int), logical.height - 1)
    columns = np.minimum((np.arange(device.width) / ratio).astype(int), logical.width - 1)
    assert (device.codes == logical.codes[rows[:, None], columns[None, :]]).all()


def test_a_fleet_without_a_placed_cell_has_no_pixels() -> None:
    raster = rasterize(np.full((3, 4), -1, dtype=np.int32), 10)
    assert raster.pixels.size == 0 and raster.cells == 3
