"""A database meshdeck cannot use as it is — a read-only folder, file or file system, a full disk, a damaged
page — is one line naming the file and what is wrong (never a traceback, never "is damaged" for a
folder it cannot write), and what is stored is left byte for byte as it was.

Disk full is tested twice: for real on a 4 MiB tmpfs (ENOSPC from the file system, as a full disk gives it;
mounted only where the test may mount, i.e. as root with CAP_SYS_ADMIN, unmounted afterwards, skipped
elsewhere), and everywhere with SQLite's `PRAGMA max_page_count`, which makes SQLite return the same
SQLITE_FULL without any mount. On a full disk a reading command still works (the database opens read-only,
through connections that need no -shm file); that is tested on the tmpfs and, everywhere, with the
SQLITE_FULL of an ordinary open injected. A read-only folder or file does not stop root, so as root those commands
run as `nobody`."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from meshdeck.core.errors import InputError
from meshdeck.launch.profile import load_profile
from meshdeck.services.profiles import save_profile
from meshdeck.store import database as database_module
from meshdeck.store.database import open_database
from meshdeck.store.hosts import HostRecord, add_host, list_hosts
from meshdeck.store.writer import SampleWriter, WriterSettings
from sqlalchemy import event

HOUR_START = 1_764_482_400.0


def _fill_history(path: Path, seconds: int = 2000) -> None:
    with open_database(path) as db:
        add_host(db, HostRecord("gpu-a", "ops@10.0.0.1"))
        with SampleWriter(db) as writer:
            rows = [(s, HOUR_START + s, f"gpu{g}", "power_w", 300.0 + g) for s in range(1, seconds) for g in range(8)]
            writer.submit_rows("gpu-a", rows)
    _checkpoint(path)


READ_ONLY_PROFILE = "name: tiny\nmodel: m\nhosts: [gpu-a]\ngpus_per_node: 1\n"


def _checkpoint(path: Path) -> None:
    connection = sqlite3.connect(path)  # everything in the main file: the -wal and -shm go away on close
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name.startswith("m.db")}


def _cli(argv: list[str], *, prefix: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """`python -m meshdeck ARGV` in a fresh process, started through `prefix` (see `modes_apply`)."""
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "meshdeck", *argv], capture_output=True, text=True, timeout=120
    )
    return done.returncode, done.stdout, done.stderr


_NO_OVERRIDE = "-dac_override,-dac_read_search"


@pytest.fixture
def modes_apply() -> tuple[str, ...]:
    """A prefix under which file modes bind the CLI: none for a normal user; for root (which writes
    through any mode), setpriv dropping the capabilities that let it, so a 0555 folder stops it too."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv to drop CAP_DAC_OVERRIDE")
    return ("setpriv", f"--bounding-set={_NO_OVERRIDE}", f"--inh-caps={_NO_OVERRIDE}")


def test_a_read_only_folder_is_named_as_such_not_called_damaged(tmp_path: Path, modes_apply: tuple[str, ...]) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    _fill_history(folder / "m.db", seconds=50)
    folder.chmod(0o555)
    before = _files(folder)
    try:
        for argv in (["hosts", "list"], ["history", "hosts"], ["history", "retention", "--raw-days", "3"]):
            code, out, err = _cli(["--db", str(folder / "m.db"), *argv], prefix=modes_apply)
            assert (code, out) == (2, ""), err
            assert err.count("\n") == 1 and "Traceback" not in err and "damaged" not in err
            assert err.startswith(f"meshdeck: error: database {folder / 'm.db'}: its folder {folder} is not writable")
        assert _files(folder) == before
    finally:
        folder.chmod(0o755)


def test_a_read_only_database_file_is_read_and_a_write_to_it_is_one_line(
    tmp_path: Path, modes_apply: tuple[str, ...]
) -> None:
    path = tmp_path / "m.db"
    _fill_history(path, seconds=50)
    path.chmod(0o400)
    code, out, err = _cli(["--db", str(path), "history", "hosts"], prefix=modes_apply)
    assert code == 0 and "gpu-a" in out, err
    before = path.read_bytes()
    code, out, err = _cli(["--db", str(path), "history", "retention", "--raw-days", "3"], prefix=modes_apply)
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert err.startswith(f"meshdeck: error: database {path}: is read-only for this user (mode 0400)")
    assert path.read_bytes() == before


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs at tmp_path/small, unmounted afterwards; skipped where mounting is not allowed."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0755", "meshdeck-test", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def _fill_disk(folder: Path) -> Path:
    filler = folder / "filler"
    with filler.open("wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass
    return filler


def test_on_a_full_disk_reads_work_a_write_is_one_line_and_nothing_stored_changes(small_tmpfs: Path) -> None:
    path = small_tmpfs / "m.db"
    _fill_history(path, seconds=400)
    with open_database(path) as db:
        save_profile(db, load_profile(READ_ONLY_PROFILE))
    _checkpoint(path)
    before = _files(small_tmpfs)
    filler = _fill_disk(small_tmpfs)
    for argv, shows in ((["history", "hosts"], "gpu-a"), (["profiles", "list"], "tiny"), (["hosts", "list"], "gpu-a")):
        code, out, err = _cli(["--db", str(path), *argv])  # reading needs no room: no -shm file to grow
        assert (code, err) == (0, "") and shows in out, err
    code, out, err = _cli(["--db", str(path), "history", "retention", "--raw-days", "3"])
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and "damaged" not in err and "Traceback" not in err
    assert err.startswith(f"meshdeck: error: database {path}: the disk holding it is full")
    for leftover in small_tmpfs.glob("m.db-*"):
        leftover.unlink()  # an empty -wal / -shm SQLite may have created: not stored data
    assert _files(small_tmpfs) == before
    filler.unlink()
    code, out, _ = _cli(["--db", str(path), "history", "retention", "--raw-days", "3"])
    assert code == 0


def test_a_database_opened_on_a_full_disk_reads_refuses_writes_and_writes_once_there_is_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same without a mount: SQLITE_FULL injected where an ordinary open makes its -shm file."""
    path = tmp_path / "m.db"
    _fill_history(path, seconds=50)
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorname = "SQLITE_FULL"  # type: ignore[attr-defined]

    def no_room(_path: Path) -> int:
        raise database_module._OpenFailed(full, "cannot be prepared")

    monkeypatch.setattr(database_module, "_open_and_prepare", no_room)
    with open_database(path) as db:
        assert db.read_only is not None
        assert [h.name for h in list_hosts(db)] == ["gpu-a"]
        with pytest.raises(InputError) as info:
            add_host(db, HostRecord("gpu-b", "ops@10.0.0.2"))
        assert str(info.value).startswith(f"database {path}: the disk holding it is full")
        monkeypatch.undo()  # space freed: the next write opens the file as usual
        add_host(db, HostRecord("gpu-b", "ops@10.0.0.2"))
        assert db.read_only is None and [h.name for h in list_hosts(db)] == ["gpu-a", "gpu-b"]


def test_the_writer_on_a_full_disk_keeps_its_batch_and_says_the_disk_is_full(small_tmpfs: Path) -> None:
    path = small_tmpfs / "m.db"
    _fill_history(path, seconds=100)
    with open_database(path) as db:
        writer = SampleWriter(db, settings=WriterSettings(commit_interval_s=0.05, retry_s=0.1)).start()
        try:
            filler = _fill_disk(small_tmpfs)
            rows = [(s, HOUR_START + s, f"gpu{g}", "power_w", 1.0) for s in range(100, 3000) for g in range(8)]
            writer.submit_rows("gpu-a", rows)
            assert not writer.flush(2.0)
            assert (writer.stats().last_error or "").startswith(f"database {path}: the disk holding it is full")
            assert writer.committed_seq("gpu-a") == 99
            filler.unlink()
            assert writer.flush(30)
            assert writer.committed_seq("gpu-a") == 2999
        finally:
            writer.stop()


def test_a_read_only_file_system_is_named_as_such(small_tmpfs: Path) -> None:
    path = small_tmpfs / "m.db"
    _fill_history(path, seconds=50)
    before = _files(small_tmpfs)
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    code, out, err = _cli(["--db", str(path), "history", "hosts"])
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert err.startswith(f"meshdeck: error: database {path}: is on a read-only file system")
    assert _files(small_tmpfs) == before


def test_a_database_that_cannot_grow_is_full_and_keeps_what_it_holds(tmp_path: Path) -> None:
    """SQLite's max_page_count gives the SQLITE_FULL of a full disk without a mount."""
    path = tmp_path / "m.db"
    _fill_history(path, seconds=50)
    with open_database(path) as db:
        db.engine.dispose()
        pages = sqlite3.connect(path).execute("PRAGMA page_count").fetchone()[0]
        event.listen(db.engine, "connect", lambda c, _r: c.execute(f"PRAGMA max_page_count = {pages}"))
        with pytest.raises(InputError) as info:
            for index in range(2000):
                add_host(db, HostRecord(f"gpu-{index:04d}", f"ops@10.0.{index // 250}.{index % 250}"))
        assert str(info.value).startswith(f"database {path}: the disk holding it is full")
        assert str(info.value).count("\n") == 0
        stored = [h.name for h in list_hosts(db)]
    with open_database(path) as db:
        assert [h.name for h in list_hosts(db)] == stored  # the host whose insert failed is not half there
        assert len(stored) == 1 + index


def _middle_sample_page(path: Path) -> tuple[int, int]:
    """(page number, page size) of a leaf page of the samples table in the middle of the file."""
    connection = sqlite3.connect(path)
    try:
        size = connection.execute("PRAGMA page_size").fetchone()[0]
        try:
            pages = [
                row[0]
                for row in connection.execute(
                    "SELECT pageno FROM dbstat WHERE name = 'samples' AND pagetype = 'leaf' ORDER BY pageno"
                )
            ]
        except sqlite3.OperationalError:  # SQLite built without the dbstat table: the file is mostly samples
            pages = [connection.execute("PRAGMA page_count").fetchone()[0] // 2]
    finally:
        connection.close()
    return pages[len(pages) // 2], size


def test_a_damaged_page_in_the_middle_is_one_line_and_the_file_is_left_untouched(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.db"
    _fill_history(path)
    page, size = _middle_sample_page(path)
    data = bytearray(path.read_bytes())
    data[(page - 1) * size : page * size] = b"\xa5" * size
    path.write_bytes(bytes(data))
    code, out, err = _cli(["--db", str(path), "history", "hosts"])
    assert code == 0 and "gpu-a" in out  # what does not touch the damaged page still works
    code, out, err = _cli(["--db", str(path), "history", "export", "--host", "gpu-a", "-o", str(tmp_path / "x.csv")])
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert err.startswith(f"meshdeck: error: database {path}: is damaged (database disk image is malformed)")
    assert "untouched" in err and ".recover" in err
    assert path.read_bytes() == bytes(data)
    assert not (tmp_path / "x.csv").exists()
