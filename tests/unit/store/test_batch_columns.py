"""The column path (a batch staged as it came, converted with numpy) stores exactly what the row path does."""

from __future__ import annotations

import math
import random
import sqlite3
from array import array
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from meshdeck.core.samples import SampleBatch
from meshdeck.services.synthetic_samples import sample_batch, wire_sample
from meshdeck.store import bulk_insert
from meshdeck.store import ingest as ingest_module
from meshdeck.store.batch_columns import BatchRows
from meshdeck.store.database import open_database
from meshdeck.store.ingest import SampleIngest

HOUR_START = 1_764_482_400.0 + 3_540  # 06:59:00 UTC: deliveries cross minutes and an hour


def _batch(first: int, count: int, holes: float, seed: int) -> SampleBatch:
    """Samples first.. (seq n at HOUR_START + n), with a share `holes` of values not reported (NaN)."""
    batch = sample_batch(
        [wire_sample(seq, HOUR_START + seq, gpus=2, nvlink_links=3) for seq in range(first, first + count)]
    )
    rng = random.Random(seed)
    values = array("d", (math.nan if rng.random() < holes else value for value in batch.values))
    return SampleBatch(batch.seqs, batch.times, batch.series, values, batch.simulated)


def _tables(path: Path) -> dict[str, list[tuple[object, ...]]]:
    connection = sqlite3.connect(path)
    try:

        def rows(sql: str) -> list[tuple[object, ...]]:
            return connection.execute(sql).fetchall()

        return {
            "samples": rows(
                "SELECT host, device, metric, ts, value FROM samples JOIN series ON series.id = series_id ORDER BY 1, 2, 3, 4"
            ),
            "rollup_1m": rows(
                "SELECT host, device, metric, bucket, vmin, vmax, round(vsum, 3), n FROM rollup_1m "
                "JOIN series ON series.id = series_id ORDER BY 1, 2, 3, 4"
            ),
            "open_rollup_1m": rows(
                "SELECT host, device, metric, bucket, vmin, vmax, round(vsum, 3), n FROM open_rollup_1m "
                "JOIN series ON series.id = series_id ORDER BY 1, 2, 3, 4"
            ),
            "rollup_1h": rows(
                "SELECT host, device, metric, bucket, vmin, vmax, round(vsum, 3), n FROM rollup_1h "
                "JOIN series ON series.id = series_id ORDER BY 1, 2, 3, 4"
            ),
            "ingest_state": rows(
                "SELECT host, last_seq, last_ts, open_minute, open_hour, samples, dropped, seq_epoch, raw_rows "
                "FROM ingest_state ORDER BY host"
            ),
        }
    finally:
        connection.close()


def _store(path: Path, deliveries: list[tuple[str, int, int, float, int, str | None, bool]], columns: bool) -> None:
    database = open_database(path)
    connection = database.raw_connection()
    try:
        ingest = SampleIngest(connection)
        acks = []
        for host, first, count, holes, seed, epoch, commit in deliveries:
            batch = _batch(first, count, holes, seed)
            if columns:
                assert ingest.add_batch(host, batch, epoch) is None
            else:
                assert ingest.add_rows(host, BatchRows(batch), epoch) is None
            if commit:
                acks.append(ingest.commit())
        ingest.seal(["gpu-b"])
        acks.append(ingest.commit())
        assert ingest.pending_rows == 0
    finally:
        connection.close()
        database.close()


delivery = st.tuples(
    st.sampled_from(["gpu-a", "gpu-b"]),
    st.integers(1, 150),  # first seq
    st.integers(1, 30),  # samples
    st.sampled_from([0.0, 0.2, 1.0]),  # values not reported
    st.integers(0, 1000),
    st.sampled_from([None, "e1", "e2"]),
    st.booleans(),  # commit after it
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(deliveries=st.lists(delivery, min_size=1, max_size=8))
def test_any_deliveries_store_the_same_through_columns_as_through_rows(
    tmp_path_factory: pytest.TempPathFactory, deliveries: list[tuple[str, int, int, float, int, str | None, bool]]
) -> None:
    folder = tmp_path_factory.mktemp("paths")
    _store(folder / "rows.db", deliveries, columns=False)
    _store(folder / "columns.db", deliveries, columns=True)
    assert _tables(folder / "columns.db") == _tables(folder / "rows.db")


def test_a_batch_with_an_unstorable_value_keeps_the_rest_and_says_what_it_refused(tmp_path: Path) -> None:
    database = open_database(tmp_path / "m.db")
    connection = database.raw_connection()
    try:
        ingest = SampleIngest(connection)
        batch = _batch(1, 3, 0.0, 1)
        values = array("d", batch.values)
        values[5] = math.inf
        refused = ingest.add_batch("gpu-a", SampleBatch(batch.seqs, batch.times, batch.series, values))
        assert refused is not None and refused.rows == 1 and "inf" in refused.reason
        ack = ingest.commit()
        assert ack is not None and ack.ranges[0].samples == 3
        refused = ingest.add_batch("gpu-a", _batch(4, 1, 0.0, 1), epoch="x" * 201)
        assert (
            refused is not None and refused.rows == len(BatchRows(_batch(4, 1, 0.0, 1))) and "epoch" in refused.reason
        )
    finally:
        connection.close()
        database.close()


def test_a_failed_commit_retried_stores_each_row_and_link_once(tmp_path: Path) -> None:
    rows_path, columns_path = tmp_path / "rows.db", tmp_path / "columns.db"
    _store(rows_path, [("gpu-a", 1, 20, 0.2, 3, None, False)], columns=False)
    database = open_database(columns_path)
    connection = database.raw_connection()
    try:
        ingest = SampleIngest(connection)
        assert ingest.add_batch("gpu-a", _batch(1, 20, 0.2, 3)) is None
        failing = mock.patch.object(ingest_module, "roll_up", side_effect=sqlite3.OperationalError("disk I/O error"))
        with failing, pytest.raises(sqlite3.OperationalError):
            ingest.commit()
        ingest.seal(["gpu-b"])
        assert ingest.commit() is not None
    finally:
        connection.close()
        database.close()
    assert _tables(columns_path) == _tables(rows_path)


def test_rows_go_in_as_multi_row_statements_within_the_variable_limit(tmp_path: Path) -> None:
    connection = sqlite3.connect(tmp_path / "t.db")
    connection.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b REAL)")
    connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 10)  # 5 rows of 2 a statement
    statements: list[str] = []
    connection.set_trace_callback(statements.append)
    flat = [value for a in range(23) for value in (a, a / 2)]
    bulk_insert.insert_flat(connection, "INSERT OR IGNORE INTO t (a, b)", 2, [*flat, 0, 99.0])  # a repeat of a=0
    assert connection.execute("SELECT count(*), sum(b) FROM t").fetchone() == (23, sum(a / 2 for a in range(23)))
    assert connection.execute("SELECT b FROM t WHERE a = 0").fetchone() == (0.0,)  # the first row won
    assert sum(s.startswith("INSERT") for s in statements) == 5  # 4 of 5 rows, then the last 4
    with pytest.raises(ValueError, match="whole rows"):
        bulk_insert.insert_flat(connection, "INSERT INTO t (a, b)", 2, [1, 2.0, 3])
    connection.close()


def test_rows_repeated_within_a_commit_or_older_than_the_stored_ones_are_stored_and_counted_once(
    tmp_path: Path,
) -> None:
    database = open_database(tmp_path / "m.db")
    connection = database.raw_connection()
    try:
        ingest = SampleIngest(connection)
        ingest.add_batch("gpu-a", _batch(1, 10, 0.0, 1))
        ingest.add_batch("gpu-a", _batch(6, 10, 0.0, 1))  # 6..10 again in the same commit (a backfill overlap)
        ack = ingest.commit()
        per_sample = len(BatchRows(_batch(1, 1, 0.0, 1))) - 2 * 2 * 3  # without the per-link values
        assert ack is not None and ack.duplicates == 5 * per_sample and ack.rows == 20 * per_sample
        ingest.add_rows("gpu-a", BatchRows(_batch(3, 5, 0.0, 1)))  # all older than what is stored: all ignored
        ingest.add_batch("gpu-a", _batch(16, 2, 0.0, 1))  # new
        ack = ingest.commit()
        assert ack is not None and ack.duplicates == 5 * per_sample and ack.rows == 7 * per_sample
    finally:
        connection.close()
        database.close()
    stored = sqlite3.connect(tmp_path / "m.db")
    try:
        rows = stored.execute("SELECT count(*) FROM samples").fetchone()[0]
        assert rows == 17 * per_sample
        assert stored.execute("SELECT raw_rows FROM ingest_state WHERE host = 'gpu-a'").fetchone()[0] == rows
    finally:
        stored.close()


def test_columns_go_in_chunk_by_chunk_in_order(tmp_path: Path) -> None:
    import numpy as np

    connection = sqlite3.connect(tmp_path / "t.db")
    connection.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b REAL)")
    connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 10)
    statements: list[str] = []
    connection.set_trace_callback(statements.append)
    bulk_insert.insert_columns(connection, "INSERT INTO t (a, b)", [np.arange(23), np.arange(23) / 4])
    assert connection.execute("SELECT a, b FROM t ORDER BY a").fetchall() == [(a, a / 4) for a in range(23)]
    assert sum(s.startswith("INSERT") for s in statements) == 5
    connection.close()
