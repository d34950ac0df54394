"""What /proc says about one process: its parent, session and start time, its user, its command line.

For the `processes` answer (gpu/processes.py): NVML names the pids on a GPU, this reader names their owners.
Every read is bounded (a command line of megabytes is read up to MAX_COMMAND_CHARS and marked cut); a
process that ends between two reads is `ProcessGone`, one whose files this user may not read (another
user's under hidepid) keeps what could be read and None for the rest. The root is injectable: tests build
a small /proc tree. Stdlib only, Python 3.9.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from .wire_processes import MAX_COMMAND_CHARS, MAX_USER_CHARS, wire_text

STAT_READ_BYTES = 4096  # /proc/<pid>/stat is one line of ~300 bytes (a comm is at most 64 bytes)
STATUS_READ_BYTES = 8192  # /proc/<pid>/status is ~1.5 KB; Uid: is in its first lines
COMM_READ_BYTES = 64
CMDLINE_READ_BYTES = MAX_COMMAND_CHARS * 4  # a UTF-8 character is at most 4 bytes
MAX_CACHED_USERS = 1024
_GONE = (errno.ENOENT, errno.ESRCH)


class ProcessGone(Exception):
    """The process is not (or no longer) in /proc."""


@dataclass(frozen=True)
class ProcStat:
    ppid: int
    session: int
    start_time: int  # clock ticks since boot (field 22): with the pid, it names one process for good


def _user_name(uid: int) -> Optional[str]:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return None


class ProcReader:
    """Reads /proc under `proc_root`; `user_of(uid)` names a uid (the password database by default)."""

    def __init__(self, proc_root: str = "/proc", user_of: Optional[Callable[[int], Optional[str]]] = None) -> None:
        self.proc_root = proc_root
        self._user_of = user_of or _user_name
        self._users: Dict[int, Optional[str]] = {}

    def _read(self, pid: int, name: str, limit: int) -> bytes:
        """Up to `limit` bytes of /proc/<pid>/<name>; ProcessGone when the process is gone, OSError otherwise."""
        try:
            with open(os.path.join(self.proc_root, str(pid), name), "rb") as handle:
                return handle.read(limit)
        except OSError as exc:
            if exc.errno in _GONE:
                raise ProcessGone(pid) from None
            raise

    def stat(self, pid: int) -> ProcStat:
        """Parent, session and start time; ProcessGone when gone or unreadable (stat is world-readable)."""
        try:
            data = self._read(pid, "stat", STAT_READ_BYTES)
            fields = data[data.rindex(b")") + 2 :].split()
            return ProcStat(ppid=int(fields[1]), session=int(fields[3]), start_time=int(fields[19]))
        except (OSError, ValueError, IndexError):
            raise ProcessGone(pid) from None

    def uid(self, pid: int) -> Optional[int]:
        """The real uid (status's first Uid: field, as ps and nvitop show); None when unreadable."""
        try:
            data = self._read(pid, "status", STATUS_READ_BYTES)
        except OSError:  # not ProcessGone: that one tells the caller the process ended
            return None
        for line in data.split(b"\n"):
            if line.startswith(b"Uid:"):
                parts = line.split()
                try:
                    return int(parts[1])
                except (IndexError, ValueError):
                    return None
        return None

    def user(self, uid: Optional[int]) -> Optional[str]:
        """The name of `uid` (cached), cut to MAX_USER_CHARS; None when unknown."""
        if uid is None:
            return None
        if uid not in self._users:
            if len(self._users) >= MAX_CACHED_USERS:
                self._users.clear()
            name = self._user_of(uid)
            self._users[uid] = wire_text(name, MAX_USER_CHARS) if name else None
        return self._users[uid]

    def command(self, pid: int) -> Tuple[Optional[str], bool]:
        """(command line with its arguments joined by spaces, whether it was cut to MAX_COMMAND_CHARS). A process
        without arguments (a kernel thread, a zombie) shows its name in brackets, as ps does; (None, False)
        when neither can be read."""
        try:
            data = self._read(pid, "cmdline", CMDLINE_READ_BYTES + 1)
        except OSError:
            data = b""
        cut = len(data) > CMDLINE_READ_BYTES
        data = data[:CMDLINE_READ_BYTES].rstrip(b"\0")
        if data:
            text = data.replace(b"\0", b" ").decode("utf-8", errors="replace")
        else:
            try:
                comm = self._read(pid, "comm", COMM_READ_BYTES).rstrip(b"\n")
            except OSError:
                return None, False
            text = "[%s]" % comm.decode("utf-8", errors="replace")
        if len(text) > MAX_COMMAND_CHARS:
            return text[:MAX_COMMAND_CHARS], True
        return text, cut
