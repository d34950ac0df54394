"""`meshdeck record`: every stored host's samples into the database, without the console.

    stop = threading.Event()                              # set by SIGINT / SIGTERM in the command
    summary = Recorder(db_path, fleet_settings=settings, say=print_line).run(stop, seconds=20)

The recorder runs the console's own services (services/console.py: the fleet of host supervisors, the
deployment registry, the history writer and its HistoryRecorder), so what it stores is exactly what the
console stores. It connects every stored host from where its stored history ends, looks for hosts added
or removed every RESCAN_S, and writes only while it holds the writer lock: it yields to a console and
resumes when the console closes (services/writer_claim.py explains why no sample is lost either way).

Stopping (the deadline, SIGINT or SIGTERM, or a console asking for the history): the fleet stops first,
so nothing more arrives, then everything the writer holds is committed, then the writer stops. The agents
keep running on the servers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from meshdeck.core.plural import counted
from meshdeck.core.text import printable
from meshdeck.remote.errors import HostKeyUnknown
from meshdeck.services.console import ConsoleServices
from meshdeck.services.events import FleetEvent, HostStateChanged
from meshdeck.services.fleet import FleetSettings
from meshdeck.services.history import resume_points
from meshdeck.services.writer_claim import POLL_S, RecorderClaim, WriterClaim
from meshdeck.store.database import open_database
from meshdeck.store.hosts import list_hosts

log = logging.getLogger(__name__)

RESCAN_S = 10.0  # how often the stored hosts are read again (a `hosts add` is recorded within this)
# A failed host (unknown key, refused login: what retrying alone cannot fix) waits for a retry; the console's
# operator clicks Retry, the recorder retries it this often (a key accepted meanwhile then works).
FAILED_RETRY_S = 300.0
FLUSH_TIMEOUT_S = 120.0  # for the last commit at a stop
SAID_STATES = ("connected", "degraded", "failed", "disconnected")  # host states worth a line
LINE_LIMIT = 400


@dataclass(frozen=True)
class RecordSummary:
    db_path: Path
    samples: int  # committed by this run (re-deliveries included)
    sessions: int  # times it recorded (1 + the times it resumed after a console)
    hosts: int  # hosts recorded in the last session


class Recorder:
    """Records until stopped; see the module doc. `say` gets one line per event worth telling an operator
    (called from the fleet's threads too: it must be thread-safe)."""

    def __init__(
        self,
        db_path: str | Path | None,
        *,
        fleet_settings: FleetSettings | None = None,
        say: Callable[[str], None] = log.info,
        poll_s: float = POLL_S,
        rescan_s: float = RESCAN_S,
        failed_retry_s: float = FAILED_RETRY_S,
    ) -> None:
        self.db_path = db_path
        self.fleet_settings = fleet_settings
        self._say = say
        self.poll_s = poll_s
        self.rescan_s = rescan_s
        self.failed_retry_s = failed_retry_s
        self._lock = threading.Lock()
        self._failed_at: dict[str, float] = {}  # host -> when it failed (monotonic), until retried

    def say(self, text: str) -> None:
        self._say(printable(text, LINE_LIMIT))

    def run(self, stop: threading.Event, seconds: float | None = None) -> RecordSummary:
        """Record until `stop` is set or `seconds` have passed; InputError when the database cannot be used
        or another recorder records it."""
        deadline = None if seconds is None else time.monotonic() + seconds
        with open_database(self.db_path) as db:  # created and migrated here; its resolved path names the locks
            db_path = db.path
        claim = RecorderClaim(db_path)
        claim.start()
        samples = sessions = hosts = 0
        try:
            while self._wait_for_writer(claim, stop, deadline):
                sessions += 1
                try:
                    yielded, committed, hosts = self._record(claim, db_path, stop, deadline)
                finally:
                    claim.give_writer()
                samples += committed
                if not yielded:
                    break
        finally:
            claim.release()
        return RecordSummary(db_path, samples, sessions, hosts)

    def _wait_for_writer(self, claim: RecorderClaim, stop: threading.Event, deadline: float | None) -> bool:
        """Take the writer lock once no console wants it; False when stopped first."""
        said = ""
        while not claim.take_writer():
            if claim.console_wants():
                line = "paused: a console records this database; recording resumes when it closes"
            else:
                holder = claim.writer_holder()
                who = f"{holder.role or 'another process'} (pid {holder.pid})" if holder else "another process"
                line = f"waiting: {who} writes this database's history"
            if line != said:
                self.say(line)
                said = line
            if _stopped(stop, deadline, self.poll_s):
                return False
        return not stop.is_set()

    def _record(
        self, claim: RecorderClaim, db_path: Path, stop: threading.Event, deadline: float | None
    ) -> tuple[bool, int, int]:
        """One session holding the writer lock: (yielded to a console, samples committed, hosts recorded)."""
        services = ConsoleServices.start(
            db_path=db_path, fleet_settings=self.fleet_settings, claim=lambda db: WriterClaim(db.path, True)
        )
        yielded = False
        try:
            unsubscribe = services.fleet.subscribe(self._tell)
            services.connect_hosts()
            hosts = services.fleet.hosts()
            if hosts:
                self.say(f"recording {counted(len(hosts), 'host')} into {db_path}: {', '.join(hosts)}")
            else:
                self.say(f"no hosts stored in {db_path} yet: add one with `meshdeck hosts add`; it is recorded then")
            next_scan = time.monotonic() + self.rescan_s
            while not _stopped(stop, deadline, self.poll_s):
                if claim.console_wants():
                    self.say("a console opened this database: committing and handing the history over to it")
                    yielded = True
                    break
                if time.monotonic() >= next_scan:
                    self._rescan(services)
                    next_scan = time.monotonic() + self.rescan_s
            hosts = services.fleet.hosts()
            services.fleet.close()  # nothing more arrives; what it delivered waits in the writer's inbox
            unsubscribe()
            if not services.writer.flush(timeout=FLUSH_TIMEOUT_S):
                self.say(f"the last commit did not finish within {FLUSH_TIMEOUT_S:.0f} s; the agents send it again")
        finally:
            services.shutdown()
        return yielded, services.writer.stats().samples, len(hosts)

    def _rescan(self, services: ConsoleServices) -> None:
        """Supervise hosts stored since the last look (from where their history ends); drop removed ones."""
        stored = {record.name: record for record in list_hosts(services.db)}
        current = set(services.fleet.hosts())
        for name in sorted(current - set(stored)):
            services.fleet.remove_host(name)
            self.say(f"{name}: removed from the stored hosts; no longer recorded")
        with self._lock:
            due = [name for name, at in self._failed_at.items() if time.monotonic() - at >= self.failed_retry_s]
            for name in due:
                del self._failed_at[name]
        for name in due:
            if name in current and name in stored and services.fleet.status(name).state == "failed":
                services.fleet.retry(name)
        added = [record for name, record in stored.items() if name not in current]
        resume = resume_points(services.db) if added else {}
        for record in added:
            point = resume.get(record.name)
            if point is None:
                services.fleet.add_record(record)
            else:
                services.fleet.add_record(record, since_seq=point.seq, since_epoch=point.epoch)
            self.say(f"{record.name}: added; recording it")

    def _tell(self, event: FleetEvent) -> None:
        if isinstance(event, HostStateChanged) and event.state in SAID_STATES:
            reason = f": {event.reason}" if event.reason else ""
            if isinstance(event.error, HostKeyUnknown):  # the recorder asks nobody: say where to accept it
                reason += f" (accept it with `meshdeck hosts probe {event.host} --accept-new`)"
            if event.state == "failed":
                reason += f"; tried again every {self.failed_retry_s / 60:.0f} min"
                with self._lock:
                    self._failed_at[event.host] = time.monotonic()
            self.say(f"{event.host}: {event.state}{reason}")


def _stopped(stop: threading.Event, deadline: float | None, poll_s: float) -> bool:
    """Wait up to `poll_s` (less near the deadline); True once stopped or past the deadline."""
    wait = poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic()))
    return stop.wait(wait) or (deadline is not None and time.monotonic() >= deadline)
