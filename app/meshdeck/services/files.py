"""Files meshdeck writes for the user (profile YAML, history exports): complete or not at all.

    target = output_target(args.output, option="-o")      # checked before any work is done
    with open_output(target) as out:
        out.write(text)

What `-o PATH` does depends on what is at PATH, as a shell redirection would:

- nothing yet, or a regular file: the text goes to a temporary file in the same folder, is fsynced and
  renamed over it (`atomic_output`) — a crash, a full disk or Ctrl-C leaves the previous file (or none),
  never half of one; a file that was there keeps its permission bits;
- a symlink: the same, done to the file it points at (created when the link dangles); the link stays;
- a pipe or a character device (`/dev/null`, a terminal, `/dev/stdout`): written through directly —
  renaming over it would replace the device node itself (as root, `-o /dev/null` would have replaced
  /dev/null with a regular file); so is a path that is this process's own stdout or stderr;
- `-`: standard output;
- a directory, a socket, a block device: refused, naming the option.

A failure to write (a read-only folder, a full disk) is an `InputError` naming the option; a reader that
goes away (`| head`) raises BrokenPipeError for the command line to end quietly.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from meshdeck.core.errors import InputError

STDOUT = "-"
_THROUGH_KINDS = {stat.S_IFIFO: "a pipe", stat.S_IFCHR: "a character device"}
_REFUSED_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFSOCK: "a socket", stat.S_IFBLK: "a block device"}


@contextmanager
def atomic_output(path: str | Path, *, mode: int | None = None) -> Iterator[IO[str]]:
    """A text file that appears at `path` complete or not at all (temp file in the same folder, renamed);
    `mode`: its permission bits (default: the temporary file's, 0600)."""
    target = Path(path)
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed below, before the rename
        "w", encoding="utf-8", newline="", dir=target.parent or ".", prefix=f".{target.name}.", delete=False
    )
    try:
        with handle:
            yield handle
            handle.flush()
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(handle.name, target)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class OutputTarget:
    """Where an output option writes, decided once from what is at the path."""

    option: str  # "-o", "--profile-out": named in errors
    shown: str  # the path as the user gave it
    path: Path | None  # None: standard output
    atomic: bool  # True: a temporary file renamed over `path`; False: written through
    kind: str  # "a regular file", "a new file", "a pipe", "a character device", "standard output"
    mode: int | None = None  # permission bits of the regular file replaced


def output_target(text: str, *, option: str = "-o") -> OutputTarget:
    """What `option TEXT` writes to; raises InputError naming `option` for what cannot be written."""
    if text == STDOUT:
        return OutputTarget(option, text, None, atomic=False, kind="standard output")
    if not text.strip():
        raise InputError(option, f"{text!r} is not a file name")
    given = Path(text).expanduser()
    try:
        status = os.stat(given)  # follows symlinks: what a write would reach
    except FileNotFoundError:
        status = None
    except OSError as exc:  # a symlink loop, a path through a file, no permission to look
        raise InputError(option, f"{text}: {exc.strerror}") from None
    if status is None:
        real = Path(os.path.realpath(given))  # a dangling symlink: its target is created
        if not real.parent.is_dir():
            raise InputError(option, f"folder {real.parent} does not exist")
        return OutputTarget(option, text, real, atomic=True, kind="a new file")
    kind = stat.S_IFMT(status.st_mode)
    if kind in _REFUSED_KINDS:
        raise InputError(option, f"{text} is {_REFUSED_KINDS[kind]}; name a file, a pipe or a device such as /dev/null")
    if kind in _THROUGH_KINDS or _is_own_output(status):
        return OutputTarget(option, text, given, atomic=False, kind=_THROUGH_KINDS.get(kind, "standard output"))
    if kind != stat.S_IFREG:
        raise InputError(option, f"{text} is not a regular file, a pipe or a character device")
    return OutputTarget(
        option,
        text,
        Path(os.path.realpath(given)),
        atomic=True,
        kind="a regular file",
        mode=stat.S_IMODE(status.st_mode),
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
def open_output(target: OutputTarget) -> Iterator[IO[str]]:
    """A text stream for `target`; what fails to be written is an InputError naming its option."""
    try:
        if target.path is None:
            yield sys.stdout
            sys.stdout.flush()
        elif target.atomic:
            with atomic_output(target.path, mode=target.mode) as handle:
                yield handle
        else:
            with open(target.path, "w", encoding="utf-8", newline="") as handle:
                yield handle
    except BrokenPipeError:
        raise  # the reader went away: the command line ends quietly
    except OSError as exc:
        raise InputError(target.option, f"cannot write {exc.filename or target.shown}: {exc.strerror}") from None


def several_files_problem(target: OutputTarget, count: int, paths: list[Path]) -> str | None:
    """Why `count` files named after `target` (FILE-1, FILE-2, ...) cannot be written, or None."""
    if count == 1 or target.atomic:
        return None
    if target.path is None:
        return f"{target.shown!r} is not a file name: a layout of {count} instances writes {count} files"
    named = ", ".join(str(path) for path in paths)
    return f"{target.shown} is {target.kind}: a layout of {count} instances writes {count} files ({named}); name a regular file"
