"""The database can hold deployment settings (a profile's env with a token), so only its owner reads it:
the data dir is 0700, the database and its -wal / -shm files are 0600, whatever the umask, and looser
modes found on them are tightened (and logged). A folder the user named with --db is created 0700 but,
when it exists, left as it is. meshdeck's own known_hosts (in the same data dir) is 0600 as well."""

from __future__ import annotations

import base64
import logging
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from meshdeck.core.errors import InputError
from meshdeck.remote.hostkeys import HostKeyStore
from meshdeck.store.database import open_database
from meshdeck.store.hosts import HostRecord, add_host


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """umask 0: nothing below may lean on the umask for its privacy."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "data" / "meshdeck"


def _database_files(folder: Path) -> dict[str, int]:
    return {p.name: _mode(p) for p in sorted(folder.iterdir()) if p.name.startswith("meshdeck.db")}


def test_a_new_data_dir_is_0700_and_the_database_with_its_wal_and_shm_0600(data_dir: Path, open_umask: None) -> None:
    with open_database(None) as db:
        add_host(db, HostRecord("gpu-a", "ops@10.0.0.1"))
        files = _database_files(data_dir)  # while open: -wal and -shm exist
    assert _mode(data_dir) == 0o700
    assert files == {"meshdeck.db": 0o600, "meshdeck.db-shm": 0o600, "meshdeck.db-wal": 0o600}


def test_looser_modes_found_are_tightened_and_logged(data_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    with open_database(None) as db:
        add_host(db, HostRecord("gpu-a", "ops@10.0.0.1"))
    holder = sqlite3.connect(data_dir / "meshdeck.db")  # keeps -wal and -shm on disk, as a running console does
    try:
        holder.execute("SELECT count(*) FROM hosts").fetchone()
        for path in [data_dir, *data_dir.iterdir()]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        caplog.set_level(logging.WARNING, logger="meshdeck.store")
        with open_database(None) as db:
            add_host(db, HostRecord("gpu-b", "ops@10.0.0.2"))
            files = _database_files(data_dir)
    finally:
        holder.close()
    assert _mode(data_dir) == 0o700
    assert files == {"meshdeck.db": 0o600, "meshdeck.db-shm": 0o600, "meshdeck.db-wal": 0o600}
    tightened = [r.getMessage() for r in caplog.records if "tightened" in r.getMessage()]
    assert len(tightened) == 4
    assert any(str(data_dir) in message and "0755 to 0700" in message for message in tightened)
    assert any(str(data_dir / "meshdeck.db-wal") in message and "0644 to 0600" in message for message in tightened)


def test_a_db_folder_named_by_the_user_is_created_private_but_an_existing_one_is_left_alone(
    tmp_path: Path, open_umask: None
) -> None:
    made = tmp_path / "new" / "deeper"
    with open_database(made / "m.db"):
        pass
    assert _mode(made) == 0o700 and _mode(made / "m.db") == 0o600
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o775)
    shared.chmod(0o775)
    with open_database(shared / "m.db"):
        pass
    assert _mode(shared) == 0o775 and _mode(shared / "m.db") == 0o600


def _key() -> paramiko.PKey:
    public = ed25519.Ed25519PrivateKey.generate().public_key()
    key_type, blob = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).split()
    return paramiko.PKey.from_type_string(key_type.decode(), base64.b64decode(blob))


def test_meshdecks_known_hosts_is_0600_in_a_0700_data_dir_and_a_looser_one_is_tightened(
    data_dir: Path, open_umask: None, caplog: pytest.LogCaptureFixture
) -> None:
    own = data_dir / "known_hosts"
    HostKeyStore(own).verify("gpu-a", _key(), prompt=lambda info: True)
    assert _mode(data_dir) == 0o700 and _mode(own) == 0o600
    own.chmod(0o666)
    caplog.set_level(logging.WARNING, logger="meshdeck.remote")
    store = HostKeyStore(own)
    assert store.known_keys("gpu-a")
    assert _mode(own) == 0o600
    assert any("tightened" in r.getMessage() and str(own) in r.getMessage() for r in caplog.records)


def test_a_database_created_through_a_dangling_symlink_is_0600_in_a_0700_folder(
    tmp_path: Path, open_umask: None
) -> None:
    link = tmp_path / "meshdeck.db"
    real = tmp_path / "elsewhere" / "real.db"
    link.symlink_to(real)  # the user's own link, to a database not made yet
    with open_database(link) as db:
        add_host(db, HostRecord("gpu-a", "ops@10.0.0.1"))
        files = _database_files_named(real)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert _mode(real.parent) == 0o700
    assert files == {"real.db": 0o600, "real.db-shm": 0o600, "real.db-wal": 0o600}


def _database_files_named(db: Path) -> dict[str, int]:
    return {p.name: _mode(p) for p in sorted(db.parent.iterdir()) if p.name.startswith(db.name)}


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a link to another uid (lchown) needs root")
def test_a_database_link_another_user_planted_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    wanted = tmp_path / "alice" / "stolen.db"
    wanted.parent.mkdir()
    link = shared / "m.db"
    link.symlink_to(wanted)
    os.lchown(link, 54_321, 54_321)
    with pytest.raises(InputError) as info:
        open_database(link)
    assert info.value.field == f"database {link}" and "is a symlink owned by uid 54321" in info.value.problem
    assert not wanted.exists()
