"""Retention: each tier kept as long as configured; raw deleted only after its rollups are final."""

from __future__ import annotations

import sqlite3
import time

import pytest
from meshdeck.core.errors import InputError
from meshdeck.store.database import Database
from meshdeck.store.retention import DAY_S, RetentionPolicy, apply_retention, load_policy, save_policy
from meshdeck.store.writer import SampleWriter, WriterSettings

HOUR_START = 1_764_482_400.0


def _count(db: Database, table: str) -> int:
    connection = sqlite3.connect(db.path)
    try:
        return int(connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        connection.close()


def _rows(seconds: int, start: float = HOUR_START) -> list[tuple[int, float, str, str, float]]:
    return [(s + 1, start + s, "gpu0", "power_w", 300.0 + s % 7) for s in range(seconds)]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"raw_days": -1}, "retention.raw_days"),
        ({"raw_days": 0.01}, "retention.raw_days"),
        ({"raw_days": "7"}, "retention.raw_days"),
        ({"raw_days": True}, "retention.raw_days"),
        ({"minute_days": float("nan")}, "retention.minute_days"),
        ({"raw_days": 100, "minute_days": 90}, "retention.raw_days"),
        ({"minute_days": None, "hour_days": 365}, "retention.minute_days"),
    ],
)
def test_a_bad_policy_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InputError) as info:
        RetentionPolicy(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


def test_the_policy_defaults_to_7_days_raw_90_days_minutes_hours_forever_and_is_saved(db: Database) -> None:
    assert load_policy(db) == RetentionPolicy(raw_days=7, minute_days=90, hour_days=None)
    save_policy(db, RetentionPolicy(raw_days=2, minute_days=30, hour_days=3650))
    save_policy(db, RetentionPolicy(raw_days=3, minute_days=30, hour_days=3650))
    assert load_policy(db) == RetentionPolicy(raw_days=3, minute_days=30, hour_days=3650)


def test_apply_deletes_each_tier_past_its_age_only(db: Database) -> None:
    with SampleWriter(db) as writer:
        writer.submit_rows("gpu-a", _rows(7200))
    assert (_count(db, "samples"), _count(db, "rollup_1m"), _count(db, "rollup_1h")) == (7200, 120, 2)
    connection = db.raw_connection()
    try:
        policy = RetentionPolicy(raw_days=1, minute_days=2, hour_days=None)
        # "now" is 1 day and 30 minutes after the first hour: raw of the first 30 minutes is past 1 day
        result = apply_retention(connection, policy, HOUR_START + DAY_S + 1800, series_per_transaction=1)
    finally:
        connection.close()
    assert result.samples == 1800 and result.rollup_1m == 0 and result.rollup_1h == 0
    assert _count(db, "samples") == 7200 - 1800
    assert _count(db, "rollup_1m") == 120


def test_the_writer_rolls_up_an_idle_hosts_open_buckets_before_deleting_its_raw_samples(db: Database) -> None:
    clock = [HOUR_START + 100]
    settings = WriterSettings(retention_every_s=0.05, seal_idle_s=300)
    with SampleWriter(db, settings=settings, retention=RetentionPolicy(raw_days=1), clock=lambda: clock[0]) as w:
        w.submit_rows("gpu-a", _rows(90))  # one closed minute, one open (30 s)
        assert w.flush(30)
        assert _count(db, "rollup_1m") == 1
        clock[0] = HOUR_START + 2 * DAY_S  # two days later the host has been silent all along
        deadline = time.monotonic() + 30
        while _count(db, "samples") and time.monotonic() < deadline:
            time.sleep(0.05)
    assert _count(db, "samples") == 0
    connection = sqlite3.connect(db.path)
    counts = [row[0] for row in connection.execute("SELECT n FROM rollup_1m ORDER BY bucket")]
    connection.close()
    assert counts == [60, 30]  # the open minute was rolled up before its raw samples went
