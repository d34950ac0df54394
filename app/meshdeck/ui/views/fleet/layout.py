"""Where every fleet cell goes: groups (a deployment, or all hosts) of host blocks, one square per GPU.

Pure geometry, computed when the hosts, the grouping or the widget's size change, never per refresh:
the canvas then only picks colours. The cell size is the largest (up to `MAX_CELL`) at which every
block fits the space given; below `MIN_CELL` the canvas grows taller and scrolls instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAX_CELL = 26
MIN_CELL = 7
GAP = 1  # between the cells of a host
BLOCK_GAP_X = 8  # between host blocks
BLOCK_GAP_Y = 6
MARGIN = 6
BLOCK_COLUMNS = (8, 4)  # GPUs per line of a block: 8 in a row, or 4 × 2 when that gives bigger cells


@dataclass(frozen=True)
class Block:
    """One host's cells in one group (a host split between deployments has a block in each)."""

    host: int  # index into FleetTable.hosts
    cells: tuple[int, ...]


@dataclass(frozen=True)
class Group:
    title: str  # "" when there is one group of every host
    blocks: tuple[Block, ...]


@dataclass(frozen=True, eq=False)  # compared by identity: one per relayout
class Layout:
    cell_size: int
    height: int
    cell_rects: np.ndarray  # (cells, 4): x, y, w, h; cells in no block stay at -1
    block_rects: np.ndarray  # (blocks, 4) around the cells and their label
    block_hosts: np.ndarray  # host index of each block
    label_height: int
    titles: tuple[tuple[int, int, str], ...]  # (x, y, text) of each group title


def _block_shape(cells: int, widest: int) -> tuple[int, int]:
    columns = max(1, min(widest, cells))
    return columns, max(1, math.ceil(cells / columns))


class _Shapes:
    """The blocks' shapes when at most `widest` cells wide, and the height each count of blocks per line
    gives: what the search over cell sizes measures again and again, so it is computed once per `widest`
    (the cell size only scales it). At 278 hosts the search measured ~17,000 block shapes one by one."""

    def __init__(self, groups: tuple[Group, ...], widest: int) -> None:
        self.groups = groups
        self.rows: list[np.ndarray] = []
        columns = 1
        for group in groups:
            counts = np.fromiter((len(b.cells) for b in group.blocks), np.int64, len(group.blocks))
            group_columns = np.clip(counts, 1, widest)
            self.rows.append(np.maximum(1, -(-counts // group_columns)))
            if counts.size:
                columns = max(columns, int(group_columns.max()))
        self.columns = columns  # the widest block's cells per line
        self.titled = sum(1 for group in groups if group.title)
        self._lines: dict[int, tuple[int, int]] = {}

    def lines(self, per_line: int) -> tuple[int, int]:
        """(lines of blocks, the sum of each line's tallest block in cells) at `per_line` blocks per line."""
        if per_line not in self._lines:
            lines = tallest = 0
            for rows in self.rows:
                if rows.size:
                    starts = np.arange(0, rows.size, per_line)
                    lines += starts.size
                    tallest += int(np.maximum.reduceat(rows, starts).sum())
            self._lines[per_line] = (lines, tallest)
        return self._lines[per_line]

    def measure(self, width: int, cell: int, label: int, title: int) -> tuple[int, int]:
        """(blocks per line, total height) at cell size `cell`."""
        block_width = self.columns * (cell + GAP) + BLOCK_GAP_X
        per_line = max(1, (width - 2 * MARGIN + BLOCK_GAP_X) // block_width)
        lines, tallest = self.lines(per_line)
        height = MARGIN + self.titled * title + lines * (label + BLOCK_GAP_Y) + tallest * (cell + GAP)
        return per_line, height + MARGIN


def compute_layout(
    groups: tuple[Group, ...], cells: int, width: int, height: int, label_height: int, title_height: int
) -> Layout:
    """Place every block of `groups` in `width` x `height` pixels (taller when they cannot fit), with
    blocks as wide as give the biggest cells."""
    best: tuple[int, int] = (0, BLOCK_COLUMNS[0])
    shapes_of: dict[int, _Shapes] = {}
    for widest in BLOCK_COLUMNS:
        shapes = shapes_of[widest] = _Shapes(groups, widest)
        cell = MAX_CELL
        while cell > MIN_CELL and shapes.measure(width, cell, label_height, title_height)[1] > height:
            cell -= 1
        best = max(best, (cell, widest))
    cell, widest = best
    shapes = shapes_of[widest]
    per_line, total = shapes.measure(width, cell, label_height, title_height)
    block_width = shapes.columns * (cell + GAP) + BLOCK_GAP_X
    block_rects: list[tuple[int, int, int, int]] = []
    block_hosts: list[int] = []
    titles: list[tuple[int, int, str]] = []
    # each placed cell: its index, its place in its block, and its block's corner and cells per line
    placed: list[int] = []
    place: list[int] = []
    corner_x: list[int] = []
    corner_y: list[int] = []
    per_row: list[int] = []
    y = MARGIN
    for group in groups:
        if group.title:
            titles.append((MARGIN, y, group.title))
            y += title_height
        for start in range(0, len(group.blocks), per_line):
            line = group.blocks[start : start + per_line]
            tallest = max(_block_shape(len(b.cells), widest)[1] for b in line)
            for k, block in enumerate(line):
                x0 = MARGIN + k * block_width
                shape_columns, shape_rows = _block_shape(len(block.cells), widest)
                count = len(block.cells)
                placed.extend(block.cells)
                place.extend(range(count))
                corner_x.extend([x0] * count)
                corner_y.extend([y + label_height] * count)
                per_row.extend([shape_columns] * count)
                block_rects.append(
                    (x0, y, shape_columns * (cell + GAP) - GAP, label_height + shape_rows * (cell + GAP))
                )
                block_hosts.append(block.host)
            y += label_height + tallest * (cell + GAP) + BLOCK_GAP_Y
    rects = np.full((cells, 4), -1, dtype=np.int32)
    if placed:
        j, columns = np.asarray(place), np.asarray(per_row)
        at = np.asarray(placed, dtype=np.intp)
        rects[at, 0] = np.asarray(corner_x) + (j % columns) * (cell + GAP)
        rects[at, 1] = np.asarray(corner_y) + (j // columns) * (cell + GAP)
        rects[at, 2:] = cell
    return Layout(
        cell,
        max(total, y + MARGIN),
        rects,
        np.asarray(block_rects, dtype=np.int32).reshape(-1, 4),
        np.asarray(block_hosts, dtype=np.intp),
        label_height,
        tuple(titles),
    )


def cell_at(layout: Layout, x: float, y: float) -> int | None:
    """The cell under (x, y), if any."""
    r = layout.cell_rects
    hit = np.flatnonzero((r[:, 0] <= x) & (x < r[:, 0] + r[:, 2]) & (r[:, 1] <= y) & (y < r[:, 1] + r[:, 3]))
    return int(hit[0]) if hit.size else None


def cells_in(layout: Layout, x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    """Indices of the cells a rectangle (any corner order) touches."""
    left, right = min(x0, x1), max(x0, x1)
    top, bottom = min(y0, y1), max(y0, y1)
    r = layout.cell_rects
    placed = r[:, 2] > 0
    return np.flatnonzero(
        placed & (r[:, 0] <= right) & (r[:, 0] + r[:, 2] >= left) & (r[:, 1] <= bottom) & (r[:, 1] + r[:, 3] >= top)
    )
