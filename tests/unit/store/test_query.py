"""Range queries: the tier follows the span, points stay under max_points, open buckets are included."""

from __future__ import annotations

import sqlite3

import pytest
from meshdeck.core.errors import InputError
from meshdeck.store.database import Database
from meshdeck.store.query import choose_tier, list_series, query_range
from meshdeck.store.retention import RetentionPolicy
from meshdeck.store.writer import SampleWriter

HOUR_START = 1_764_482_400.0  # 2025-11-30 06:00:00 UTC
NOW = HOUR_START + 86400.0  # "now" for the retention policy: the data is a day old


def _feed(db: Database, seconds: int, values: dict[int, float] | None = None, *, stop: bool = False) -> None:
    """One host, one GPU, one metric (utilization_pct) at 1 Hz from HOUR_START; value = second % 100."""
    rows = [
        (second + 1, HOUR_START + second, "gpu0", "utilization_pct", (values or {}).get(second, float(second % 100)))
        for second in range(seconds)
    ]
    writer = SampleWriter(db).start()
    for start in range(0, len(rows), 5000):
        writer.submit_rows("gpu-a", rows[start : start + 5000])
    assert writer.flush(60)
    writer.stop(roll_up_open_buckets=stop)  # False: the open buckets stay open, as in a running app


POLICY = RetentionPolicy()


@pytest.mark.parametrize(
    ("span_s", "tier"),
    [(15 * 60, "raw"), (6 * 3600, "raw"), (24 * 3600, "1m"), (7 * 86400, "1m"), (60 * 86400, "1h")],
)
def test_the_tier_follows_the_span(span_s: float, tier: str) -> None:
    now = 2_000_000_000.0
    assert choose_tier(span_s, 1000, now - span_s, POLICY, now).name == tier


def test_a_range_older_than_raw_retention_reads_the_minute_tier() -> None:
    now = 2_000_000_000.0
    since = now - 10 * 86400  # raw is kept 7 days
    assert choose_tier(900, 1000, since, POLICY, now).name == "1m"
    assert choose_tier(900, 1000, now - 100 * 86400, POLICY, now).name == "1h"


def test_raw_points_are_the_samples_themselves(db: Database) -> None:
    _feed(db, 120, stop=True)
    (result,) = query_range(
        db, host="gpu-a", metric="utilization_pct", since=HOUR_START, until=HOUR_START + 60, now=NOW
    )
    assert result.tier == "raw"
    assert result.ts == tuple(HOUR_START + s for s in range(60))
    assert result.mean == tuple(float(s) for s in range(60))
    assert result.series.device == "gpu0"


def test_a_day_reads_minute_rollups_under_max_points_with_exact_aggregates(db: Database) -> None:
    _feed(db, 3 * 3600, stop=True)
    (result,) = query_range(
        db, host="gpu-a", metric="utilization_pct", since=HOUR_START, until=HOUR_START + 86400, max_points=1000, now=NOW
    )
    assert result.tier == "1m"
    assert len(result) <= 1000
    assert result.step_s == 120  # 86.4 s per point rounded up to whole minutes
    assert result.count[0] == 120
    first_two_minutes = [float(s % 100) for s in range(120)]
    assert result.minimum[0] == min(first_two_minutes)
    assert result.maximum[0] == max(first_two_minutes)
    assert result.mean[0] == pytest.approx(sum(first_two_minutes) / 120)
    assert sum(result.count) == 3 * 3600


def test_the_open_minute_and_hour_come_from_the_finer_tiers(db: Database) -> None:
    _feed(db, 3600 + 150)  # the writer is left running: minute 06:62 and hour 07 are still open
    connection = sqlite3.connect(db.path)
    open_minute = connection.execute("SELECT open_minute FROM ingest_state").fetchone()[0]
    connection.close()
    assert open_minute == int((HOUR_START + 3600 + 120) * 1000)
    (by_minute,) = query_range(db, host="gpu-a", since=HOUR_START + 3600, until=HOUR_START + 3600 + 600, tier="1m")
    assert sum(by_minute.count) == 150  # 2 closed minutes from rollup_1m + 30 s of the open one from raw
    assert by_minute.ts[-1] == HOUR_START + 3600 + 120
    (by_hour,) = query_range(db, host="gpu-a", since=HOUR_START, until=HOUR_START + 7200, tier="1h")
    assert by_hour.count == (3600, 150)


def test_series_are_listed_and_selected_by_host_device_and_metric(db: Database) -> None:
    rows = [(1, HOUR_START, f"gpu{g}", m, 1.0) for g in range(2) for m in ("power_w", "temperature_c")]
    with SampleWriter(db) as writer:
        writer.submit_rows("gpu-a", rows)
        writer.submit_rows("gpu-b", rows)
    assert len(list_series(db)) == 8
    assert [s.device for s in list_series(db, host="gpu-b", metric="power_w")] == ["gpu0", "gpu1"]
    chart = query_range(db, host="gpu-a", metric="power_w", since=HOUR_START - 10, until=HOUR_START + 10, now=NOW)
    assert [(r.series.host, r.series.device, r.count) for r in chart] == [
        ("gpu-a", "gpu0", (1,)),
        ("gpu-a", "gpu1", (1,)),
    ]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"since": 10.0, "until": 5.0}, "range"),
        ({"since": 0.0, "until": float("inf")}, "range"),
        ({"since": 0.0, "until": 5.0, "max_points": 0}, "max_points"),
        ({"since": 0.0, "until": 5.0, "tier": "5m"}, "tier"),
    ],
)
def test_bad_arguments_name_the_field(db: Database, kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InputError) as info:
        query_range(db, **kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
