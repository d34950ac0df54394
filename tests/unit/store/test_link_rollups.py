"""Per-link NVLink series are kept as 1-minute rollups, not raw rows: a sample of an 8-GPU server with 18
links per GPU is 112 raw rows instead of 400, and every link's minute is still there, counted once."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from meshdeck.services.synthetic_samples import sample_batch, wire_sample
from meshdeck.store import ingest as ingest_module
from meshdeck.store.database import Database, open_database
from meshdeck.store.ingest import SampleIngest
from meshdeck.store.query import query_range
from meshdeck.store.writer import BatchRows, SampleWriter, WriterSettings

HOUR_START = 1_764_482_400.0  # 2025-11-30 06:00:00 UTC
LINKS = 18


def _sample(seq: int, gpus: int = 1) -> dict[str, object]:
    """Sample `seq`, taken at HOUR_START + seq - 1 (a re-sent seq has its original time)."""
    return wire_sample(seq, HOUR_START + seq - 1, gpus=gpus, nvlink_links=LINKS)


def _query(db: Database, sql: str, *params: object) -> list[tuple[object, ...]]:
    connection = sqlite3.connect(db.path)
    try:
        return connection.execute(sql, params).fetchall()
    finally:
        connection.close()


def _link_values(seqs: Iterator[int] | list[int], gpu: int, link: int) -> list[float]:
    """The tx values link `link` of GPU `gpu` reported in these samples."""
    values = []
    for seq in seqs:
        gpus = _sample(seq, gpus=gpu + 1)["gpus"]
        assert isinstance(gpus, list)
        values.append(float(gpus[gpu]["nvlink_links"][link][0]))
    return values


def _link_minute(db: Database, bucket_s: float, device: str = "gpu0/nvlink3") -> tuple[object, ...]:
    """(vmin, vmax, vsum, n) of one link's tx in one minute, from whichever table holds it."""
    rows = _query(
        db,
        "SELECT vmin, vmax, vsum, n FROM rollup_1m JOIN series ON series.id = series_id "
        "WHERE device = ? AND metric = 'nvlink_tx_bytes_per_s' AND bucket = ? "
        "UNION ALL SELECT vmin, vmax, vsum, n FROM open_rollup_1m JOIN series ON series.id = series_id "
        "WHERE device = ? AND metric = 'nvlink_tx_bytes_per_s' AND bucket = ?",
        device,
        int(bucket_s * 1000),
        device,
        int(bucket_s * 1000),
    )
    assert len(rows) == 1, rows
    return rows[0]


def test_an_8_gpu_sample_is_112_raw_rows_and_no_link_row_is_stored_raw(db: Database) -> None:
    with SampleWriter(db) as writer:
        batch = sample_batch([_sample(seq, gpus=8) for seq in range(1, 4)])
        assert len(BatchRows(batch)) == 3 * 400  # what the agent reports: 8 x (14 + 18 x 2)
        writer.submit_samples("gpu-a", batch)
        assert writer.flush(30)
        stats = writer.stats()
    assert (stats.rows, stats.samples, stats.rows_per_sample) == (3 * 112, 3, 112.0)
    assert _query(db, "SELECT count(*) FROM samples")[0][0] == 3 * 112
    assert (
        _query(db, "SELECT count(*) FROM samples JOIN series ON series.id = series_id WHERE device LIKE '%/nvlink%'")[
            0
        ][0]
        == 0
    )
    totals = _query(
        db,
        "SELECT count(*) FROM samples JOIN series ON series.id = series_id "
        "WHERE device = 'gpu0' AND metric LIKE 'nvlink_%'",
    )
    assert totals[0][0] == 3 * 2  # the per-GPU sums stay raw: the dashboard's NVLink chart reads them


def test_a_closed_minute_holds_each_links_min_max_sum_and_count(db: Database) -> None:
    with SampleWriter(db) as writer:
        writer.submit_samples("gpu-a", sample_batch([_sample(seq) for seq in range(1, 91)]))  # 1.5 minutes
        assert writer.flush(30)
    values = _link_values(range(1, 61), gpu=0, link=3)
    assert _link_minute(db, HOUR_START) == (min(values), max(values), pytest.approx(sum(values)), 60)
    assert _query(db, "SELECT count(*) FROM open_rollup_1m WHERE bucket = ?", int(HOUR_START * 1000))[0][0] == 0
    open_values = _link_values(range(61, 91), gpu=0, link=3)
    assert _link_minute(db, HOUR_START + 60) == (
        min(open_values),
        max(open_values),
        pytest.approx(sum(open_values)),
        30,
    )


def test_a_chart_of_a_link_reads_it_by_the_minute_with_the_open_minute_at_its_right_edge(db: Database) -> None:
    with SampleWriter(db) as writer:
        writer.submit_samples("gpu-a", sample_batch([_sample(seq) for seq in range(1, 91)]))
        assert writer.flush(30)
        span = {"since": HOUR_START, "until": HOUR_START + 300, "now": HOUR_START + 300}
        (link,) = query_range(db, host="gpu-a", device="gpu0/nvlink3", metric="nvlink_tx_bytes_per_s", **span)
        (total,) = query_range(db, host="gpu-a", device="gpu0", metric="nvlink_tx_bytes_per_s", **span)
    assert total.tier == "raw" and len(total) == 90  # a 5-minute chart reads raw samples
    assert link.tier == "1m" and link.step_s == 60.0
    assert link.ts == (HOUR_START, HOUR_START + 60) and link.count == (60, 30)
    assert link.mean[1] == pytest.approx(sum(_link_values(range(61, 91), gpu=0, link=3)) / 30)


def test_a_redelivered_sample_is_counted_once_in_its_links_minute(db: Database) -> None:
    with SampleWriter(db, settings=WriterSettings(commit_interval_s=30.0)) as writer:
        writer.submit_samples("gpu-a", sample_batch([_sample(seq) for seq in range(1, 21)]))
        assert writer.flush(30)
        writer.submit_samples("gpu-a", sample_batch([_sample(seq) for seq in range(10, 31)]))  # 10..20 again
        assert writer.flush(30)
    values = _link_values(range(1, 31), gpu=0, link=3)
    assert _link_minute(db, HOUR_START) == (min(values), max(values), pytest.approx(sum(values)), 30)


def test_a_restart_in_the_middle_of_a_minute_continues_its_link_sums(db_path: object) -> None:
    path = db_path
    with open_database(path) as db:  # type: ignore[arg-type]
        writer = SampleWriter(db).start()
        writer.submit_samples("gpu-a", sample_batch([_sample(seq) for seq in range(1, 26)]))
        assert writer.flush(30)
        writer.stop(roll_up_open_buckets=False)  # the app closes; the minute stays open
    with open_database(path) as db, SampleWriter(db) as writer:  # type: ignore[arg-type]
        # the agent re-sends from before the resume point (an overlap), then the rest of the minute
        writer.submit_samples("gpu-a", sample_batch([_sample(seq) for seq in range(20, 66)]))
        assert writer.flush(30)
        values = _link_values(range(1, 61), gpu=0, link=3)
        assert _link_minute(db, HOUR_START) == (min(values), max(values), pytest.approx(sum(values)), 60)


def test_a_late_sample_lands_in_its_closed_minute_once(db: Database) -> None:
    with SampleWriter(db) as writer:
        seqs = [s for s in range(1, 91) if s != 30]  # seq 30 (minute 0) is missing at first
        writer.submit_samples("gpu-a", sample_batch([_sample(seq) for seq in seqs]))
        assert writer.flush(30)
        assert _link_minute(db, HOUR_START)[3] == 59
        writer.submit_samples("gpu-a", sample_batch([_sample(30)]))  # the gap filled late
        writer.submit_samples("gpu-a", sample_batch([_sample(30)]))  # and delivered twice
        assert writer.flush(30)
    values = _link_values(range(1, 61), gpu=0, link=3)
    assert _link_minute(db, HOUR_START) == (min(values), max(values), pytest.approx(sum(values)), 60)


def test_a_commit_that_failed_and_is_retried_counts_its_links_once(db: Database) -> None:
    connection = db.raw_connection()
    try:
        ingest = SampleIngest(connection)
        ingest.add_rows("gpu-a", BatchRows(sample_batch([_sample(seq) for seq in range(1, 11)])))
        real_roll_up = ingest_module.roll_up
        failing = mock.patch.object(ingest_module, "roll_up", side_effect=sqlite3.OperationalError("disk I/O error"))
        with failing, pytest.raises(sqlite3.OperationalError):
            ingest.commit()
        assert ingest_module.roll_up is real_roll_up
        ack = ingest.commit()  # the same staged rows, again
        assert ack is not None and ack.rows == 10 * 14
    finally:
        connection.close()
    values = _link_values(range(1, 11), gpu=0, link=3)
    assert _link_minute(db, HOUR_START) == (min(values), max(values), pytest.approx(sum(values)), 10)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(deliveries=st.lists(st.tuples(st.integers(1, 150), st.integers(1, 40), st.booleans()), min_size=1, max_size=8))
def test_any_deliveries_restarts_and_overlaps_give_each_link_minute_every_sample_once(
    tmp_path_factory: pytest.TempPathFactory, deliveries: list[tuple[int, int, bool]]
) -> None:
    """Each delivery: (first seq, count, restart the writer before it). Whatever the order, overlap and
    restarts, each link minute holds exactly the distinct samples delivered into it."""
    path = tmp_path_factory.mktemp("links") / "m.db"
    delivered: set[int] = set()
    with open_database(path) as db:
        writer = SampleWriter(db, settings=WriterSettings(commit_interval_s=30.0)).start()
        try:
            for first, count, restart in deliveries:
                if restart:
                    writer.stop(roll_up_open_buckets=False)
                    writer = SampleWriter(db, settings=WriterSettings(commit_interval_s=30.0)).start()
                seqs = list(range(first, first + count))
                writer.submit_samples("gpu-a", sample_batch([_sample(seq) for seq in seqs]))
                assert writer.flush(30)
                delivered.update(seqs)
        finally:
            writer.stop(roll_up_open_buckets=False)
        for minute in sorted({(seq - 1) // 60 for seq in delivered}):
            in_minute = sorted(seq for seq in delivered if (seq - 1) // 60 == minute)
            values = _link_values(in_minute, gpu=0, link=3)
            assert _link_minute(db, HOUR_START + 60 * minute) == (
                min(values),
                max(values),
                pytest.approx(sum(values)),
                len(in_minute),
            )
