"""The history writer's locks (store/writer_lock.py): a held lock names its holder, is free once released or
once its holder dies (even by SIGKILL), a shared lock is seen in use, and a planted link is refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from meshdeck.core.errors import InputError
from meshdeck.store.writer_lock import LockFile, LockHolder, lock_holder, lock_in_use, writer_lock_path

HOLD = """
import sys, time
from pathlib import Path
from meshdeck.store.writer_lock import LockFile, LockHolder
assert LockFile(Path(sys.argv[1])).acquire(holder=LockHolder(1234, "meshdeck record", 5.0))
print("held", flush=True)
time.sleep(600)
"""


def test_a_held_lock_names_its_holder_and_is_free_once_released(tmp_path: Path) -> None:
    path = writer_lock_path(tmp_path / "meshdeck.db")
    assert path.name == "meshdeck.db-writer.lock"
    assert lock_holder(path) is None and not lock_in_use(path)  # no file yet: nobody, and none is created
    assert not path.exists()
    lock = LockFile(path)
    assert lock.acquire(holder=LockHolder(os.getpid(), "console", 1.0))
    assert lock_holder(path) == LockHolder(os.getpid(), "console", 1.0) and lock_in_use(path)
    assert not LockFile(path).acquire(wait_s=0.0)  # one holder at a time, in this process too
    assert path.stat().st_mode & 0o777 == 0o600
    lock.release()
    assert lock_holder(path) is None and path.read_bytes() == b""
    lock.release()  # idempotent


def test_a_lock_whose_holder_is_killed_is_free_again(tmp_path: Path) -> None:
    path = tmp_path / "m.db-writer.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert lock_holder(path) == LockHolder(1234, "meshdeck record", 5.0)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=30)
    assert lock_holder(path) is None  # the kernel let it go: no stale pid file to clean up
    assert LockFile(path).acquire(wait_s=0.0)


def test_shared_holders_are_seen_in_use_and_keep_an_exclusive_one_out(tmp_path: Path) -> None:
    path = tmp_path / "m.db-console.lock"
    first, second = LockFile(path), LockFile(path)
    assert first.acquire(shared=True) and second.acquire(shared=True)
    assert lock_in_use(path)
    first.release(shared=True)
    assert lock_in_use(path) and not LockFile(path).acquire(wait_s=0.0)
    second.release(shared=True)
    assert not lock_in_use(path)


def test_an_unreadable_note_is_a_holder_without_a_pid(tmp_path: Path) -> None:
    assert LockHolder.from_note(b"\xff not json") == LockHolder(None, "")
    assert LockHolder.from_note(b'{"pid": true, "role": 7, "since": "x"}') == LockHolder(None, "")
    assert LockHolder.from_note(b"[1]") == LockHolder(None, "")


def test_a_lock_file_planted_as_a_link_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.write_text("keep me")
    path = tmp_path / "m.db-writer.lock"
    path.symlink_to(target)
    with pytest.raises(InputError, match="symbolic link"):
        LockFile(path).acquire()
    assert target.read_text() == "keep me"
