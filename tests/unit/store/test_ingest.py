"""The sample writer: lossless, idempotent ingest with acknowledgements, rollups that match the raw data."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator

import pytest
from meshdeck.services.synthetic_samples import sample_batch, wire_sample
from meshdeck.store.database import Database
from meshdeck.store.events import EventRecord, list_events
from meshdeck.store.ingest import CommitAck
from meshdeck.store.writer import SampleWriter, WriterSettings

HOUR_START = 1_764_482_400.0  # 2025-11-30 06:00:00 UTC: divisible by 3600


def _samples(first_seq: int, count: int, start: float = HOUR_START, gpus: int = 2) -> list[dict[str, object]]:
    """Samples first_seq.. with seq n taken at start + n - 1 (so a re-sent seq has its original time)."""
    return [wire_sample(seq, start + seq - 1, gpus=gpus) for seq in range(first_seq, first_seq + count)]


@pytest.fixture
def writer(db: Database) -> Iterator[SampleWriter]:
    with SampleWriter(db, settings=WriterSettings(commit_interval_s=30.0)) as sample_writer:
        yield sample_writer


def _raw(db: Database, sql: str, *params: object) -> list[tuple[object, ...]]:
    connection = sqlite3.connect(db.path)
    try:
        return connection.execute(sql, params).fetchall()
    finally:
        connection.close()


def _sample_count(db: Database) -> int:
    return int(_raw(db, "SELECT count(*) FROM samples")[0][0])


def test_samples_are_stored_one_row_per_metric_and_acknowledged(db: Database) -> None:
    acks: list[CommitAck] = []
    with SampleWriter(db, on_commit=acks.append) as writer:
        writer.submit_samples("gpu-a", sample_batch(_samples(1, 5)))
        assert writer.flush(30)
        assert writer.committed_seq("gpu-a") == 5
    assert _sample_count(db) == 5 * 2 * 12
    assert [(r.host, r.first_seq, r.last_seq, r.samples) for a in acks for r in a.ranges] == [("gpu-a", 1, 5, 5)]
    assert _raw(db, "SELECT count(*) FROM series WHERE host = 'gpu-a'")[0][0] == 2 * 12


def test_a_redelivered_seq_is_not_stored_twice(db: Database, writer: SampleWriter) -> None:
    writer.submit_samples("gpu-a", sample_batch(_samples(1, 10)))
    assert writer.flush(30)
    writer.submit_samples("gpu-a", sample_batch(_samples(5, 10)))  # 5..10 again (backfill overlap), 11..14 new
    assert writer.flush(30)
    assert _sample_count(db) == 14 * 24
    assert writer.stats().duplicates == 6 * 24  # rows of seq 5..10, ignored by the primary key
    assert writer.committed_seq("gpu-a") == 14


def test_the_position_survives_a_restart_so_backfill_after_it_is_idempotent(db: Database) -> None:
    with SampleWriter(db) as writer:
        writer.submit_samples("gpu-a", sample_batch(_samples(1, 10)))
    with SampleWriter(db) as writer:
        assert writer.committed_seq("gpu-a") == 10
        writer.submit_samples("gpu-a", sample_batch(_samples(1, 12)))
        assert writer.flush(30)
        assert writer.stats().duplicates == 10 * 24
    assert _sample_count(db) == 12 * 24


def test_an_agent_restart_counting_from_one_again_is_kept(db: Database, writer: SampleWriter) -> None:
    writer.submit_samples("gpu-a", sample_batch(_samples(100, 5)))  # seq 100..104 at HOUR_START + 99..103
    assert writer.flush(30)
    writer.submit_samples(
        "gpu-a", sample_batch(_samples(1, 3, start=HOUR_START + 200))
    )  # new agent: seq 1.., later time
    assert writer.flush(30)
    assert _sample_count(db) == 8 * 24
    assert writer.committed_seq("gpu-a") == 3


def test_a_new_sequence_epoch_restarts_the_resume_point_even_when_its_times_are_older(
    db: Database, writer: SampleWriter
) -> None:
    writer.submit_samples("gpu-a", sample_batch(_samples(100, 5)), epoch="e1")  # seq 100..104 at HOUR_START + 99..103
    assert writer.flush(30)
    assert writer.positions()["gpu-a"].epoch == "e1"
    # the reinstalled server's agent: seq 1..3 under a new epoch, its ring going back before the last stored time
    writer.submit_samples("gpu-a", sample_batch(_samples(1, 3, start=HOUR_START + 50)), epoch="e2")
    assert writer.flush(30)
    position = writer.positions()["gpu-a"]
    assert (position.last_seq, position.epoch) == (3, "e2")
    assert _raw(db, "SELECT last_seq, seq_epoch FROM ingest_state") == [(3, "e2")]
    with SampleWriter(db) as reopened:  # the resume point and its epoch survive a restart
        assert reopened.positions()["gpu-a"].epoch == "e2" and reopened.committed_seq("gpu-a") == 3


def test_minute_rollups_equal_the_raw_aggregates_and_the_open_minute_is_not_rolled_yet(
    db: Database, writer: SampleWriter
) -> None:
    writer.submit_samples("gpu-a", sample_batch(_samples(1, 150)))  # 2.5 minutes from an hour start
    assert writer.flush(30)
    rolled = _raw(db, "SELECT series_id, bucket, vmin, vmax, vsum, n FROM rollup_1m ORDER BY series_id, bucket")
    expected = _raw(
        db,
        "SELECT series_id, ts - ts % 60000, min(value), max(value), sum(value), count(*) FROM samples "
        "WHERE ts < ? GROUP BY 1, 2 ORDER BY 1, 2",
        int((HOUR_START + 120) * 1000),
    )
    assert rolled == [pytest.approx(row) for row in expected]
    assert {row[1] for row in rolled} == {int(HOUR_START * 1000), int((HOUR_START + 60) * 1000)}
    assert all(row[5] == 60 for row in rolled)
    assert _raw(db, "SELECT open_minute FROM ingest_state")[0][0] == int((HOUR_START + 120) * 1000)


def test_a_late_sample_rerolls_its_closed_minute(db: Database, writer: SampleWriter) -> None:
    samples = _samples(1, 130)
    writer.submit_samples("gpu-a", sample_batch(samples[:30] + samples[40:]))  # seq 31..40 missing
    assert writer.flush(30)
    assert _raw(db, "SELECT DISTINCT n FROM rollup_1m WHERE bucket = ?", int(HOUR_START * 1000)) == [(50,)]
    writer.submit_samples("gpu-a", sample_batch(samples[30:40]))  # the gap backfilled later (lower seq, earlier time)
    assert writer.flush(30)
    assert _raw(db, "SELECT DISTINCT n FROM rollup_1m WHERE bucket = ?", int(HOUR_START * 1000)) == [(60,)]


def test_hour_rollups_equal_the_raw_aggregates(db: Database, writer: SampleWriter) -> None:
    writer.submit_samples("gpu-a", sample_batch(_samples(1, 3600 + 61, gpus=1)))
    assert writer.flush(60)
    rolled = _raw(db, "SELECT series_id, vmin, vmax, vsum, n FROM rollup_1h ORDER BY series_id")
    expected = _raw(
        db,
        "SELECT series_id, min(value), max(value), sum(value), count(*) FROM samples WHERE ts < ? "
        "GROUP BY 1 ORDER BY 1",
        int((HOUR_START + 3600) * 1000),
    )
    assert rolled == [pytest.approx(row) for row in expected]
    assert all(row[4] == 3600 for row in rolled)


def test_stopping_rolls_up_the_open_buckets(db: Database) -> None:
    with SampleWriter(db) as writer:
        writer.submit_samples("gpu-a", sample_batch(_samples(1, 30)))
    assert _raw(db, "SELECT DISTINCT n FROM rollup_1m") == [(30,)]
    assert _raw(db, "SELECT DISTINCT n FROM rollup_1h") == [(30,)]
    assert _raw(db, "SELECT open_minute FROM ingest_state") == [(None,)]
    with SampleWriter(db) as writer:  # the same minute continues after a restart: re-rolled whole
        writer.submit_samples("gpu-a", sample_batch(_samples(31, 40)))
    assert _raw(db, "SELECT DISTINCT n FROM rollup_1m WHERE bucket = ?", int(HOUR_START * 1000)) == [(60,)]
    assert _raw(db, "SELECT DISTINCT n FROM rollup_1h") == [(70,)]


def test_events_and_agent_losses_are_stored_with_the_batch(db: Database, writer: SampleWriter) -> None:
    writer.submit_event(EventRecord("host_state", HOUR_START, host="gpu-a", data={"state": "connected"}))
    writer.submit_samples("gpu-a", sample_batch(_samples(20, 3)), dropped=7)  # seq 20..22
    assert writer.flush(30)
    kinds = [(e.kind, e.host, dict(e.data)) for e in list_events(db, host="gpu-a")]
    assert ("host_state", "gpu-a", {"state": "connected"}) in kinds
    assert any(kind == "samples_dropped" and data == {"dropped": 7} for kind, _, data in kinds)
    assert writer.positions()["gpu-a"].dropped == 7


def test_a_failing_commit_acknowledges_nothing_and_retries_until_durable(db: Database) -> None:
    blocker = sqlite3.connect(db.path)
    blocker.execute(
        "CREATE TRIGGER disk_full BEFORE INSERT ON ingest_state BEGIN SELECT RAISE(ABORT, 'simulated disk full'); END"
    )
    blocker.commit()
    acks: list[CommitAck] = []
    committed = threading.Event()
    settings = WriterSettings(commit_interval_s=0.05, retry_s=0.1)

    def on_commit(ack: CommitAck) -> None:
        acks.append(ack)
        committed.set()

    with SampleWriter(db, settings=settings, on_commit=on_commit) as writer:
        writer.submit_samples("gpu-a", sample_batch(_samples(1, 5)))
        assert not writer.flush(1.0)
        assert acks == [] and writer.committed_seq("gpu-a") is None
        assert writer.stats().failures >= 1 and "simulated disk full" in (writer.stats().last_error or "")
        assert _sample_count(db) == 0
        blocker.execute("DROP TRIGGER disk_full")
        blocker.commit()
        assert committed.wait(30)
        assert writer.committed_seq("gpu-a") == 5
    blocker.close()
    assert _sample_count(db) == 5 * 24


def test_submitting_to_a_stopped_writer_is_an_error(db: Database) -> None:
    writer = SampleWriter(db)
    with pytest.raises(RuntimeError, match="not running"):
        writer.submit_samples("gpu-a", sample_batch(_samples(1, 1)))


def test_the_commit_interval_grows_with_the_number_of_series(db: Database) -> None:
    with SampleWriter(db) as writer:
        writer.submit_samples("gpu-a", sample_batch(_samples(1, 1, gpus=8)))
        assert writer.flush(30)
        writer.submit_samples("gpu-a", sample_batch(_samples(2, 1, gpus=8)))
        assert writer.flush(30)
        assert writer.commit_interval() == 2.0  # 96 series: the 2 s floor
        for host in range(64):
            writer.submit_samples(f"gpu-{host:02d}", sample_batch(_samples(1, 1, gpus=8)))
        assert writer.flush(30)
        writer.submit_samples("gpu-a", sample_batch(_samples(3, 1, gpus=8)))
        assert writer.flush(30)
        assert writer.commit_interval() == 30.0  # 64 x 96 series: the 30 s ceiling
    fixed = SampleWriter(db, settings=WriterSettings(commit_interval_s=5.0))
    assert fixed.commit_interval() == 5.0
