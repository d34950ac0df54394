"""The raw tier's size: counted exactly per host, measured in bytes, and kept under the retention policy's
budget by deleting the oldest raw samples first (rollups kept)."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from meshdeck.core.errors import InputError
from meshdeck.services.sizes import parse_size
from meshdeck.store.database import Database, open_database
from meshdeck.store.raw_tier import enforce_raw_budget, raw_tier_size
from meshdeck.store.retention import RetentionPolicy, apply_retention, load_policy, save_policy
from meshdeck.store.writer import SampleWriter, WriterSettings

HOUR_START = 1_764_482_400.0


def _rows(seconds: int, start_seq: int = 1, series: int = 8) -> list[tuple[int, float, str, str, float]]:
    return [
        (seq, HOUR_START + seq - 1, f"gpu{g}", "power_w", 300.0 + (seq * 7 + g) % 91 + 0.25)
        for seq in range(start_seq, start_seq + seconds)
        for g in range(series)
    ]


def _scalar(db: Database, sql: str, *params: object) -> int:
    connection = sqlite3.connect(db.path)
    try:
        return int(connection.execute(sql, params).fetchone()[0])
    finally:
        connection.close()


def _counted_rows(db: Database) -> dict[str, int]:
    connection = sqlite3.connect(db.path)
    try:
        counted = dict(connection.execute("SELECT host, raw_rows FROM ingest_state").fetchall())
        actual = dict(
            connection.execute(
                "SELECT host, count(*) FROM samples JOIN series ON series.id = series_id GROUP BY host"
            ).fetchall()
        )
    finally:
        connection.close()
    assert counted == {host: actual.get(host, 0) for host in counted}
    return counted


def test_the_budget_is_saved_with_the_policy_and_a_bad_one_names_the_field(db: Database) -> None:
    assert load_policy(db).raw_max_bytes is None
    save_policy(db, RetentionPolicy(raw_max_bytes=50 * 10**9))
    assert load_policy(db) == RetentionPolicy(raw_max_bytes=50 * 10**9)
    for bad in (1000, 2.5e9, True, "50GB"):
        with pytest.raises(InputError) as info:
            RetentionPolicy(raw_max_bytes=bad)  # type: ignore[arg-type]
        assert info.value.field == "retention.raw_max_bytes"


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("50GB", 50 * 10**9),
        ("50 GiB", 50 * 2**30),
        ("500MB", 500 * 10**6),
        ("1.5TB", 1_500_000_000_000),
        ("none", None),
    ],
)
def test_a_size_is_read_as_a_person_writes_it(text: str, size: int | None) -> None:
    assert parse_size(text, field="--raw-max-size") == size


@pytest.mark.parametrize("text", ["abc", "-5GB", "50 parsecs", ""])
def test_a_size_that_is_not_one_names_the_option(text: str) -> None:
    with pytest.raises(InputError) as info:
        parse_size(text, field="--raw-max-size")
    assert info.value.field == "--raw-max-size"


def test_each_hosts_raw_rows_are_counted_through_duplicates_and_retention(db: Database) -> None:
    with SampleWriter(db) as writer:
        writer.submit_rows("gpu-a", _rows(600))
        writer.submit_rows("gpu-b", _rows(300, series=3))
        assert writer.flush(30)
        writer.submit_rows("gpu-a", _rows(200, start_seq=500))  # 500..599 again, 600..699 new
        assert writer.flush(30)
    assert _counted_rows(db) == {"gpu-a": 699 * 8, "gpu-b": 300 * 3}
    connection = db.raw_connection()
    try:
        apply_retention(connection, RetentionPolicy(raw_days=1, minute_days=2), HOUR_START + 86_400 + 120)
    finally:
        connection.close()
    assert _counted_rows(db) == {"gpu-a": (699 - 120) * 8, "gpu-b": (300 - 120) * 3}


def test_the_measured_size_is_what_the_raw_table_takes_in_the_file(db: Database) -> None:
    with SampleWriter(db) as writer:
        for host in ("gpu-a", "gpu-b", "gpu-c"):
            writer.submit_rows(host, _rows(3600, series=24))
        assert writer.flush(60)
    connection = db.raw_connection()
    try:
        size = raw_tier_size(connection)
        exact = connection.execute("SELECT sum(pgsize) FROM dbstat WHERE name = 'samples'").fetchone()[0]
    finally:
        connection.close()
    assert size.rows == 3 * 3600 * 24
    assert size.bytes == pytest.approx(exact, rel=0.1)
    assert 10 < size.bytes_per_row < 40


def test_over_budget_the_oldest_raw_samples_go_first_and_the_rollups_stay(db: Database) -> None:
    with SampleWriter(db) as writer:
        writer.submit_rows("gpu-a", _rows(1800))
        writer.submit_rows("gpu-b", _rows(1800))
        assert writer.flush(60)
    rollups = _scalar(db, "SELECT count(*) FROM rollup_1m")
    connection = db.raw_connection()
    try:
        before = raw_tier_size(connection)
        budget = before.bytes // 2
        passes = 0
        while raw_tier_size(connection).bytes > budget:
            assert enforce_raw_budget(connection, budget, max_span_s=300, passes=1) > 0
            passes += 1
        after = raw_tier_size(connection)
    finally:
        connection.close()
    assert passes >= 2  # at most 5 minutes of history per pass
    assert after.bytes <= budget and after.rows >= before.rows * 0.4  # no more than needed went
    oldest = _scalar(db, "SELECT min(ts) FROM samples")
    assert _scalar(db, "SELECT count(*) FROM samples WHERE ts >= ?", oldest) == after.rows  # nothing newer lost
    assert _scalar(db, "SELECT max(ts) FROM samples") == int((HOUR_START + 1799) * 1000)
    assert _scalar(db, "SELECT count(*) FROM rollup_1m") == rollups
    _counted_rows(db)


def test_the_writer_keeps_the_raw_tier_under_the_budget_of_the_saved_policy(db: Database) -> None:
    save_policy(db, RetentionPolicy(raw_max_bytes=1024**2))
    with SampleWriter(db, settings=WriterSettings(commit_interval_s=0.05)) as writer:
        for minute in range(12):  # 12 minutes of 64 series: ~46,000 rows, well over 1 MiB
            writer.submit_rows("gpu-a", _rows(60, start_seq=1 + 60 * minute, series=64))
            assert writer.flush(30)
        stats = writer.stats()
    assert 0 < stats.raw_tier_bytes <= 1024**2
    assert stats.raw_rows_over_budget > 0 and stats.raw_tier_rows == _scalar(db, "SELECT count(*) FROM samples")
    assert stats.raw_bytes_per_sample == pytest.approx(64 * stats.raw_bytes_per_row)
    assert _scalar(db, "SELECT max(ts) FROM samples") == int((HOUR_START + 719) * 1000)  # the newest kept
    assert _scalar(db, "SELECT count(DISTINCT bucket) FROM rollup_1m") == 12  # every minute kept (the last sealed)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(
        st.tuples(st.sampled_from(["gpu-a", "gpu-b"]), st.integers(1, 400), st.integers(1, 120)), min_size=1, max_size=6
    ),
    raw_hours=st.floats(1.0, 3.0),
    cut_s=st.integers(0, 600),
)
def test_raw_rows_stay_exact_whatever_is_redelivered_and_deleted(
    tmp_path_factory: pytest.TempPathFactory, batches: list[tuple[str, int, int]], raw_hours: float, cut_s: int
) -> None:
    path = tmp_path_factory.mktemp("raw") / "m.db"
    with open_database(path) as db:
        with SampleWriter(db) as writer:
            for host, first, count in batches:
                writer.submit_rows(host, _rows(count, start_seq=first, series=2))
                assert writer.flush(30)
        connection = db.raw_connection()
        try:
            policy = RetentionPolicy(raw_days=raw_hours / 24, minute_days=1)
            apply_retention(connection, policy, HOUR_START + 3600 * raw_hours + cut_s, series_per_transaction=1)
        finally:
            connection.close()
        _counted_rows(db)
