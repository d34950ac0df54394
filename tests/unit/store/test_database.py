"""open_database: creates, upgrades, refuses what it cannot use and never writes to a refused file."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
from meshdeck.core.errors import InputError
from meshdeck.store import migrations
from meshdeck.store.database import default_database_path, open_database
from meshdeck.store.hosts import HostRecord, add_host, list_hosts
from sqlalchemy import text


def _pragma(path: Path, name: str) -> object:
    connection = sqlite3.connect(path)
    try:
        return connection.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        connection.close()


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_new_file_is_created_in_wal_mode_at_the_latest_schema(db_path: Path) -> None:
    with open_database(db_path) as db:
        assert db.schema_version == migrations.LATEST_VERSION
        with db.read() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL
            assert connection.execute(text("PRAGMA busy_timeout")).scalar() > 0
    assert _pragma(db_path, "user_version") == migrations.LATEST_VERSION
    assert _pragma(db_path, "application_id") == migrations.APPLICATION_ID


def test_default_path_is_in_the_platform_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_database_path() == tmp_path / "data" / "meshdeck" / "meshdeck.db"
    with open_database(None) as db:
        assert db.path == tmp_path / "data" / "meshdeck" / "meshdeck.db"
    assert db.path.exists()


def test_reopening_keeps_the_data(db_path: Path) -> None:
    with open_database(db_path) as db:
        add_host(db, HostRecord("gpu-a", "ops@10.0.0.1"))
    with open_database(db_path) as db:
        assert [h.name for h in list_hosts(db)] == ["gpu-a"]


@pytest.mark.parametrize(
    "content",
    [
        b"name: ds32\nmodel: deepseek-ai/DeepSeek-V3.2\n",  # a profile saved at the DB path by mistake
        b"\x00" * 8192,
        b"SQLite format 2\x00" + b"\x00" * 200,
        b"SQLite format 3\x00",  # a header cut short
    ],
    ids=["yaml-text", "zeros", "wrong-magic", "truncated-header"],
)
def test_a_non_sqlite_file_is_refused_and_left_untouched(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "meshdeck.db"
    path.write_bytes(content)
    with pytest.raises(InputError, match="not an SQLite database") as info:
        open_database(path)
    assert str(path) in str(info.value)
    assert "untouched" in str(info.value)
    assert _snapshot(tmp_path) == {"meshdeck.db": content}


def _corrupt_copy(tmp_path: Path, offset: int, garbage: bytes) -> Path:
    path = tmp_path / "meshdeck.db"
    with open_database(path) as db:
        add_host(db, HostRecord("gpu-a", "ops@10.0.0.1"))
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.execute("PRAGMA journal_mode = DELETE")
    connection.close()
    data = bytearray(path.read_bytes())
    data[offset : offset + len(garbage)] = garbage
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(
    ("offset", "garbage"),
    [(100, b"\xff" * 400), (16, b"\x00\x03")],  # the schema page scrambled; an impossible page size
    ids=["schema-page", "page-size"],
)
def test_a_damaged_sqlite_file_is_refused_and_left_untouched(tmp_path: Path, offset: int, garbage: bytes) -> None:
    path = _corrupt_copy(tmp_path, offset, garbage)
    before = _snapshot(tmp_path)
    with pytest.raises(InputError, match="is damaged") as info:
        open_database(path)
    assert "untouched" in str(info.value)
    assert _snapshot(tmp_path) == before


def test_another_programs_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "browser-history.db"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE visits (url TEXT)")
    connection.commit()
    connection.close()
    before = path.read_bytes()
    with pytest.raises(InputError, match=r"another program's SQLite database \(tables: visits\)"):
        open_database(path)
    assert path.read_bytes() == before


def test_a_database_from_a_newer_meshdeck_is_refused_naming_both_versions(db_path: Path) -> None:
    open_database(db_path).close()
    connection = sqlite3.connect(db_path)
    connection.execute(f"PRAGMA user_version = {migrations.LATEST_VERSION + 5}")
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    before = db_path.read_bytes()
    with pytest.raises(InputError) as info:
        open_database(db_path)
    message = str(info.value)
    assert f"schema version {migrations.LATEST_VERSION + 5}" in message
    assert f"reads up to version {migrations.LATEST_VERSION}" in message
    assert db_path.read_bytes() == before


def test_a_database_from_an_older_meshdeck_is_upgraded_keeping_its_rows(db_path: Path) -> None:
    connection = sqlite3.connect(db_path, isolation_level=None)
    assert migrations.apply_migrations(connection, target=1) == 1
    connection.execute("INSERT INTO hosts (name, target, added_at) VALUES ('gpu-old', 'root@10.1.1.1', 1.0)")
    connection.close()
    with open_database(db_path) as db:
        assert db.schema_version == migrations.LATEST_VERSION
        assert [h.name for h in list_hosts(db)] == ["gpu-old"]
    assert _pragma(db_path, "user_version") == migrations.LATEST_VERSION


def test_a_version_2_database_keeps_its_history_through_the_upgrade(db_path: Path) -> None:
    connection = sqlite3.connect(db_path, isolation_level=None)
    assert migrations.apply_migrations(connection, target=2) == 2
    connection.execute("INSERT INTO series (id, host, device, metric) VALUES (1, 'gpu-a', 'gpu0', 'power_w')")
    connection.execute("INSERT INTO samples VALUES (1, 1764482400000, 512.5)")
    connection.close()
    with open_database(db_path) as db, db.read() as reader:
        assert reader.execute(text("SELECT value FROM samples")).scalar() == 512.5
        assert reader.execute(text("SELECT count(*) FROM profiles")).scalar() == 0


def test_a_failing_migration_step_leaves_the_previous_version_intact(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = migrations.Migration(
        migrations.LATEST_VERSION + 1, "broken", ("CREATE TABLE halfway (x INTEGER)", "THIS IS NOT SQL")
    )
    open_database(db_path).close()
    monkeypatch.setattr(migrations, "MIGRATIONS", (*migrations.MIGRATIONS, broken))
    connection = sqlite3.connect(db_path, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError):
        migrations.apply_migrations(connection, target=broken.version)
    tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    connection.close()
    assert "halfway" not in tables
    assert _pragma(db_path, "user_version") == migrations.LATEST_VERSION


def test_a_directory_at_the_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        open_database(tmp_path)


def test_a_missing_folder_is_created(tmp_path: Path) -> None:
    with open_database(tmp_path / "new" / "deeper" / "m.db") as db:
        assert db.path.exists()


def test_two_processes_creating_the_same_file_at_once_both_succeed(db_path: Path) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def opener() -> None:
        try:
            barrier.wait()
            open_database(db_path).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert _pragma(db_path, "user_version") == migrations.LATEST_VERSION


def test_a_reader_sees_a_stable_snapshot_while_the_writer_commits(db_path: Path) -> None:
    with open_database(db_path) as db:
        add_host(db, HostRecord("gpu-a", "10.0.0.1"))
        with db.read() as reader:
            assert reader.execute(text("SELECT count(*) FROM hosts")).scalar() == 1
            add_host(db, HostRecord("gpu-b", "10.0.0.2"))  # commits while the read is open
            assert reader.execute(text("SELECT count(*) FROM hosts")).scalar() == 1
        assert len(list_hosts(db)) == 2


def test_a_write_that_raises_is_rolled_back_whole(db: object) -> None:
    from meshdeck.store.database import Database

    assert isinstance(db, Database)
    with pytest.raises(RuntimeError), db.write() as connection:
        connection.execute(text("INSERT INTO hosts (name, target, added_at) VALUES ('x', 'y', 0)"))
        raise RuntimeError("fault in the middle")
    assert list_hosts(db) == []
