"""The fleet view's layout search measures block shapes once per block width (layout._Shapes): it must
place every cell exactly where the plain rule does, which this test states block by block."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck.ui.views.fleet import layout as fleet_layout
from meshdeck.ui.views.fleet.layout import Block, Group, compute_layout


def _plain_measure(groups, width, cell, label, title, widest):  # type: ignore[no-untyped-def]
    """The rule, one block at a time: blocks per line from the widest block, a line as tall as its tallest."""

    def shape(cells: int) -> tuple[int, int]:
        columns = max(1, min(widest, cells))
        return columns, max(1, math.ceil(cells / columns))

    columns = max((shape(len(b.cells))[0] for g in groups for b in g.blocks), default=1)
    per_line = max(1, (width - 2 * fleet_layout.MARGIN + fleet_layout.BLOCK_GAP_X) // (
        columns * (cell + fleet_layout.GAP) + fleet_layout.BLOCK_GAP_X))  # fmt: skip
    height = fleet_layout.MARGIN
    for group in groups:
        height += title if group.title else 0
        for start in range(0, len(group.blocks), per_line):
            tallest = max(shape(len(b.cells))[1] for b in group.blocks[start : start + per_line])
            height += label + tallest * (cell + fleet_layout.GAP) + fleet_layout.BLOCK_GAP_Y
    return per_line, height + fleet_layout.MARGIN


def _groups(sizes: list[list[int]], titled: bool) -> tuple[tuple[Group, ...], int]:
    groups, cell = [], 0
    for g, blocks in enumerate(sizes):
        made = []
        for h, count in enumerate(blocks):
            made.append(Block(h, tuple(range(cell, cell + count))))
            cell += count
        groups.append(Group(f"group {g}" if titled or len(sizes) > 1 else "", tuple(made)))
    return tuple(groups), cell


@settings(deadline=None, max_examples=150)
@given(
    sizes=st.lists(st.lists(st.integers(1, 16), max_size=40), min_size=1, max_size=4),
    width=st.integers(150, 2400),
    height=st.integers(80, 1600),
    titled=st.booleans(),
)
def test_the_measured_search_places_every_cell_where_the_plain_rule_does(sizes, width, height, titled):
    groups, cells = _groups(sizes, titled)
    for widest in fleet_layout.BLOCK_COLUMNS:
        shapes = fleet_layout._Shapes(groups, widest)
        for cell in (fleet_layout.MIN_CELL, 12, fleet_layout.MAX_CELL):
            assert shapes.measure(width, cell, 15, 21) == _plain_measure(groups, width, cell, 15, 21, widest)
    layout = compute_layout(groups, cells, width, height, 15, 21)
    rects = layout.cell_rects
    assert rects.shape == (cells, 4) and (rects[:, 2] == layout.cell_size).all()
    assert len({tuple(r) for r in rects[:, :2].tolist()}) == cells  # no two cells in one place
    # each block's cells fill its lines left to right from the block's corner, under its label
    step = layout.cell_size + fleet_layout.GAP
    blocks = [b for g in groups for b in g.blocks]
    for block, (x, y, w, h) in zip(blocks, layout.block_rects.tolist(), strict=True):
        columns = (w + fleet_layout.GAP) // step
        for j, cell in enumerate(block.cells):
            assert rects[cell, :2].tolist() == [x + (j % columns) * step, y + 15 + (j // columns) * step]
        assert h == 15 + math.ceil(len(block.cells) / columns) * step


def test_278_hosts_of_8_gpus_fit_a_window_with_the_cells_the_plain_rule_chooses():
    groups, cells = _groups([[8] * 278], titled=False)
    layout = compute_layout(groups, cells, 1480, 860, 15, 21)
    best = max(
        (cell, widest)
        for widest in fleet_layout.BLOCK_COLUMNS
        for cell in [
            next(
                (c for c in range(fleet_layout.MAX_CELL, fleet_layout.MIN_CELL, -1)
                 if _plain_measure(groups, 1480, c, 15, 21, widest)[1] <= 860),
                fleet_layout.MIN_CELL,
            )
        ]
    )  # fmt: skip
    assert layout.cell_size == best[0]
    assert np.unique(layout.cell_rects[:, :2], axis=0).shape[0] == cells
