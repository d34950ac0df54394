"""A host's sample batches turned into store rows column-wise, with numpy, not value by value.

The agent's batches are already columns (`SampleBatch`: one value per series per sample, NaN where a series
was not reported). At fleet size the writer's row-by-row path — a `(seq, ts, device, metric, value)` tuple
per value, checked, looked up and appended one at a time — cost ~2 µs a value: 117,000 values a second
at 278 hosts, a quarter of a core in the one process that also runs the console. Here each batch's layout
(which column is which series id, which columns are per-link NVLink sums) is worked out once per layout,
the values are checked as one array, and the rows a commit inserts and the per-link minute sums are cut
out of the value matrix whole.

What is stored is exactly what the row path stores (tests/unit/store/test_batch_columns.py checks the two
against each other): the same raw rows, the same per-link minute sums, each sample counted once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from meshdeck.core.samples import SampleBatch, SeriesKey
from meshdeck.store.link_minutes import LinkSums, add_to_sums
from meshdeck.store.sample_checks import MAX_SAMPLE_TS, MAX_SQLITE_INTEGER, MIN_SAMPLE_TS

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def values_of(batch: SampleBatch) -> FloatArray:
    """The batch's values as a (samples × series) matrix (a view of its array, not a copy)."""
    return np.frombuffer(batch.values, dtype=np.float64).reshape(len(batch.seqs), len(batch.series))


def columns_storable(batch: SampleBatch) -> bool:
    """Whether every reported value, seq and time of the batch can be stored as it is (else the caller
    takes the row path, which keeps the storable rows and says what it refused)."""
    for seq, ts in zip(batch.seqs, batch.times, strict=True):
        if type(seq) is not int or not 0 <= seq <= MAX_SQLITE_INTEGER or not MIN_SAMPLE_TS <= ts <= MAX_SAMPLE_TS:
            return False
    return not bool(np.isinf(np.frombuffer(batch.values, dtype=np.float64)).any())


def reported_count(batch: SampleBatch) -> int:
    """Values the batch reported (not NaN): the rows it stages."""
    values = np.frombuffer(batch.values, dtype=np.float64)
    return int(values.size - np.count_nonzero(np.isnan(values)))


@dataclass(frozen=True)
class Layout:
    """Where a batch's columns go, for one host: raw series (column, series id) and rollup-only ones."""

    series: tuple[SeriesKey, ...]
    raw_columns: IntArray
    raw_ids: IntArray
    link_columns: IntArray
    link_ids: tuple[int, ...]


def make_layout(series: tuple[SeriesKey, ...], series_id: Callable[[SeriesKey], tuple[int, bool]]) -> Layout:
    """`series_id(key)` says a column's id and whether it is kept as rollups only (creating it if new)."""
    raw_columns: list[int] = []
    raw_ids: list[int] = []
    link_columns: list[int] = []
    link_ids: list[int] = []
    for column, key in enumerate(series):
        ident, rollup_only = series_id(key)
        if rollup_only:
            link_columns.append(column)
            link_ids.append(ident)
        else:
            raw_columns.append(column)
            raw_ids.append(ident)
    return Layout(
        series,
        np.array(raw_columns, dtype=np.int64),
        np.array(raw_ids, dtype=np.int64),
        np.array(link_columns, dtype=np.int64),
        tuple(link_ids),
    )


@dataclass
class Block:
    """Consecutive samples of one host, one layout, one sequence epoch: the unit the commit converts."""

    layout: Layout
    seqs: list[int]
    times: list[float]
    values: list[FloatArray]  # one (samples × series) matrix per batch

    def matrix(self) -> FloatArray:
        return self.values[0] if len(self.values) == 1 else np.concatenate(self.values)


def raw_rows(layout: Layout, values: FloatArray, ts_ms: IntArray, keep: npt.NDArray[np.bool_]) -> tuple[Any, ...]:
    """(series ids, times ms, values) of the reported raw values of the kept samples, sample by sample."""
    raw = values[keep][:, layout.raw_columns]
    reported = ~np.isnan(raw)
    shape = raw.shape
    ids = np.broadcast_to(layout.raw_ids, shape)[reported]
    times = np.broadcast_to(ts_ms[keep][:, None], shape)[reported]
    return ids, times, raw[reported]


def add_link_sums(layout: Layout, values: FloatArray, rows: list[int], sums: dict[int, LinkSums]) -> None:
    """Add samples `rows` of `values` to a minute's per-link (vmin, vmax, vsum, n) (NaN: not reported)."""
    block = values[rows][:, layout.link_columns]
    counts = block.shape[0] - np.count_nonzero(np.isnan(block), axis=0)
    lows = np.fmin.reduce(block, axis=0).tolist()
    highs = np.fmax.reduce(block, axis=0).tolist()
    totals = np.nansum(block, axis=0).tolist()
    for link_id, n, low, high, total in zip(layout.link_ids, counts.tolist(), lows, highs, totals, strict=True):
        if n:
            add_to_sums(sums, link_id, low, high, total, n)


@lru_cache(maxsize=65_536)
def series_name(key: SeriesKey) -> tuple[str, str]:
    """(Device.text, metric) of a series key, remembered: a batch's keys are interned, and formatting the
    device of each of a 278-host fleet's 117,000 columns every second (twice: rows are read when checked
    and when converted) cost ~15 % of the writer thread. One pair per series, shared by every batch."""
    return key[0].text, key[1]


class BatchRows(Sequence[tuple[int, float, str, str, float]]):
    """A batch seen as the store's rows, made as they are read: staging a batch costs its floats, not a
    tuple per row. The device is named as its series is (Device.text), remembered per series."""

    def __init__(self, batch: SampleBatch) -> None:
        self.batch = batch
        self._reported = reported_count(batch)

    def __len__(self) -> int:
        return self._reported

    def __getitem__(self, index: Any) -> Any:
        raise TypeError("BatchRows is read in order, not indexed")

    def __iter__(self) -> Iterator[tuple[int, float, str, str, float]]:
        batch = self.batch
        names = [series_name(key) for key in batch.series]
        width = len(names)
        values = batch.values
        for i, (seq, ts) in enumerate(zip(batch.seqs, batch.times, strict=True)):
            base = i * width
            for column, (device, metric) in enumerate(names):
                value = values[base + column]
                if value == value:  # reported
                    yield seq, ts, device, metric, value
