"""What is wrong with a database file meshdeck cannot use, in one line a person can act on.

SQLite reports a folder it cannot write as "attempt to write a readonly database", a full disk as
"disk I/O error" when the -shm file cannot grow, a read-only file system as "unable to open database
file"; none of them is a damaged file. `database_problem` reads SQLite's error code and, where the code
alone does not say, the file system (free space, read-only mount, write permission) and names the
cause: each of the five below has its own sentence, and each says that what is stored was not changed
(SQLite's transactions are all or nothing; meshdeck never repairs or deletes a file it cannot use).
Errors of another kind (a constraint, a lock held too long) are not described here: they pass as raised.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
from pathlib import Path

from sqlalchemy.exc import DBAPIError

UNCHANGED = "what is stored was not changed"
_NEARLY_FULL_BYTES = 1 << 20  # less free space than this, and an I/O error is taken as a full disk


def _sqlite_error(exc: BaseException) -> tuple[sqlite3.Error, str] | None:
    """The sqlite3 error inside `exc` and its kind (SQLITE_IOERR_SHMSIZE -> SQLITE_IOERR), or None."""
    error = exc.orig if isinstance(exc, DBAPIError) else exc
    if not isinstance(error, sqlite3.Error):
        return None
    name = getattr(error, "sqlite_errorname", None) or ""
    return error, "_".join(name.split("_")[:2])


def is_disk_full(exc: BaseException, path: Path) -> bool:
    """Whether `exc` is SQLite meeting a full disk where `path` lives (SQLITE_FULL, or an I/O error or a
    file it cannot create with under 1 MiB free: the -shm file that cannot grow)."""
    found = _sqlite_error(exc)
    if found is None:
        return False
    kind = found[1]
    if kind == "SQLITE_FULL":
        return True
    return kind in ("SQLITE_IOERR", "SQLITE_CANTOPEN") and _free_bytes(path.parent) < _NEARLY_FULL_BYTES


def database_problem(exc: BaseException, path: Path) -> str | None:
    """The sentence for an error about the file or its disk, or None for any other error."""
    found = _sqlite_error(exc)
    if found is None:
        return None
    error, kind = found
    name = getattr(error, "sqlite_errorname", None) or ""
    detail = str(error)
    if kind in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):
        return damaged(path, detail)
    if kind not in ("SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM"):
        return None
    folder = path.parent
    space = _free_bytes(folder)
    if is_disk_full(exc, path):
        return (
            f"the disk holding it is full ({_size(space)} free in {folder}; SQLite: {detail}); "
            f"free some space and try again — {UNCHANGED}"
        )
    if _read_only_mount(folder):
        return f"is on a read-only file system ({folder}); remount it read-write or pass --db PATH — {UNCHANGED}"
    if not os.access(folder, os.W_OK | os.X_OK):
        return (
            f"its folder {folder} is not writable for this user, and SQLite must create {path.name}-wal and "
            f"{path.name}-shm beside the database; make the folder writable or pass --db PATH — {UNCHANGED}"
        )
    if path.exists() and not os.access(path, os.W_OK):
        mode = stat.S_IMODE(path.stat().st_mode)
        return (
            f"is read-only for this user (mode {mode:04o}): it can be read, not written; make it writable "
            f"(chmod u+w) to store anything — {UNCHANGED}"
        )
    if kind == "SQLITE_IOERR":
        return f"cannot be read or written: an I/O error ({name}: {detail}); is the disk failing? — {UNCHANGED}"
    return f"cannot be opened or written ({name}: {detail}) — {UNCHANGED}"


def file_problem(exc: OSError, path: Path) -> str:
    """The sentence for an OSError met creating the database file itself (before SQLite has it)."""
    folder = path.parent
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"cannot be created: the disk holding {folder} is full; free some space and try again"
    if exc.errno == errno.EROFS or _read_only_mount(folder):
        return f"cannot be created: {folder} is on a read-only file system; pass --db PATH to a writable folder"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"cannot be created: its folder {folder} is not writable for this user; pass --db PATH"
    return f"cannot be created ({exc.strerror})"


def damaged(path: Path, detail: str) -> str:
    return (
        f"is damaged ({detail}); meshdeck left the file untouched — keep a copy, recover what SQLite can read "
        f"with `sqlite3 {path} .recover > recovered.sql`, then move it aside or pass --db PATH to use another file"
    )


def _free_bytes(folder: Path) -> int:
    try:
        info = os.statvfs(folder)
    except OSError:
        return _NEARLY_FULL_BYTES  # cannot tell: not taken as full
    return info.f_bavail * info.f_frsize


def _read_only_mount(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _size(count: int) -> str:
    return f"{count / (1 << 20):.1f} MiB" if count >= 1 << 20 else f"{count // 1024} KiB"
