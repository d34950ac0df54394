"""The schema on disk: a new database and one upgraded from any older version end up with exactly the
`sqlite_master` recorded in tests/fixtures/store/sqlite_master_v<N>.json (WAL, WITHOUT ROWID, the partial
index and the column order included), and the query tables are the ones the migrations create.

A fixture is recorded once, when its migration is added, from a new database of that version, and never
edited afterwards: a released migration's DDL must keep its meaning. To record the next one, open a new
database with meshdeck and write `_disk_schema(path)` as JSON (indent 2) next to the others.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from meshdeck.store import migrations, schema
from meshdeck.store.database import open_database
from meshdeck.store.hosts import get_host

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "store"


def _disk_schema(path: Path) -> dict[str, Any]:
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")
        return {
            "user_version": connection.execute("PRAGMA user_version").fetchone()[0],
            "application_id": connection.execute("PRAGMA application_id").fetchone()[0],
            "journal_mode": connection.execute("PRAGMA journal_mode").fetchone()[0],
            "sqlite_master": [dict(zip(("type", "name", "tbl_name", "sql"), row, strict=True)) for row in rows],
        }
    finally:
        connection.close()


def _recorded(version: int) -> dict[str, Any]:
    recorded: dict[str, Any] = json.loads((FIXTURES / f"sqlite_master_v{version}.json").read_text())
    return recorded


def test_a_new_database_has_exactly_the_recorded_schema_of_the_latest_version(db_path: Path) -> None:
    open_database(db_path).close()
    assert _disk_schema(db_path) == _recorded(migrations.LATEST_VERSION)


@pytest.mark.parametrize("older", range(1, migrations.LATEST_VERSION))
def test_a_database_of_an_older_version_upgrades_to_the_same_schema_as_a_new_one(db_path: Path, older: int) -> None:
    connection = sqlite3.connect(db_path, isolation_level=None)
    try:
        assert migrations.apply_migrations(connection, target=older) == older
    finally:
        connection.close()
    open_database(db_path).close()
    assert _disk_schema(db_path) == _recorded(migrations.LATEST_VERSION)


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("sqlite_master_v*.json")), ids=lambda p: p.stem)
def test_every_recorded_version_is_still_what_its_migrations_create(tmp_path: Path, fixture: Path) -> None:
    recorded = json.loads(fixture.read_text())
    path = tmp_path / "at-version.db"
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
        migrations.apply_migrations(connection, target=recorded["user_version"])
    finally:
        connection.close()
    assert _disk_schema(path) == recorded


def test_the_query_tables_have_the_columns_keys_and_defaults_the_migrations_give(db_path: Path) -> None:
    assert [c.name for c in schema.ingest_state.columns][-2:] == ["seq_epoch", "raw_rows"]  # migrations 4 and 5
    assert [c.name for c in schema.hosts.columns][-3:] == ["prometheus", "scheduler", "node_port"]  # migrations 6, 7
    assert schema.hosts.c.prometheus.nullable
    assert [c.name for c in schema.samples.primary_key] == ["series_id", "ts"]
    assert not schema.series.c.labels.nullable and schema.series.c.labels.server_default is not None
    assert {fk.target_fullname for fk in schema.deployment_nodes.foreign_keys} == {"deployments.id"}
    open_database(db_path).close()
    connection = sqlite3.connect(db_path)
    try:
        on_disk = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        connection.close()
    assert set(schema.metadata.tables) == on_disk


def test_an_upgrade_to_version_5_counts_each_hosts_raw_rows(db_path: Path) -> None:
    connection = sqlite3.connect(db_path, isolation_level=None)
    try:
        migrations.apply_migrations(connection, target=4)
        connection.executemany(
            "INSERT INTO series (id, host, device, metric) VALUES (?, ?, 'gpu0', ?)",
            [(1, "gpu-a", "power_w"), (2, "gpu-a", "temperature_c"), (3, "gpu-b", "power_w")],
        )
        connection.executemany(
            "INSERT INTO samples (series_id, ts, value) VALUES (?, ?, 1.0)",
            [(series_id, ts) for series_id, count in ((1, 5), (2, 4), (3, 2)) for ts in range(count)],
        )
        connection.executemany(
            "INSERT INTO ingest_state (host, last_seq, last_ts, updated_at) VALUES (?, 1, 1, 0)",
            [("gpu-a",), ("gpu-b",), ("gpu-c",)],
        )
    finally:
        connection.close()
    open_database(db_path).close()
    connection = sqlite3.connect(db_path)
    try:
        counted = dict(connection.execute("SELECT host, raw_rows FROM ingest_state").fetchall())
    finally:
        connection.close()
    assert counted == {"gpu-a": 9, "gpu-b": 2, "gpu-c": 0}


def test_hosts_stored_before_version_6_read_back_with_no_exporter(db_path: Path) -> None:
    connection = sqlite3.connect(db_path, isolation_level=None)
    try:
        migrations.apply_migrations(connection, target=5)
        connection.execute(
            "INSERT INTO hosts (name, target, port, simulate, added_at) VALUES ('gpu-a', 'ops@10.0.0.1', 2222, NULL, 1.5)"
        )
    finally:
        connection.close()
    with open_database(db_path) as db:
        record = get_host(db, "gpu-a")
    assert (record.target, record.port, record.prometheus, record.added_at) == ("ops@10.0.0.1", 2222, None, 1.5)
