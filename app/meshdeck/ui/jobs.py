"""Long operations off the GUI thread: one worker thread in flight per job, cancellable, with progress.

A job is a plain function `work(progress) -> result` that runs in a worker thread: it may do
network and disk I/O, reports with `progress.report(fraction, message)`, and checks
`progress.cancelled` (a threading.Event it can also hand to a service) or calls `progress.check()`.
Results, failures and progress come back as Qt signals on the GUI thread.

The GUI thread never waits for a worker (a plan of a hostile checkpoint held it 10 s per "Plan" click when
`JobRunner.stop` joined the old worker). Starting a job under a name still in flight cancels the old one:
it says `cancelled` and `ended` at once and nothing after, while its thread finishes in the background;
the new job starts when that thread has returned, so two pre-flights or two history queries never race to
fill the same view and one worker per name runs (napari's rule) — or after STOP_WAIT_S if the old work
ignores its cancellation, so a stuck worker never blocks its name for good (it is logged).
A job whose work has no side effects (a plan) may also be let go by its Cancel button
(`abandon_on_cancel`); any other job cancels cooperatively and ends when its work has stopped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal

log = logging.getLogger(__name__)

STOP_WAIT_S = 10.0  # how long a new job waits for the old worker of its name; at close, for those not let go


class JobCancelled(Exception):
    """Raised by `Progress.check()` once the job was asked to stop."""


class Progress:
    """What a job's function gets: report progress, see whether it should stop."""

    def __init__(self, job: Job) -> None:
        self._job = job
        self.cancelled = threading.Event()

    def report(self, fraction: float | None, message: str = "") -> None:
        """`fraction` in [0, 1], or None when the amount of work is unknown."""
        value = -1.0 if fraction is None else min(max(float(fraction), 0.0), 1.0)
        self._job._post("progressed", (value, message))

    def check(self) -> None:
        if self.cancelled.is_set():
            raise JobCancelled()

    def __call__(self, message: str, fraction: float | None = None) -> None:
        """Callback form `progress(message, fraction)` for services that take one."""
        self.report(fraction, message)


class Job(QObject):
    """One run of a function in a worker thread. Its public signals are emitted on the GUI thread.

    The worker thread only emits the private `_relay` signal, queued to this object's (the GUI)
    thread, where `_deliver` emits the public ones: slots that are plain functions or lambdas
    (which PySide6 would otherwise call in the emitting thread) therefore run on the GUI thread too."""

    progressed = Signal(float, str)  # fraction (-1: unknown), message
    succeeded = Signal(object)  # the function's result
    failed = Signal(str)  # one line for the user
    cancelled = Signal()
    ended = Signal()  # after any of the three above, once; nothing follows it
    finished = Signal()  # the worker thread returned (after `ended`, or later for a job let go)
    _relay = Signal(str, object)

    def __init__(
        self,
        name: str,
        work: Callable[[Progress], Any],
        parent: QObject | None = None,
        *,
        abandon_on_cancel: bool = False,
    ) -> None:
        super().__init__(parent)
        self.name = name
        self._work = work
        self.progress = Progress(self)
        self.result: Any = None
        self.error: str | None = None
        self.exception: BaseException | None = None  # what the function raised, for views that act on its type
        self.started_at = 0.0
        self.abandon_on_cancel = abandon_on_cancel
        self.abandoned = False  # let go: its outcome is never delivered
        self.has_ended = False  # `ended` was emitted (GUI thread)
        self._thread = threading.Thread(target=self._run, name=f"meshdeck-job-{name}", daemon=True)
        self._relay.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    def _post(self, what: str, payload: object = None) -> None:
        self._relay.emit(what, payload)

    def _deliver(self, what: str, payload: object) -> None:
        if what == "finished":
            self.finished.emit()
            return
        if self.has_ended or (self.abandoned and what != "abandoned"):
            return
        if what == "abandoned":
            self.cancelled.emit()
            self.has_ended = True
            self.ended.emit()
        elif what == "progressed":
            assert isinstance(payload, tuple)  # (fraction, message), as Progress.report posts it
            self.progressed.emit(*payload)
        elif what == "succeeded":
            self.succeeded.emit(payload)
        elif what == "failed":
            self.failed.emit(payload)
        elif what == "cancelled":
            self.cancelled.emit()
        elif what == "ended":
            self.has_ended = True
            self.ended.emit()

    def start(self) -> None:
        self.started_at = time.monotonic()
        self._thread.start()

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def cancel(self) -> None:
        """Ask the work to stop. A job not started yet, or one that may be let go, ends now (`cancelled`, `ended`
        on the GUI thread); another ends when its work has stopped. Never waits."""
        self.progress.cancelled.set()
        if self.abandon_on_cancel or not self.started:
            self.abandon()

    def abandon(self) -> None:
        """Cancel and let go: `cancelled` and `ended` come next, nothing the worker sends after. Never waits."""
        self.progress.cancelled.set()
        if not self.abandoned:
            self.abandoned = True
            self._post("abandoned")

    def is_running(self) -> bool:
        return self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the worker thread ended (True) or the timeout passed (False)."""
        if self._thread.ident is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            result = self._work(self.progress)
        except JobCancelled:
            self._post("cancelled")
        except Exception as exc:  # the user sees it in the view; the log keeps the traceback
            if self.progress.cancelled.is_set():
                self._post("cancelled")
            else:
                log.warning("job %s failed", self.name, exc_info=True)
                self.exception = exc
                self.error = str(exc) or type(exc).__name__
                self._post("failed", self.error)
        else:
            if self.progress.cancelled.is_set():
                self._post("cancelled")
            else:
                self.result = result
                self._post("succeeded", result)
        self._post("ended")
        self._post("finished")


class JobRunner(QObject):
    """Starts jobs by name: at most one worker per name runs, and the GUI thread never waits for one."""

    job_started = Signal(object)  # Job
    job_ended = Signal(object)  # Job

    def __init__(self, parent: QObject | None = None, *, overtake_after_s: float = STOP_WAIT_S) -> None:
        super().__init__(parent)
        self.overtake_after_s = overtake_after_s
        self._jobs: dict[str, Job] = {}  # per name, the job the views follow (waiting or running)
        self._workers: dict[str, Job] = {}  # per name, the job whose thread runs (maybe one let go)
        self._waiting: dict[str, Job] = {}  # per name, a job started while an older worker of its name ran

    def start(self, name: str, work: Callable[[Progress], Any], *, abandon_on_cancel: bool = False) -> Job:
        """Run `work` in a worker thread. A job of the same name still in flight is let go (it ends now); the new
        one starts once that job's thread has returned. `abandon_on_cancel`: the work has no side effects, so
        cancelling the job lets its thread finish unheard instead of waiting for it to stop."""
        self.stop(name)
        job = Job(name, work, self, abandon_on_cancel=abandon_on_cancel)
        job.ended.connect(lambda: self._ended(job))
        job.finished.connect(lambda: self._finished(job))
        self._jobs[name] = job
        self.job_started.emit(job)
        if name in self._workers:
            self._waiting[name] = job
            QTimer.singleShot(round(self.overtake_after_s * 1000), self, lambda: self._overtake(job))
        else:
            self._launch(job)
        return job

    def _overtake(self, job: Job) -> None:
        """The old worker of the job's name ignored its cancellation for overtake_after_s: start anyway."""
        if self._waiting.get(job.name) is not job:
            return
        del self._waiting[job.name]
        if not job.abandoned:
            log.warning(
                "job %s: the previous one did not stop within %.0f s; starting beside it",
                job.name,
                self.overtake_after_s,
            )
            self._launch(job)

    def _launch(self, job: Job) -> None:
        self._workers[job.name] = job
        job.start()

    def _ended(self, job: Job) -> None:
        if self._jobs.get(job.name) is job:
            del self._jobs[job.name]
        self.job_ended.emit(job)

    def _finished(self, job: Job) -> None:
        if self._workers.get(job.name) is not job:
            return  # a worker overtaken by a newer one
        del self._workers[job.name]
        waiting = self._waiting.pop(job.name, None)
        if waiting is not None and not waiting.abandoned:
            self._launch(waiting)

    def running(self, name: str) -> Job | None:
        """The job of that name the views follow, while it has not ended (it may still wait for its turn)."""
        job = self._jobs.get(name)
        return job if job is not None and not job.has_ended and not job.abandoned else None

    @property
    def jobs(self) -> list[Job]:
        return list(self._jobs.values())

    def stop(self, name: str) -> None:
        """Let the job of that name go: it ends now and its thread, if any, finishes in the background."""
        job = self._jobs.get(name)
        if job is not None:
            job.abandon()

    def shutdown(self, timeout: float = STOP_WAIT_S) -> bool:
        """At window close: cancel every job, and wait (up to `timeout`) for the workers whose work has side
        effects (a profile being saved, a launch stopping what it started); a plan's is let go."""
        for job in [*self._jobs.values(), *self._workers.values(), *self._waiting.values()]:
            job.cancel()
        self._waiting.clear()
        deadline = time.monotonic() + timeout
        return all(
            job.wait(max(0.0, deadline - time.monotonic()))
            for job in list(self._workers.values())
            if not job.abandon_on_cancel
        )
