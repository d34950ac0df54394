"""Inserting many rows with a few statements, not a statement step per row.

`executemany` steps its statement once per row, and CPython's sqlite3 module releases and re-takes the GIL
around every step. In the console at fleet size (278 hosts: ~41,000 raw rows a second, plus 80,000
per-link minute sums rewritten at each commit) the writer thread then queued for the GIL once per row
behind the fleet's ~280 other threads. Every re-take costs wall time there, not CPU: measured on the
2-core development machine with three busy Python threads beside the writer, 1.36 million rows (one
30-second commit of a 278-host fleet) took 54 s in 500-row statements and 6.1 s in 10,000-row ones
(0.4-0.65 s either way with nothing else running). So a statement binds as many rows as SQLite takes
variables (32,766 since SQLite 3.32; 999 before) and runs them in one step with the GIL released.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

MAX_CHUNK_ROWS = 10_000
_statements: dict[tuple[str, int, int, str], str] = {}


def _statement(head: str, width: int, rows: int, tail: str = "") -> str:
    key = (head, width, rows, tail)
    sql = _statements.get(key)
    if sql is None:
        one = "(" + ",".join("?" * width) + ")"
        sql = f"{head} VALUES {','.join([one] * rows)}{tail}"
        if len(_statements) < 256:
            _statements[key] = sql
    return sql


def chunk_rows(connection: sqlite3.Connection, width: int) -> int:
    """Rows per statement: MAX_CHUNK_ROWS, or fewer where this SQLite binds fewer variables (999 before 3.32)."""
    limit = connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    return max(1, min(MAX_CHUNK_ROWS, limit // width))


def insert_flat(connection: sqlite3.Connection, head: str, width: int, flat: Sequence[Any], tail: str = "") -> None:
    """Insert the rows laid out one after another in `flat` (`width` values each), in that order.

    `head` is the statement up to VALUES, e.g. "INSERT OR IGNORE INTO samples (series_id, ts, value)";
    `tail` what follows the rows (an ON CONFLICT clause).
    Statements run in order: a row conflicting with an earlier one resolves exactly as under executemany
    (and `connection.total_changes` counts the same)."""
    if len(flat) % width:
        raise ValueError(f"{len(flat)} values are not whole rows of {width}")
    rows = len(flat) // width
    step = chunk_rows(connection, width)
    full = rows - rows % step
    if full:
        sql = _statement(head, width, step, tail)
        span = step * width
        for start in range(0, full * width, span):
            connection.execute(sql, flat[start : start + span])
    if rows > full:
        connection.execute(_statement(head, width, rows - full, tail), flat[full * width :])


def insert_rows(
    connection: sqlite3.Connection, head: str, width: int, rows: Sequence[Sequence[Any]], tail: str = ""
) -> None:
    """`insert_flat` for rows given as tuples."""
    flat: list[Any] = [value for row in rows for value in row]
    insert_flat(connection, head, width, flat, tail)


def insert_columns(connection: sqlite3.Connection, head: str, columns: Sequence[Any], tail: str = "") -> None:
    """`insert_flat` for rows given as equally long columns (numpy arrays): a chunk's Python values are
    made only as the chunk is inserted (a 278-host commit is ~4 million values: ~150 MB as one list)."""
    width = len(columns)
    rows = len(columns[0]) if width else 0
    step = chunk_rows(connection, width)
    for start in range(0, rows, step):
        end = min(rows, start + step)
        flat: list[Any] = [None] * ((end - start) * width)
        for offset, column in enumerate(columns):
            flat[offset::width] = column[start:end].tolist()
        connection.execute(_statement(head, width, end - start, tail), flat)


def chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    """`items` in slices of at most `size` (an IN list bound as variables, within the variable limit)."""
    return [items[start : start + size] for start in range(0, len(items), size)]
