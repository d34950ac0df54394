"""Worker supervision: start, watch, restart, stop, and re-adopt the processes the launcher asks for.

Each worker runs under its own keeper (keeper.py) in its own session and process group, so closing
the desktop app or restarting the agent never stops a deployment. A monitor thread polls every
`POLL_S`: it notices an exit from the keeper's exit.json (reported as a `worker` event well within
2 s), applies the restart policy (`on-failure`: up to `max` restarts, waiting backoff_s·2^n, at most
60 s), tails the log for vLLM startup and NCCL transport lines (`log` events), and feeds the scrapers
and the simulated GPUs. `stop` sends SIGTERM to the worker's process group, waits `grace_s`, then
SIGKILL. A new agent finds every worker in the state dir and re-adopts the ones still running (pid and
start time must both match, so a recycled pid is never signalled).

Locking: `_cond` guards `_records` and each record's state (state, pids, restarts, scrape, ...). It is
held only to read or change that state, never across I/O: JSON files, /proc, the log tail, starting a
keeper, fsyncs, joining a scrape thread and sending events all happen outside it. The monitor thread
snapshots what to look at under the lock, looks outside it, and applies what it saw under it again. A
record whose keeper is being started (`launching`) is left alone until the keeper runs. Events are
queued under the lock and sent in order by `_send_events` once it is released. The sampler reads
`_view`, a tuple republished under the lock at each change, and takes no lock at all, so a chatty
worker log or a slow broadcast never delays a sample.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

from .. import protocol
from ..gpu.processes import worker_ref
from ..keeper import RUN_FILE, process_start_time, write_json
from ..paths import UnsafePath, child_path, ensure_private_dir, self_command, self_env
from ..scrape import ScrapeLoop
from ..sim.engine import StandInChooser
from ..sim.spec import BadStandInPlan, SimVllmTracker, metrics_url, validate_simulate
from ..wire_processes import ProcessWorker
from ..wire_sample import WorkerSample
from .logs import read_log
from .state import WorkerRecord, exit_reason, observe, oom_kill_count, process_alive, read_json, run_file
from .tail import Event, catch_up_log, replay_log, skip_log

log = logging.getLogger(__name__)

POLL_S = 0.2
MAX_BACKOFF_S = 60.0


class Supervisor:
    def __init__(
        self,
        state_dir: str,
        emit: Callable[[str, Dict[str, Any]], None],
        stand_ins: Optional[StandInChooser] = None,
        interval_s: float = 1.0,
        free_gpu_bytes: Optional[Callable[[List[int], str], int]] = None,
    ) -> None:
        self.dir = ensure_private_dir(os.path.join(state_dir, "workers"))
        self.emit = emit
        self.stand_ins = stand_ins  # a simulated server's engine stand-ins; None on real GPUs
        self.interval_s = interval_s
        self.free_gpu_bytes = free_gpu_bytes
        self._records: Dict[str, WorkerRecord] = {}
        self._cond = threading.Condition()
        self._events: List[Event] = []  # queued under _cond, sent by _send_events outside it
        self._sending = threading.Lock()  # keeps events in order when two threads send
        self._view: Tuple[Tuple[str, Any, Any], ...] = ()  # (state, scrape, tracker) per record, for the sampler
        self._watched: Tuple[ScrapeLoop, ...] = ()  # engines this agent did not start (`serve --watch-engine`)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._monitor, name="workers", daemon=True)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self.recover()
        self._thread.start()

    def watch_engine(self, worker_id: str, url: str) -> None:
        """Scrape an engine this agent did not start (a Slurm job's) under `worker_id`, until close()."""
        loop = ScrapeLoop(worker_id, url, self.interval_s)
        loop.start()
        self._watched = (*self._watched, loop)

    def close(self) -> None:
        """Stop watching. Workers keep running; the next agent re-adopts them."""
        self._stop.set()
        watched, self._watched = self._watched, ()
        self._stop_scrapes(list(watched))
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        with self._cond:
            scrapes = [self._detach_scrape(record) for record in self._records.values()]
            keepers = [r.keeper_process for r in self._records.values() if r.keeper_process is not None]
            self._publish()
        for keeper in keepers:
            if keeper.poll() is None:
                keeper.returncode = 0  # the keeper outlives this agent on purpose; tell Popen not to warn
        self._stop_scrapes(scrapes)
        self._send_events()

    def recover(self) -> None:
        """Re-adopt the workers in the state dir (before the monitor starts: nothing else runs yet)."""
        for name in sorted(os.listdir(self.dir)):
            try:
                directory = child_path(self.dir, name)
            except UnsafePath:
                continue  # not a worker dir (the atomic writer's temporary files start with '.')
            wire = read_json(os.path.join(directory, "spec.json"))
            if wire is None:
                continue
            if isinstance(wire, dict):
                wire.pop("simulate", None)  # written by an agent from before the stand-in was chosen here
            try:
                spec = protocol.WorkerSpec.from_wire(wire)
            except protocol.ProtocolError:
                log.warning("ignoring worker dir %s with an unreadable spec", directory)
                continue
            if spec.id != name:
                # the record's id picks the dir a later start of that id replaces: it must be this one
                log.warning("ignoring worker dir %s: its spec.json is for worker %r", directory, spec.id)
                continue
            record = WorkerRecord(directory, spec, wire)
            record.load_agent_state()
            record.adopted = True
            if record.simulate is not None:
                try:
                    record.simulate = validate_simulate(
                        record.simulate, self.stand_ins.machine.count if self.stand_ins else 0
                    )
                except BadStandInPlan as exc:
                    log.warning("worker %s: its simulated GPUs are not followed (%s)", record.id, exc)
                    record.simulate = None
            self._attach_helpers(record)
            keeper = record.keeper_info()
            exit_info = record.exit_info()
            if keeper:
                record.pid, record.start_time = keeper.get("pid"), keeper.get("start_time")
                record.started_at = keeper.get("started_at")
            if exit_info is not None:
                self._finish(record, exit_info, oom_kill_count(), announce=False)
            elif keeper and process_alive(record.pid, record.start_time):
                record.state = "running"
                if record.tracker is not None:
                    record.tracker.process_started(record.pid)
                    replay_log(record)
                    long_up = time.time() - (record.started_at or 0) > 2 * record.tracker.simulate["startup_s"]
                    if long_up and not record.tracker.kv_allocated:
                        record.tracker.weights_loaded = record.tracker.kv_allocated = True  # start lines rotated away
                skip_log(record)
                self._start_scrape(record)
            elif process_alive(record.keeper_pid, record.keeper_start_time):
                record.state = "starting"
            else:
                record.state = "failed"
                record.reason = "lost: neither the worker nor its keeper is running and no exit status was written"
            with self._cond:
                self._records[record.id] = record
                self._publish()
            log.info("re-adopted worker %s (%s)", record.id, record.state)

    # -- API -------------------------------------------------------------------------------------

    def start_worker(self, wire: Any) -> Dict[str, Any]:
        spec = protocol.WorkerSpec.from_wire(wire)
        simulate = self.stand_ins.plan_for(spec.argv, dict(spec.env), spec.gpus) if self.stand_ins else None
        if spec.log is not None and not os.path.isabs(spec.log):
            raise protocol.ProtocolError(
                protocol.BAD_PARAMS, "spec.log: must be an absolute path, got %s" % protocol.excerpt(spec.log)
            )
        if spec.cwd is not None and not os.path.isdir(spec.cwd):
            raise protocol.ProtocolError(
                protocol.BAD_PARAMS, "spec.cwd: no such directory %s on this server" % protocol.excerpt(spec.cwd)
            )
        worker_id = spec.id or "w-" + uuid.uuid4().hex[:8]
        directory = child_path(self.dir, worker_id)  # the spec's id pattern already keeps it one component
        wire = dict(spec.to_wire(), id=worker_id)
        record = WorkerRecord(directory, protocol.WorkerSpec.from_wire(wire), wire)
        record.simulate = simulate
        record.launching = True  # the id is taken from here on; the monitor waits for the keeper
        self._attach_helpers(record)
        with self._cond:
            existing = self._records.get(worker_id)
            if existing is not None and existing.active:
                raise protocol.ProtocolError(
                    protocol.CONFLICT, "worker %r is %s; stop it first or pick another id" % (worker_id, existing.state)
                )
            old_scrape = self._detach_scrape(existing) if existing is not None else None
            self._records[worker_id] = record
            self._publish()
        self._stop_scrapes([old_scrape])
        try:
            shutil.rmtree(directory, ignore_errors=True)
            ensure_private_dir(directory)
            write_json(os.path.join(directory, "spec.json"), wire)
        except OSError as exc:
            self._launch_failed(record, exc)
            raise
        self._launch(record)
        self._wait_for(record, lambda r: r.state != "starting", 10.0)
        with self._cond:
            return record.to_wire()

    def stop_worker(self, worker_id: str, grace_s: float = 10.0) -> Dict[str, Any]:
        with self._cond:
            record = self._get(worker_id)
            if not record.active:
                return record.to_wire()
            record.stop_requested = True
            ended = record.state == "restarting"  # between runs: nothing to signal
            if ended:
                record.state = "stopped"
                record.reason = "stopped by request"
                record.ended_at = time.time()
                self._announce(record)
        self._save_agent_state(record)
        self._send_events()
        if not ended:
            self._wait_for(record, lambda r: r.pid is not None or not r.active, 10.0)
            self._signal_group(record, signal.SIGTERM)
            if not self._wait_for(record, lambda r: not r.active, max(0.0, grace_s)):
                self._signal_group(record, signal.SIGKILL)
                self._wait_for(record, lambda r: not r.active, 10.0)
        with self._cond:
            return record.to_wire()

    def list_workers(self) -> List[Dict[str, Any]]:
        with self._cond:
            return [record.to_wire() for record in self._records.values()]

    def logs(self, worker_id: str, offset: Optional[int], limit: Optional[int]) -> Dict[str, Any]:
        with self._cond:
            record = self._get(worker_id)
            path, state_path = record.log_path, record.logstate_path
        return read_log(path, state_path, offset, limit)

    def sample_entries(self) -> List[WorkerSample]:
        """Each running worker's latest scraped metrics. Takes no lock: the sampler never waits here."""
        entries: List[WorkerSample] = []
        for state, scrape, _tracker in self._view:
            if scrape is not None and state == "running":
                entries.extend(scrape.latest(max_age_s=max(5.0, 3 * self.interval_s)))
        for watched in self._watched:
            entries.extend(watched.latest(max_age_s=max(5.0, 3 * self.interval_s)))
        return entries

    def process_owners(self) -> Dict[int, Tuple[Optional[int], ProcessWorker]]:
        """pid -> (its recorded start time, the worker) of every worker whose process runs: what the `processes`
        answer maps GPU processes (a worker's own, or its descendants) to."""
        with self._cond:
            return {
                record.pid: (record.start_time, worker_ref(record.id, record.spec.name))
                for record in self._records.values()
                if record.pid and record.state in ("starting", "running")
            }

    def sim_activity(self) -> List[Any]:
        """What each simulated vLLM worker does to its GPUs. Takes no lock (it runs in the sampler's tick)."""
        return [
            tracker.activity(scrape.latest(max_age_s=max(5.0, 3 * self.interval_s)) if scrape else [])
            for _state, scrape, tracker in self._view
            if tracker is not None
        ]

    # -- internals -------------------------------------------------------------------------------

    def _get(self, worker_id: str) -> WorkerRecord:
        record = self._records.get(worker_id)
        if record is None:
            raise protocol.ProtocolError(protocol.NOT_FOUND, "no worker %r on this agent" % worker_id)
        return record

    def _publish(self) -> None:
        """Republish the sampler's view of the records (lock held)."""
        self._view = tuple((r.state, r.scrape, r.tracker) for r in self._records.values())

    def _announce(self, record: WorkerRecord) -> None:
        """Queue the record's `worker` event and wake its waiters (lock held)."""
        self._events.append(("worker", record.event()))
        self._publish()
        self._cond.notify_all()

    def _send_events(self) -> None:
        """Send the queued events, in order, with the lock released."""
        with self._sending:
            with self._cond:
                events, self._events = self._events, []
            for name, data in events:
                self.emit(name, data)

    def _attach_helpers(self, record: WorkerRecord) -> None:
        record.scrape_url = record.spec.metrics_url
        if record.simulate is not None:
            record.tracker = SimVllmTracker(record.id, record.simulate)
            record.scrape_url = record.scrape_url or metrics_url(record.simulate)

    def _start_scrape(self, record: WorkerRecord) -> None:
        if record.scrape_url and record.scrape is None:
            record.scrape = ScrapeLoop(record.id, record.scrape_url, self.interval_s)
            record.scrape.start()

    @staticmethod
    def _detach_scrape(record: WorkerRecord) -> Optional[ScrapeLoop]:
        """Take the record's scrape loop away (lock held); stop it with `_stop_scrapes` once released."""
        scrape, record.scrape = record.scrape, None
        return scrape

    @staticmethod
    def _stop_scrapes(scrapes: List[Optional[ScrapeLoop]]) -> None:
        """End detached scrape loops, outside the lock and without waiting: a scrape in flight may take its
        whole timeout, and what it finds is no longer read."""
        for scrape in scrapes:
            if scrape is not None:
                scrape.stop(wait=False)

    def _save_agent_state(self, record: WorkerRecord) -> None:
        """Write agent.json outside the lock; `files_lock` orders the writers (taken before _cond, never after)."""
        with record.files_lock:
            with self._cond:
                state = record.agent_state()
            record.write_agent_state(state)

    def _launch(self, record: WorkerRecord) -> None:
        """Start the keeper for a `launching` record (no lock held: the monitor leaves it alone meanwhile)."""
        try:
            record.clear_run_files()
            write_json(os.path.join(record.dir, RUN_FILE), run_file(record, self.free_gpu_bytes))
            oom_before = oom_kill_count()
            with open(os.path.join(record.dir, "keeper.err"), "ab") as errors:
                keeper = subprocess.Popen(
                    [*self_command(), "keeper", record.dir],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=errors,
                    start_new_session=True,
                    close_fds=True,
                    env=self_env(),
                )
        except OSError as exc:
            self._launch_failed(record, exc)
            raise
        keeper_start_time = process_start_time(keeper.pid)
        with self._cond:
            record.state, record.pid, record.start_time = "starting", None, None
            record.exit_code = record.signal = None
            record.reason, record.error, record.ended_at = "", None, None
            record.started_at = time.time()
            record.oom_before = oom_before
            record.keeper_process, record.keeper_pid = keeper, keeper.pid
            record.keeper_start_time = keeper_start_time
            record.launching = False
            self._announce(record)
        self._save_agent_state(record)
        self._send_events()

    def _launch_failed(self, record: WorkerRecord, exc: Exception) -> None:
        with self._cond:
            record.launching = False
            record.state, record.ended_at = "failed", time.time()
            record.reason = record.error = "could not start its keeper: %s" % exc
            self._announce(record)
        self._send_events()

    def _wait_for(self, record: WorkerRecord, condition: Callable[[WorkerRecord], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not condition(record):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, POLL_S))
            return True

    def _signal_group(self, record: WorkerRecord, signum: int) -> None:
        with self._cond:
            pid, start_time = record.pid, record.start_time
        if pid and process_alive(pid, start_time):
            try:
                os.killpg(pid, signum)
            except (ProcessLookupError, PermissionError) as exc:
                log.info("signal %s to worker group %s: %s", signum, pid, exc)

    def _finish(
        self, record: WorkerRecord, exit_info: Dict[str, Any], oom_after: Optional[int], announce: bool = True
    ) -> Optional[ScrapeLoop]:
        """Record an exit and apply the restart policy (lock held, or no monitor yet). Returns the scrape
        loop to stop once the lock is released."""
        record.exit_code = exit_info.get("exit_code")
        record.signal = exit_info.get("signal")
        record.error = exit_info.get("error")
        record.ended_at = exit_info.get("ended_at") or time.time()
        oom = record.oom_before is not None and oom_after is not None and oom_after > record.oom_before
        record.reason = record.error or exit_reason(record.exit_code, record.signal, record.stop_requested, oom)
        if record.stop_requested:
            record.state = "stopped"
        elif record.exit_code == 0:
            record.state = "exited"
        else:
            record.state = "failed"
        if record.tracker is not None:
            record.tracker.process_ended()
        scrape = self._detach_scrape(record)
        if announce:
            self._announce(record)
        policy = record.spec.restart
        if record.state == "failed" and policy.policy == "on-failure" and record.restarts < policy.max_restarts:
            record.state = "restarting"
            backoff = min(MAX_BACKOFF_S, policy.backoff_s * (2**record.restarts))
            record.restart_at = time.monotonic() + backoff
            if announce:
                self._announce(record)
        return scrape

    # -- the monitor thread ----------------------------------------------------------------------

    def _monitor(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                with self._cond:
                    records = [r for r in self._records.values() if not r.launching]
                for record in records:
                    self._poll(record)
            except Exception:
                log.exception("worker monitor failed; continuing")
            finally:
                self._send_events()

    def _poll(self, record: WorkerRecord) -> None:
        """Look at one record's files and processes without the lock, then apply what was seen under it.
        Only this thread moves a record on from starting or running, so what it saw stays true meanwhile."""
        if record.keeper_process is not None and record.keeper_process.returncode is None:
            record.keeper_process.poll()  # reaps the keeper; Popen guards its own waitpid
        with self._cond:
            state = record.state
            relaunch = state == "restarting" and time.monotonic() >= record.restart_at and not record.stop_requested
            if relaunch:
                record.restarts += 1
                record.state = "starting"  # a stop from here on waits for the new run and ends it
                record.launching = True
        if relaunch:
            self._launch(record)
        if state not in ("starting", "running"):
            return
        seen = observe(record, state)
        log_events = catch_up_log(record)  # after exit.json was read: the lines written before it
        with self._cond:
            self._events.extend(log_events)
            if seen.started is not None:
                record.pid, record.start_time = seen.started
                record.state = "running"
                if record.tracker is not None:
                    record.tracker.process_started(record.pid)
                self._start_scrape(record)
                if seen.exit_info is None:
                    self._announce(record)
            scrape = self._finish(record, seen.exit_info, seen.oom_after) if seen.exit_info is not None else None
            self._publish()
        self._stop_scrapes([scrape])
