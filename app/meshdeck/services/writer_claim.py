"""Who writes a database's history: the console or `meshdeck record`, never both at once.

    claim = claim_for_console(db.path)        # ConsoleServices.start does this
    claim.writes                              # False: another process writes; this one stores nothing
    history_status(db.path).text()            # "history: recording by meshdeck record (pid 4242)"

The design, chosen so that no sample is lost:

- One process at a time writes history: the one holding the writer lock (store/writer_lock.py), for as
  long as its SampleWriter runs. Its lock file names it (pid, role).
- The recorder yields to a console. A console first takes the console lock (shared: "a console wants to
  write") and then waits up to CONSOLE_WAIT_S for the writer lock. A recorder looks at the console lock
  every POLL_S; finding it held, it commits what it holds, stops its fleet and writer and gives the
  writer lock up (`meshdeck record` says "paused"); it takes it again once no console holds the console
  lock, and starts over from the stored resume points.
- Every handover happens where a writer starts and reads the resume points (services/history.py): it asks
  each agent for everything after the last seq committed, and the agent's ring (2 h) delivers again what
  the previous writer had received but not committed. Nothing is acknowledged before it is durable, so
  nothing is lost; what arrives twice is stored once (samples are keyed by series and time).
- Why the recorder yields, not the console: a console that took over from a recorder mid-run would leave
  unstored the span between the recorder's last commit and the takeover (its own connections have already
  delivered that span to its charts, past the resume point), and a console's window is where an operator
  expects live numbers at once. The recorder has no window: restarting its connections costs nothing.
- A console that does not get the writer lock in time (another console writes, or a recorder did not
  yield) gives its console lock back, so that a recorder goes on recording, and writes nothing: it shows
  live samples from its own connections and the history as the other process stores it; the status bar
  says who records. Two consoles on one database are the one case where closing the writing one leaves
  history unrecorded until a writer starts again; the status bar then says so.

Locks are flock(2) locks: the kernel drops them when their holder dies (SIGKILL too), so a crashed writer
never blocks the next one.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from meshdeck.core.errors import InputError
from meshdeck.store.writer_lock import (
    LockFile,
    LockHolder,
    console_lock_path,
    lock_holder,
    lock_in_use,
    recorder_lock_path,
    writer_lock_path,
)

log = logging.getLogger(__name__)

ROLE_CONSOLE = "console"
ROLE_RECORDER = "meshdeck record"
POLL_S = 0.5  # how often a recorder looks for a console (and a paused one for the writer lock)
CONSOLE_WAIT_S = 60.0  # how long a console waits for a recorder to commit, stop and yield


@dataclass
class WriterClaim:
    """What a process holds of a database's history. `writes`: its sample writer may run; otherwise
    `holder` is who writes (None: unknown or nobody). `yielded_by`: a recorder that paused for this console."""

    db_path: Path
    writes: bool
    holder: LockHolder | None = None
    yielded_by: int | None = None
    _release: list[Callable[[], None]] = field(default_factory=list)

    def release(self) -> None:
        """Give every lock back (the writer lock last taken, first given). Idempotent."""
        while self._release:
            self._release.pop()()


def _holder(role: str) -> LockHolder:
    return LockHolder(os.getpid(), role, time.time())


def claim_for_console(db_path: Path, *, wait_s: float = CONSOLE_WAIT_S, poll_s: float = 0.05) -> WriterClaim:
    """The console's claim (see the module doc): the writer lock when free, or once a recorder has yielded
    it within `wait_s`; else a claim that does not write, naming who does."""
    writer, console = LockFile(writer_lock_path(db_path)), LockFile(console_lock_path(db_path))
    if not console.acquire(shared=True, wait_s=1.0):
        log.warning("%s: the console lock could not be taken; this console does not write history", db_path)
        return WriterClaim(db_path, False, lock_holder(writer_lock_path(db_path)))
    recorder = lock_holder(recorder_lock_path(db_path))
    deadline = time.monotonic() + wait_s
    said = False
    while not writer.acquire(holder=_holder(ROLE_CONSOLE), wait_s=0.0):
        holder = lock_holder(writer.path)
        another_console = holder is not None and holder.pid is not None and holder.role != ROLE_RECORDER
        if another_console or time.monotonic() >= deadline:
            console.release(shared=True)  # a recorder must not wait for a console that does not write
            log.info("%s: history is written by %s; this console does not write it", db_path, holder)
            return WriterClaim(db_path, False, holder)
        if not said:
            log.info(
                "%s: waiting for meshdeck record (pid %s) to hand the history over", db_path, holder and holder.pid
            )
            said = True
        time.sleep(poll_s)
    claim = WriterClaim(db_path, True, yielded_by=recorder.pid if recorder is not None else None)
    claim._release += [lambda: console.release(shared=True), writer.release]
    return claim


class RecorderClaim:
    """The recorder's side: one recorder per database (the recorder lock, held for its whole run), and the
    writer lock taken while no console wants it. Used from one thread."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self._recorder = LockFile(recorder_lock_path(db_path))
        self._writer = LockFile(writer_lock_path(db_path))

    def start(self) -> None:
        """Take the recorder lock; InputError naming the running recorder when another one has it."""
        if self._recorder.acquire(holder=_holder(ROLE_RECORDER)):
            return
        other = lock_holder(self._recorder.path)
        pid = f" (pid {other.pid})" if other is not None and other.pid else ""
        raise InputError(
            f"database {self.db_path}",
            f"meshdeck record{pid} already records it; stop that one first (one recorder per database)",
        )

    def console_wants(self) -> bool:
        """A console holds (or is about to take) the history: the recorder yields."""
        return lock_in_use(console_lock_path(self.db_path))

    def take_writer(self) -> bool:
        """The writer lock, if no console wants it and nobody holds it."""
        if self._writer.held:
            return True
        if self.console_wants():
            return False
        return self._writer.acquire(holder=_holder(ROLE_RECORDER))

    def writer_holder(self) -> LockHolder | None:
        return lock_holder(self._writer.path)

    def give_writer(self) -> None:
        self._writer.release()

    def release(self) -> None:
        self._writer.release()
        self._recorder.release()


@dataclass(frozen=True)
class HistoryStatus:
    """Who writes a database's history now, and the recorder of it (running or paused)."""

    writer: LockHolder | None
    recorder: LockHolder | None
    db_name: str = ""

    def text(self, me: int | None = None) -> str:
        """A short line for the console's status bar (`me`: this process's pid)."""
        me = os.getpid() if me is None else me
        writer, recorder = self.writer, self.recorder
        if writer is not None and writer.pid == me:
            if recorder is not None and recorder.pid is not None and recorder.pid != me:
                return f"history: recorded by this console; meshdeck record (pid {recorder.pid}) waits"
            return "history: recorded by this console"
        if writer is not None:
            who = "meshdeck record" if writer.role == ROLE_RECORDER else f"another {writer.role or 'meshdeck process'}"
            return f"history: recording by {who} (pid {writer.pid or 'unknown'})"
        if recorder is not None:
            return f"history: meshdeck record (pid {recorder.pid}) is about to record"
        return "history: not recorded (run meshdeck record)"

    def detail(self, me: int | None = None) -> str:
        """What `text` means, for its tooltip."""
        me = os.getpid() if me is None else me
        writer = self.writer
        if writer is not None and writer.pid == me:
            return (
                f"This console stores every sample in {self.db_name}. A meshdeck record of this database pauses "
                "while the console is open and resumes, from where the history ends, when it closes."
            )
        if writer is not None:
            return (
                f"Another process stores the samples in {self.db_name}; this console shows them live and reads the "
                "history it stores, without writing it."
            )
        return (
            f"No process stores samples in {self.db_name} now (the agents keep the last 2 h). Run `meshdeck record`, "
            "or `meshdeck record --install-service`, to store them without the console."
        )

    def note_for_cli(self) -> str:
        """One sentence for a command that watches hosts without storing what they send (`launch --wait`)."""
        writer, recorder = self.writer, self.recorder
        if writer is not None:
            who = "meshdeck record" if writer.role == ROLE_RECORDER else f"the {writer.role or 'meshdeck'}"
            return f"samples are recorded by {who} (pid {writer.pid or 'unknown'}) into {self.db_name}"
        if recorder is not None:
            return f"samples are recorded by meshdeck record (pid {recorder.pid}) into {self.db_name}"
        return (
            "no recorder is running: the hosts' samples are not stored (the agents keep 2 h); run `meshdeck record` "
            "(or `meshdeck record --install-service`) to store them"
        )


def history_status(db_path: Path) -> HistoryStatus:
    """Read from the lock files; never blocks, never creates a file."""
    try:
        return HistoryStatus(
            lock_holder(writer_lock_path(db_path)), lock_holder(recorder_lock_path(db_path)), db_name=str(db_path)
        )
    except InputError as exc:  # a lock file that is a link, or unreadable
        log.warning("%s", exc)
        return HistoryStatus(None, None, db_name=str(db_path))
