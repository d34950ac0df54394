"""Which symlinks meshdeck follows when it writes a file the user named (`-o FILE`, `--db PATH`): the user's own.

Another user can plant a symlink in any folder they may write: `/tmp/ds32.yaml -> /home/victim/.bashrc` turns
`meshdeck profiles export ds32 -o /tmp/ds32.yaml`, run by the victim (or by root), into a write over the
victim's `.bashrc`; a link into a folder of theirs sends a secret where they can read it. The kernel's
`fs.protected_symlinks` refuses some of that, but it may be off. So a path is resolved here, one name at a
time (as `realpath` does), and a symlink is followed only when:

- the link belongs to this user or root;
- every folder on the way (the ones before the link, the one holding it, the ones its target leads
  through, the target's own folder) belongs to this user or root;
- a link in a sticky world-writable folder (`/tmp`) belongs to this user or to the folder's owner (the
  rule `protected_symlinks` applies).

A path with no symlink in it is not restricted: naming `/shared/out.yaml` is the user's choice, and the
file is replaced by a rename, which never follows a link. A link in a folder of procfs (`/dev/stdout` ->
`/proc/self/fd/1`) points at something this process has open: it is not resolved by name.

`open_parent(path)` then opens the folder a resolved path lives in without following any link
(`O_NOFOLLOW` at every step), so a link swapped in after the check makes the write fail instead of
following it.
"""

from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from meshdeck.core.errors import InputError

MAX_LINKS = 40  # as the kernel's ELOOP limit
_PATH_FLAG = getattr(os, "O_PATH", os.O_RDONLY)  # an fd for *at() calls, without read permission on the folder


@dataclass(frozen=True)
class Resolved:
    """Where a path leads: `path` has no symlink left in it (unless `through_proc`)."""

    path: Path
    links: tuple[Path, ...]  # the symlinks followed on the way, in order
    through_proc: bool = False  # stopped at a procfs link (/proc/self/fd/N): `path` is that link


def owner_name(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _trusted(uid: int) -> bool:
    return uid in (os.geteuid(), 0)


def _proc_device() -> int | None:
    try:
        return os.stat("/proc").st_dev
    except OSError:
        return None


def resolve_owned(path: str | Path, *, field: str) -> Resolved:
    """`path` with every symlink followed under the rule above; raises InputError naming `field` for a link
    not followed (whose it is, and what to do). A name that does not exist ends the walk: the rest of the
    path is kept as written (the caller decides whether a missing file or folder is fine)."""
    given = Path(path)
    start = Path(os.getcwd()) / given if not given.is_absolute() else given  # getcwd has no link in it
    pending = list(reversed(start.parts[1:]))
    current = Path("/")
    folders: dict[Path, os.stat_result] = {}  # every folder a name was looked up in
    links: list[Path] = []
    proc = _proc_device()
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            current = current.parent
            continue
        if current not in folders:
            folders[current] = os.stat(current)
        candidate = current / name
        try:
            status = os.lstat(candidate)
        except FileNotFoundError:
            rest = [name, *reversed(pending)]
            _check_folders(folders, links, given, field)
            return Resolved(current.joinpath(*rest), tuple(links))
        if not stat.S_ISLNK(status.st_mode):
            current = candidate
            continue
        links.append(candidate)
        if len(links) > MAX_LINKS:
            raise InputError(field, f"{given}: too many levels of symbolic links")
        _check_link(candidate, status, folders[current], given, field)
        if proc is not None and folders[current].st_dev == proc:
            _check_folders(folders, links, given, field)
            return Resolved(candidate.joinpath(*reversed(pending)), tuple(links), through_proc=True)
        target = os.readlink(candidate)
        pending.extend(reversed(Path(target).parts[1:] if target.startswith("/") else Path(target).parts))
        if target.startswith("/"):
            current = Path("/")
    _check_folders(folders, links, given, field)
    return Resolved(current, tuple(links))


def _check_link(link: Path, status: os.stat_result, folder: os.stat_result, given: Path, field: str) -> None:
    why = None
    if not _trusted(status.st_uid):
        why = f"owned by {owner_name(status.st_uid)}, not by you or root"
    elif (
        folder.st_mode & stat.S_ISVTX
        and folder.st_mode & stat.S_IWOTH
        and status.st_uid not in (os.geteuid(), folder.st_uid)
    ):
        why = f"owned by {owner_name(status.st_uid)} in a sticky shared folder it does not own"
    if why is None:
        return
    what = "is a symlink" if str(link) == os.path.abspath(given) else f"leads through the symlink {link},"
    raise InputError(
        field,
        f"{given} {what} {why}: meshdeck does not follow it (another user could point it at any file of yours); "
        "remove the link or name the file itself",
    )


def _check_folders(folders: dict[Path, os.stat_result], links: list[Path], given: Path, field: str) -> None:
    if not links:
        return  # no link followed: the path is what the user named
    for folder, status in folders.items():
        if not _trusted(status.st_uid):
            raise InputError(
                field,
                f"{given}: the symlink {links[0]} leads through the folder {folder}, owned by "
                f"{owner_name(status.st_uid)}; meshdeck follows a symlink only through folders you or root own "
                "(another user could swap what it points at); name the file itself",
            )


def open_parent(path: Path) -> int:
    """A descriptor (O_PATH on Linux) of the folder holding `path`, opened one name at a time from `/`
    without following any symlink: a resolved path whose folders changed into links since is refused
    (OSError ELOOP / ENOTDIR), never followed. The caller closes it."""
    folder = Path(os.path.abspath(path.parent))
    descriptor = os.open("/", _PATH_FLAG | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in folder.parts[1:]:
            child = os.open(name, _PATH_FLAG | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=descriptor)
            os.close(descriptor)
            descriptor = child
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor
