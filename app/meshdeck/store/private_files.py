"""Owner-only folders and files for what meshdeck keeps: the data dir 0700, the database files 0600.

The database can hold deployment settings (a profile's env may carry a token), so no other user of the
machine may read it. SQLite creates a database file 0644 (less the umask) and its -wal / -shm files with
the database file's mode, so the file is created here first, 0600, and the mode is set explicitly (a
umask such as 0277 would otherwise leave it unwritable). Looser modes found on an existing folder or
file are tightened and logged: a database created by an older meshdeck was 0644 in a 0755 folder.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def make_private_dir(path: Path, *, tighten_existing: bool) -> None:
    """Create `path` (and its missing parents, as `mkdir -p` does) with the folder itself 0700; tighten
    an existing `path` to 0700 only when told (meshdeck's own data dir, never a folder the user named)."""
    if path.is_dir():
        if tighten_existing:
            tighten(path, PRIVATE_DIR_MODE)
        return
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    os.chmod(path, PRIVATE_DIR_MODE)


def create_private_file(path: Path) -> bool:
    """Create an empty `path` 0600; False when something is already there (another process was first)."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        return False
    try:
        os.fchmod(descriptor, PRIVATE_FILE_MODE)
    finally:
        os.close(descriptor)
    return True


def tighten(path: Path, allowed: int) -> None:
    """Remove from `path`'s mode every bit `allowed` does not have (never adds one); logged when it did.
    A file this user cannot chmod (owned by another) is logged and left: opening it is not refused."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(status.st_mode):
        return  # the mode of a link says nothing; its target is checked where it is opened
    current = stat.S_IMODE(status.st_mode)
    wanted = current & allowed
    if wanted == current:
        return
    try:
        os.chmod(path, wanted)
    except OSError as exc:
        log.warning("%s is readable by other users (mode %04o) and cannot be tightened: %s", path, current, exc)
        return
    log.warning(
        "tightened the permissions of %s from %04o to %04o: meshdeck's data is for its owner only",
        path,
        current,
        wanted,
    )
