"""Which process writes a database's history: advisory flock(2) locks in files beside the database.

    lock = LockFile(writer_lock_path(db.path))
    if lock.acquire(holder=LockHolder(os.getpid(), "meshdeck record", time.time())):
        ...                                   # write; lock.release() when done
    lock_holder(writer_lock_path(db.path))    # LockHolder(pid, role, since), or None when free

A lock is a file named after the database (`meshdeck.db-writer.lock`, `meshdeck.db-recorder.lock`,
`meshdeck.db-console.lock`), created 0600 without following a link, never deleted: deleting a lock
file lets two processes lock two different files of one name. An exclusive lock's file says who holds it
(JSON: pid, role, since) while it is held and is emptied before release. The kernel releases a lock when
its holder ends, SIGKILL included, so no lock outlives its process and there is no stale pid file to
clean up; the descriptors are not inherited by child processes (Python's default), so an agent daemon a
console starts cannot keep its lock alive after the console is gone. Who takes which lock, and why, is
services/writer_claim.py's business.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from meshdeck.core.errors import InputError

WRITER_SUFFIX = "-writer.lock"  # exclusive: the one process whose sample writer writes the history
RECORDER_SUFFIX = "-recorder.lock"  # exclusive: the one `meshdeck record` of this database
CONSOLE_SUFFIX = "-console.lock"  # shared: every console that writes (or is about to write) the history
MAX_NOTE_BYTES = 4096  # what is read of a lock file's note


def writer_lock_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + WRITER_SUFFIX)


def recorder_lock_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + RECORDER_SUFFIX)


def console_lock_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + CONSOLE_SUFFIX)


@dataclass(frozen=True)
class LockHolder:
    """Who holds an exclusive lock: `pid` None when its note could not be read (being written, or damaged)."""

    pid: int | None
    role: str
    since: float | None = None

    def note(self) -> bytes:
        return json.dumps({"pid": self.pid, "role": self.role, "since": self.since}).encode()

    @classmethod
    def from_note(cls, data: bytes) -> LockHolder:
        try:
            value = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            return cls(None, "")
        if not isinstance(value, dict):
            return cls(None, "")
        pid, role, since = value.get("pid"), value.get("role"), value.get("since")
        return cls(
            pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None,
            role[:100] if isinstance(role, str) else "",
            float(since) if isinstance(since, int | float) and math.isfinite(since) else None,
        )


def _open(path: Path, *, create: bool) -> int | None:
    """A descriptor on the lock file (created 0600 when asked), never through a link; None when it does not exist."""
    flags = os.O_RDWR if create else os.O_RDONLY
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    if create:
        flags |= os.O_CREAT
    try:
        return os.open(path, flags, 0o600)
    except FileNotFoundError:
        if create:
            raise InputError(f"lock file {path}", "its folder does not exist") from None
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(f"lock file {path}", "is a symbolic link; remove it (meshdeck makes its own)") from None
        raise InputError(f"lock file {path}", f"cannot be opened ({exc.strerror})") from None


def _try_flock(fd: int, operation: int) -> bool:
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


class LockFile:
    """One lock file, held by this object or not. Not thread-safe: one owner thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, *, shared: bool = False, holder: LockHolder | None = None, wait_s: float = 0.2) -> bool:
        """Take the lock (exclusive, or `shared`) if it is free within `wait_s`; an exclusive one's file then
        names `holder`. The short wait rides out a reader's momentary probe (`lock_holder`); True when held."""
        if self._fd is not None:
            return True
        fd = _open(self.path, create=True)
        assert fd is not None
        operation = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        deadline = time.monotonic() + wait_s
        while not _try_flock(fd, operation):
            if time.monotonic() >= deadline:
                os.close(fd)
                return False
            time.sleep(0.02)
        if not shared:
            os.ftruncate(fd, 0)
            if holder is not None:
                os.pwrite(fd, holder.note(), 0)
        self._fd = fd
        return True

    def release(self, *, shared: bool = False) -> None:
        """Give the lock back (an exclusive one's note emptied first). Idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if not shared:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _probe(path: Path, operation: int, *, read_note: bool) -> bytes | None:
    """None when the lock at `path` could be taken with `operation` now (it is let go at once); else its
    note (empty unless `read_note`)."""
    fd = _open(path, create=False)
    if fd is None:
        return None
    try:
        if _try_flock(fd, operation):
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        return os.pread(fd, MAX_NOTE_BYTES, 0) if read_note else b""
    finally:
        os.close(fd)


def lock_holder(path: Path) -> LockHolder | None:
    """Who holds the exclusive lock at `path` (this process included), or None when it is free. The probe
    holds a shared lock for a moment: `LockFile.acquire`'s short wait rides it out."""
    note = _probe(path, fcntl.LOCK_SH, read_note=True)
    return None if note is None else LockHolder.from_note(note)


def lock_in_use(path: Path) -> bool:
    """Whether anyone (this process included) holds the lock at `path`, shared or exclusive."""
    return _probe(path, fcntl.LOCK_EX, read_note=False) is not None
