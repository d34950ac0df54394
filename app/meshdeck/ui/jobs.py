"""Long operations off the GUI thread: one worker thread in flight per job, cancellable, with progress.

A job is a plain function `work(progress) -> result` that runs in a worker thread: it may do
network and disk I/O, reports with `progress.report(fraction, message)`, and checks
`progress.cancelled` (a threading.Event it can also hand to a service) or calls `progress.check()`.
Results, failures and progress come back as Qt signals on the GUI thread. Starting a job under a
name that is still running cancels the old one and waits for it first, so two pre-flights or two
history queries never race to fill the same view.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal

log = logging.getLogger(__name__)

STOP_WAIT_S = 10.0


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
    ended = Signal()  # after any of the three above
    _relay = Signal(str, object)

    def __init__(self, name: str, work: Callable[[Progress], Any], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self._work = work
        self.progress = Progress(self)
        self.result: Any = None
        self.error: str | None = None
        self.exception: BaseException | None = None  # what the function raised, for views that act on its type
        self.started_at = 0.0
        self._thread = threading.Thread(target=self._run, name=f"meshdeck-job-{name}", daemon=True)
        self._relay.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    def _post(self, what: str, payload: object = None) -> None:
        self._relay.emit(what, payload)

    def _deliver(self, what: str, payload: object) -> None:
        if what == "progressed":
            assert isinstance(payload, tuple)  # (fraction, message), as Progress.report posts it
            self.progressed.emit(*payload)
        elif what == "succeeded":
            self.succeeded.emit(payload)
        elif what == "failed":
            self.failed.emit(payload)
        elif what == "cancelled":
            self.cancelled.emit()
        elif what == "ended":
            self.ended.emit()

    def start(self) -> None:
        self.started_at = time.monotonic()
        self._thread.start()

    def cancel(self) -> None:
        self.progress.cancelled.set()

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


class JobRunner(QObject):
    """Starts jobs by name; at most one job per name is in flight."""

    job_started = Signal(object)  # Job
    job_ended = Signal(object)  # Job

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._jobs: dict[str, Job] = {}

    def start(self, name: str, work: Callable[[Progress], Any]) -> Job:
        """Run `work` in a worker thread. A running job of the same name is cancelled and awaited first."""
        self.stop(name)
        job = Job(name, work, self)
        job.ended.connect(lambda: self._ended(job))
        self._jobs[name] = job
        self.job_started.emit(job)
        job.start()
        return job

    def _ended(self, job: Job) -> None:
        if self._jobs.get(job.name) is job:
            del self._jobs[job.name]
        self.job_ended.emit(job)

    def running(self, name: str) -> Job | None:
        job = self._jobs.get(name)
        return job if job is not None and job.is_running() else None

    @property
    def jobs(self) -> list[Job]:
        return list(self._jobs.values())

    def stop(self, name: str, timeout: float = STOP_WAIT_S) -> bool:
        """Cancel the job of that name and wait for its thread. False if it would not stop in time."""
        job = self._jobs.get(name)
        if job is None:
            return True
        job.cancel()
        stopped = job.wait(timeout)
        if not stopped:
            log.warning("job %s did not stop within %.0f s", name, timeout)
        return stopped

    def shutdown(self, timeout: float = STOP_WAIT_S) -> bool:
        """Cancel every job and wait for all of them (at window close)."""
        for job in list(self._jobs.values()):
            job.cancel()
        deadline = time.monotonic() + timeout
        return all(job.wait(max(0.0, deadline - time.monotonic())) for job in list(self._jobs.values()))
