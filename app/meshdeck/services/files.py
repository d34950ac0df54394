"""Files meshdeck writes for the user (profile YAML, history exports): complete or not at all.

    target = output_target(args.output, option="-o")      # checked before any work is done
    with open_output(target) as out:
        out.write(text)

What `-o PATH` does depends on what is at PATH, as a shell redirection would:

- nothing yet, or a regular file: the text goes to a temporary file in the same folder, is fsynced and
  renamed over it (`atomic_output`) — a crash, a full disk or Ctrl-C leaves the previous file (or none),
  never half of one; a file that was there keeps its permission bits, except that text holding a secret
  (`open_output(private=True)`: a profile with its HF_TOKEN) is always written 0600;
- a symlink: the same, done to the file it points at (created when the link dangles); the link stays.
  Only a link of the user's own is followed (store/owned_paths.py: the link and every folder on the way
  belong to the user or root): one another user planted (`/tmp/ds32.yaml -> ~/.bashrc`) is refused;
  messages name the file the bytes went to (`OutputTarget.destination`), not only the link;
- a pipe or a character device (`/dev/null`, a terminal, `/dev/stdout`): written through directly —
  renaming over it would replace the device node itself (as root, `-o /dev/null` would have replaced
  /dev/null with a regular file); so is a path that is this process's own stdout or stderr. A pipe or
  device another user owns is refused (they would read what is written);
- `-`: standard output;
- a directory, a socket, a block device: refused, naming the option.

A failure to write (a read-only folder, a full disk) is an `InputError` naming the option; a reader that
goes away (`| head`) raises BrokenPipeError for the command line to end quietly.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from meshdeck.core.errors import InputError
from meshdeck.store.owned_paths import open_parent, owner_name, resolve_owned

STDOUT = "-"
_THROUGH_KINDS = {stat.S_IFIFO: "a pipe", stat.S_IFCHR: "a character device"}
_REFUSED_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFSOCK: "a socket", stat.S_IFBLK: "a block device"}
PRIVATE_MODE = 0o600  # a file that holds a secret, and a new file until its mode is set


@contextmanager
def atomic_output(
    path: str | Path, *, mode: int | None = None, field: str = "path", resolved: bool = False
) -> Iterator[IO[str]]:
    """A text file that appears at `path` complete or not at all (temp file in the same folder, renamed);
    `mode`: its permission bits (default 0600). A symlink on the way is followed only under
    store.owned_paths' rule (refused with an InputError naming `field`); `resolved`: `path` already was.
    The folder is opened without following any link, and the rename never follows one."""
    target = Path(path) if resolved else resolve_owned(path, field=field).path
    parent = open_parent(target)
    try:
        name, handle = _temporary_file(parent, target.name)
        try:
            with handle:
                yield handle
                handle.flush()
                os.fchmod(handle.fileno(), PRIVATE_MODE if mode is None else mode)
                os.fsync(handle.fileno())
            os.replace(name, target.name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            with suppress(OSError):
                os.unlink(name, dir_fd=parent)
            raise
    finally:
        os.close(parent)


def _temporary_file(parent: int, name: str) -> tuple[str, IO[str]]:
    """A new 0600 file `.<name>.<random>` in the folder `parent`, created (never opened through a link)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        candidate = f".{name}.{secrets.token_hex(4)}"
        try:
            descriptor = os.open(candidate, flags, PRIVATE_MODE, dir_fd=parent)
        except FileExistsError:
            continue
        return candidate, open(descriptor, "w", encoding="utf-8", newline="")  # closed by the caller
    raise FileExistsError(errno.EEXIST, "no free temporary name", name)


@dataclass(frozen=True)
class OutputTarget:
    """Where an output option writes, decided once from what is at the path."""

    option: str  # "-o", "--profile-out": named in errors
    shown: str  # the path as the user gave it
    path: Path | None  # None: standard output; else where the bytes go, every symlink followed
    atomic: bool  # True: a temporary file renamed over `path`; False: written through
    kind: str  # "a regular file", "a new file", "a pipe", "a character device", "standard output"
    mode: int | None = None  # permission bits of the regular file replaced
    links: tuple[Path, ...] = ()  # the symlinks followed to reach `path`

    @property
    def destination(self) -> str:
        """Where the bytes go, for a message: the file itself, and the link the user named to reach it."""
        if self.path is None:
            return "stdout"
        through = f" (through the symlink {self.shown})" if self.links else ""
        return f"{self.path}{through}"


def output_target(text: str, *, option: str = "-o") -> OutputTarget:
    """What `option TEXT` writes to; raises InputError naming `option` for what cannot be written (a
    symlink another user could change included: store.owned_paths)."""
    if text == STDOUT:
        return OutputTarget(option, text, None, atomic=False, kind="standard output")
    if not text.strip():
        raise InputError(option, f"{text!r} is not a file name")
    try:
        resolved = resolve_owned(Path(text).expanduser(), field=option)
        real = resolved.path
        status: os.stat_result | None = os.stat(real)  # no link left to follow, but a procfs one (/dev/stdout)
    except FileNotFoundError:
        status = None
    except OSError as exc:  # a symlink loop, a path through a file, no permission to look
        raise InputError(option, f"{text}: {exc.strerror}") from None
    if status is None:
        if not real.parent.is_dir():
            raise InputError(option, f"folder {real.parent} does not exist")
        return OutputTarget(option, text, real, atomic=True, kind="a new file", links=resolved.links)
    kind = stat.S_IFMT(status.st_mode)
    if kind in _REFUSED_KINDS:
        raise InputError(option, f"{text} is {_REFUSED_KINDS[kind]}; name a file, a pipe or a device such as /dev/null")
    own = _is_own_output(status)
    if kind in _THROUGH_KINDS or own or resolved.through_proc:
        what = _THROUGH_KINDS.get(kind, "standard output" if own else "a file this process has open")
        if not own and status.st_uid not in (os.geteuid(), 0):
            raise InputError(
                option,
                f"{text} is {what} owned by {owner_name(status.st_uid)}: meshdeck writes only into pipes and "
                "devices you or root own (another user would read what is written); name another file",
            )
        return OutputTarget(option, text, real, atomic=False, kind=what, links=resolved.links)
    if kind != stat.S_IFREG:
        raise InputError(option, f"{text} is not a regular file, a pipe or a character device")
    return OutputTarget(
        option,
        text,
        real,
        atomic=True,
        kind="a regular file",
        mode=stat.S_IMODE(status.st_mode),
        links=resolved.links,
    )


def _is_own_output(status: os.stat_result) -> bool:
    """True for this process's stdout or stderr reached by a path (/dev/stdout redirected to a file):
    renaming over the file would leave the shell's redirection writing to a deleted one."""
    for stream in (sys.__stdout__, sys.__stderr__):
        try:
            own = os.fstat(stream.fileno()) if stream is not None else None
        except (OSError, ValueError):
            continue
        if own is not None and (own.st_dev, own.st_ino) == (status.st_dev, status.st_ino):
            return True
    return False


@contextmanager
def open_output(target: OutputTarget, *, private: bool = False) -> Iterator[IO[str]]:
    """A text stream for `target`; what fails to be written is an InputError naming its option.
    `private` (the text holds a secret): a file is written 0600, whatever the mode of the one replaced."""
    try:
        if target.path is None:
            yield sys.stdout
            sys.stdout.flush()
        elif target.atomic:
            mode = PRIVATE_MODE if private else target.mode
            with atomic_output(target.path, mode=mode, resolved=True) as handle:
                yield handle
        else:
            with open(target.path, "w", encoding="utf-8", newline="") as handle:
                yield handle
    except BrokenPipeError:
        raise  # the reader went away: the command line ends quietly
    except OSError as exc:
        where = target.path if target.path is not None else target.shown
        raise InputError(target.option, f"cannot write {where}: {exc.strerror}") from None


def several_files_problem(target: OutputTarget, count: int, paths: list[Path]) -> str | None:
    """Why `count` files named after `target` (FILE-1, FILE-2, ...) cannot be written, or None."""
    if count == 1 or target.atomic:
        return None
    if target.path is None:
        return f"{target.shown!r} is not a file name: a layout of {count} instances writes {count} files"
    named = ", ".join(str(path) for path in paths)
    return f"{target.shown} is {target.kind}: a layout of {count} instances writes {count} files ({named}); name a regular file"
