"""A time no calendar can show, already in a database (stored before the store refused such rows, or
written by another tool), is shown as out of range wherever meshdeck formats a stored time: `history
hosts`, `history export` and `profiles list` keep working instead of a traceback."""

from __future__ import annotations

import csv
import io
import json
import math
import sqlite3
from pathlib import Path

import pytest
from meshdeck.cli import main
from meshdeck.services.history import export_history, iso_time, utc_stamp
from meshdeck.store.database import open_database
from meshdeck.store.query import query_range
from meshdeck.store.writer import SampleWriter

HOUR_START = 1_764_482_400.0
FAR_FUTURE_MS = [10**15, 9 * 10**18, -(10**15)]  # ts = 1e12 s (year 33658), near int64's end, before year 1


@pytest.mark.parametrize("ts", [1e12, 9e15, -1e15, math.inf, -math.inf, math.nan, 1e308])
def test_a_time_no_calendar_can_show_is_formatted_as_out_of_range(ts: float) -> None:
    assert utc_stamp(ts) == f"out of range (ts {ts:g})"
    assert iso_time(ts) == f"out of range (ts {ts:g})"


def test_times_a_calendar_can_show_are_formatted_as_before() -> None:
    assert utc_stamp(HOUR_START) == "2025-11-30 06:00:00Z"
    assert iso_time(HOUR_START + 0.25) == "2025-11-30T06:00:00.250Z"


def _database_with_a_far_future_row(path: Path, ts_ms: int) -> None:
    with open_database(path) as db, SampleWriter(db) as writer:
        writer.submit_rows("gpu-a", [(s, HOUR_START + s, "gpu0", "temperature_c", 40.0) for s in range(1, 4)])
    connection = sqlite3.connect(path)
    with connection:
        connection.execute("INSERT INTO samples (series_id, ts, value) VALUES (1, ?, 99.0)", (ts_ms,))
        connection.execute("UPDATE ingest_state SET last_ts = ?, last_seq = 4", (ts_ms,))
        connection.execute("UPDATE series SET host = host")  # nothing else changes
    connection.close()


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("ts_ms", FAR_FUTURE_MS)
def test_history_hosts_shows_a_far_future_last_sample_as_out_of_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ts_ms: int
) -> None:
    path = tmp_path / "m.db"
    _database_with_a_far_future_row(path, ts_ms)
    code, out, err = _run(capsys, "--db", str(path), "history", "hosts")
    assert (code, err) == (0, "")
    assert out.splitlines()[1].endswith(f"out of range (ts {ts_ms / 1000:g})")
    code, out, _ = _run(capsys, "--db", str(path), "history", "hosts", "--json")
    assert code == 0 and json.loads(out)[0]["last_ts"] == ts_ms / 1000


@pytest.mark.parametrize("ts_ms", FAR_FUTURE_MS)
def test_an_export_reaching_a_far_future_row_names_its_time_out_of_range(tmp_path: Path, ts_ms: int) -> None:
    path = tmp_path / "m.db"
    _database_with_a_far_future_row(path, ts_ms)
    out = io.StringIO()
    with open_database(path) as db:
        count = export_history(db, out, host="gpu-a", since=-1e16, until=1e16)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert count == 4 and len(rows) == 4
    (far,) = [row for row in rows if row["value"] == "99.0"]
    assert far["time"] == f"out of range (ts {ts_ms / 1000:g})"


def test_an_inverted_range_of_far_times_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.db"
    _database_with_a_far_future_row(path, 10**15)
    code, out, err = _run(
        capsys, "--db", str(path), "history", "export", "--host", "gpu-a", "--since", "1e15", "--until", "1"
    )
    assert (code, out) == (2, "")
    assert err == "meshdeck: error: --until: must be after --since (out of range (ts 1e+15))\n"


def test_profiles_list_shows_a_far_future_update_time_as_out_of_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.db"
    source = tmp_path / "tiny.yaml"
    source.write_text(
        "name: tiny-torch\nmodel: tiny\nengine: torch\nhosts: [local]\ngpus_per_node: 2\nlayout: {data_parallel: 2}\n"
    )
    assert _run(capsys, "--db", str(path), "profiles", "import", str(source))[0] == 0
    connection = sqlite3.connect(path)
    with connection:
        connection.execute("UPDATE profiles SET updated_at = 1e13")
        connection.execute("UPDATE profile_versions SET created_at = 1e13")
    connection.close()
    code, out, err = _run(capsys, "--db", str(path), "profiles", "list")
    assert (code, err) == (0, "") and out.splitlines()[1].endswith("out of range (ts 1e+13)")
    code, out, err = _run(capsys, "--db", str(path), "profiles", "show", "tiny-torch", "--versions")
    assert (code, err) == (0, "") and "out of range (ts 1e+13)" in out


@pytest.mark.parametrize("tier", ["raw", "1m", "1h"])
def test_an_export_over_a_span_wider_than_any_stored_time_reads_what_is_there(tmp_path: Path, tier: str) -> None:
    path = tmp_path / "m.db"
    _database_with_a_far_future_row(path, 10**15)
    with open_database(path) as db:
        count = export_history(db, io.StringIO(), host="gpu-a", since=-1e300, until=1e300, tier=tier)
        (chart,) = query_range(db, host="gpu-a", since=-1e300, until=1e300, tier="raw", max_points=10)
        assert query_range(db, host="gpu-a", since=1e299, until=1e300)[0].count == ()
    assert count == (4 if tier == "raw" else 1)  # the far row was put in raw only, never rolled up
    assert sum(chart.count) == 4
