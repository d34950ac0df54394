"""Worker supervision: start, watch, restart, stop, and re-adopt the processes the launcher asks for.

Each worker runs under its own keeper (keeper.py) in its own session and process group, so closing
the desktop app or restarting the agent never stops a deployment. A monitor thread polls every
`POLL_S`: it notices an exit from the keeper's exit.json (reported as a `worker` event well within
2 s), applies the restart policy (`on-failure`: up to `max` restarts, waiting backoff_s·2^n, at most
60 s), tails the log for vLLM startup and NCCL transport lines (`log` events), and feeds the scrapers
and the simulated GPUs. `stop` sends SIGTERM to the worker's process group, waits `grace_s`, then
SIGKILL. A new agent finds every worker in the state dir and re-adopts the ones still running (pid and
start time must both match, so a recycled pid is never signalled).
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
from typing import Any, Callable, Dict, List, Optional

from . import protocol
from .keeper import RUN_FILE, process_start_time, write_json
from .paths import UnsafePath, child_path, ensure_private_dir, self_command, self_env
from .scrape import ScrapeLoop
from .simspec import SimVllmTracker, metrics_url, validate_simulate
from .worker_logs import read_log
from .worker_state import WorkerRecord, exit_reason, oom_kill_count, process_alive, read_json
from .worker_tail import catch_up_log, replay_log, skip_log

log = logging.getLogger(__name__)

POLL_S = 0.2
MAX_BACKOFF_S = 60.0


class Supervisor:
    def __init__(
        self,
        state_dir: str,
        emit: Callable[[str, Dict[str, Any]], None],
        simulated_gpus: Optional[int] = None,
        interval_s: float = 1.0,
        free_gpu_bytes: Optional[Callable[[List[int], str], int]] = None,
    ) -> None:
        self.dir = ensure_private_dir(os.path.join(state_dir, "workers"))
        self.emit = emit
        self.simulated_gpus = simulated_gpus
        self.interval_s = interval_s
        self.free_gpu_bytes = free_gpu_bytes
        self._records: Dict[str, WorkerRecord] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._monitor, name="workers", daemon=True)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self.recover()
        self._thread.start()

    def close(self) -> None:
        """Stop watching. Workers keep running; the next agent re-adopts them."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        with self._cond:
            for record in self._records.values():
                self._stop_scrape(record)
                if record.keeper_process is not None and record.keeper_process.poll() is None:
                    # the keeper outlives this agent on purpose; tell Popen not to warn about it
                    record.keeper_process.returncode = 0

    def recover(self) -> None:
        for name in sorted(os.listdir(self.dir)):
            try:
                directory = child_path(self.dir, name)
            except UnsafePath:
                continue  # not a worker dir (the atomic writer's temporary files start with '.')
            wire = read_json(os.path.join(directory, "spec.json"))
            if wire is None:
                continue
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
            self._attach_helpers(record)
            keeper = record.keeper_info()
            exit_info = record.exit_info()
            if keeper:
                record.pid, record.start_time = keeper.get("pid"), keeper.get("start_time")
                record.started_at = keeper.get("started_at")
            if exit_info is not None:
                self._finish(record, exit_info, announce=False)
            elif keeper and process_alive(record.pid, record.start_time):
                record.state = "running"
                if record.tracker is not None:
                    record.tracker.process_started(record.pid)
                    replay_log(record)
                    long_up = time.time() - (record.started_at or 0) > 2 * record.simulate["startup_s"]
                    if long_up and not record.tracker.kv_allocated:
                        record.tracker.weights_loaded = record.tracker.kv_allocated = True  # start lines rotated away
                skip_log(record)
                self._start_scrape(record)
            elif process_alive(record.keeper_pid, record.keeper_start_time):
                record.state = "starting"
            else:
                record.state = "failed"
                record.reason = "lost: neither the worker nor its keeper is running and no exit status was written"
            self._records[record.id] = record
            log.info("re-adopted worker %s (%s)", record.id, record.state)

    # -- API -------------------------------------------------------------------------------------

    def start_worker(self, wire: Any) -> Dict[str, Any]:
        spec = protocol.WorkerSpec.from_wire(wire)
        simulate = None
        if spec.simulate is not None:
            if self.simulated_gpus is None:
                raise protocol.ProtocolError(
                    protocol.BAD_PARAMS,
                    "spec.simulate: this agent watches real GPUs; a simulated vLLM worker needs an agent "
                    "started with --simulate (real vLLM is never replaced silently)",
                )
            simulate = validate_simulate(spec.simulate, self.simulated_gpus)
        if spec.log is not None and not os.path.isabs(spec.log):
            raise protocol.ProtocolError(
                protocol.BAD_PARAMS, "spec.log: must be an absolute path, got %s" % protocol.excerpt(spec.log)
            )
        if spec.cwd is not None and not os.path.isdir(spec.cwd):
            raise protocol.ProtocolError(
                protocol.BAD_PARAMS, "spec.cwd: no such directory %s on this server" % protocol.excerpt(spec.cwd)
            )
        worker_id = spec.id or "w-" + uuid.uuid4().hex[:8]
        with self._cond:
            existing = self._records.get(worker_id)
            if existing is not None and existing.active:
                raise protocol.ProtocolError(
                    protocol.CONFLICT, "worker %r is %s; stop it first or pick another id" % (worker_id, existing.state)
                )
            if existing is not None:
                self._stop_scrape(existing)
            directory = child_path(self.dir, worker_id)  # the spec's id pattern already keeps it one component
            shutil.rmtree(directory, ignore_errors=True)
            ensure_private_dir(directory)
            wire = dict(spec.to_wire(), id=worker_id)
            spec = protocol.WorkerSpec.from_wire(wire)
            write_json(os.path.join(directory, "spec.json"), wire)
            record = WorkerRecord(directory, spec, wire)
            record.simulate = simulate
            self._attach_helpers(record)
            self._records[worker_id] = record
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
            record.save_agent_state()
            if record.state == "restarting":
                record.state = "stopped"
                record.reason = "stopped by request"
                record.ended_at = time.time()
                self._announce(record)
                return record.to_wire()
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

    def sample_entries(self) -> List[Dict[str, Any]]:
        with self._cond:
            loops = [r.scrape for r in self._records.values() if r.scrape is not None and r.state == "running"]
        entries: List[Dict[str, Any]] = []
        for loop in loops:
            entries.extend(loop.latest(max_age_s=max(5.0, 3 * self.interval_s)))
        return entries

    def sim_activity(self) -> List[Any]:
        with self._cond:
            pairs = [(r.tracker, r.scrape) for r in self._records.values() if r.tracker is not None]
        return [
            tracker.activity(scrape.latest(max_age_s=max(5.0, 3 * self.interval_s)) if scrape else [])
            for tracker, scrape in pairs
        ]

    # -- internals -------------------------------------------------------------------------------

    def _get(self, worker_id: str) -> WorkerRecord:
        record = self._records.get(worker_id)
        if record is None:
            raise protocol.ProtocolError(protocol.NOT_FOUND, "no worker %r on this agent" % worker_id)
        return record

    def _attach_helpers(self, record: WorkerRecord) -> None:
        record.scrape_url = record.spec.metrics_url
        if record.simulate is not None:
            record.tracker = SimVllmTracker(record.id, record.simulate)
            record.scrape_url = record.scrape_url or metrics_url(record.simulate)

    def _start_scrape(self, record: WorkerRecord) -> None:
        if record.scrape_url and record.scrape is None:
            record.scrape = ScrapeLoop(record.id, record.scrape_url, self.interval_s)
            record.scrape.start()

    def _stop_scrape(self, record: WorkerRecord) -> None:
        if record.scrape is not None:
            record.scrape.stop()
            record.scrape = None

    def _run_file(self, record: WorkerRecord) -> Dict[str, Any]:
        spec = record.spec
        env = dict(spec.env)
        if spec.gpus and "CUDA_VISIBLE_DEVICES" not in env:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.gpus)
        argv = list(spec.argv)
        if record.simulate is not None:
            simulate_path = os.path.join(record.dir, "simulate.json")
            write_json(simulate_path, {"simulate": record.simulate})
            argv = [*self_command(), "simvllm", "--simulate-json", simulate_path, "--", *argv]
            env.update({k: v for k, v in self_env().items() if k == "PYTHONPATH"})
            env["PYTHONUNBUFFERED"] = "1"
            env["MESHDECK_SIMULATED"] = "1"
            if self.free_gpu_bytes is not None:
                env["MESHDECK_SIM_GPU_FREE_BYTES"] = str(self.free_gpu_bytes(record.simulate["gpus"], record.id))
        return {
            "argv": argv,
            "env": env,
            "cwd": spec.cwd,
            "log": record.log_path,
            "log_max_bytes": 32 << 20,
            "log_keep": 3,
        }

    def _launch(self, record: WorkerRecord) -> None:
        """Start the keeper for `record` (lock held)."""
        record.clear_run_files()
        write_json(os.path.join(record.dir, RUN_FILE), self._run_file(record))
        record.state, record.pid, record.start_time = "starting", None, None
        record.exit_code = record.signal = None
        record.reason, record.error, record.ended_at = "", None, None
        record.started_at = time.time()
        record.oom_before = oom_kill_count()
        with open(os.path.join(record.dir, "keeper.err"), "ab") as errors:
            record.keeper_process = subprocess.Popen(
                [*self_command(), "keeper", record.dir],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
                start_new_session=True,
                close_fds=True,
                env=self_env(),
            )
        record.keeper_pid = record.keeper_process.pid
        record.keeper_start_time = process_start_time(record.keeper_pid)
        record.save_agent_state()
        self._announce(record)

    def _announce(self, record: WorkerRecord) -> None:
        self.emit("worker", record.event())
        self._cond.notify_all()

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

    def _finish(self, record: WorkerRecord, exit_info: Dict[str, Any], announce: bool = True) -> None:
        record.exit_code = exit_info.get("exit_code")
        record.signal = exit_info.get("signal")
        record.error = exit_info.get("error")
        record.ended_at = exit_info.get("ended_at") or time.time()
        oom_after = oom_kill_count()
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
        self._stop_scrape(record)
        if record.keeper_process is not None:
            record.keeper_process.poll()
        catch_up_log(record, self.emit)
        if announce:
            self._announce(record)
        policy = record.spec.restart
        if record.state == "failed" and policy.policy == "on-failure" and record.restarts < policy.max_restarts:
            record.state = "restarting"
            backoff = min(MAX_BACKOFF_S, policy.backoff_s * (2**record.restarts))
            record.restart_at = time.monotonic() + backoff
            if announce:
                self._announce(record)

    def _monitor(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                with self._cond:
                    for record in list(self._records.values()):
                        self._poll(record)
            except Exception:
                log.exception("worker monitor failed; continuing")

    def _poll(self, record: WorkerRecord) -> None:
        if record.keeper_process is not None and record.keeper_process.returncode is None:
            record.keeper_process.poll()
        if record.state == "restarting":
            if time.monotonic() >= record.restart_at and not record.stop_requested:
                record.restarts += 1
                self._launch(record)
            return
        if record.state not in ("starting", "running"):
            return
        exit_info = record.exit_info()
        if record.state == "starting":
            keeper = record.keeper_info()
            if keeper and keeper.get("pid"):
                record.pid, record.start_time = keeper["pid"], keeper.get("start_time")
                record.state = "running"
                if record.tracker is not None:
                    record.tracker.process_started(record.pid)
                self._start_scrape(record)
                if exit_info is None:
                    self._announce(record)
            elif exit_info is None and not process_alive(record.keeper_pid, record.keeper_start_time):
                self._finish(
                    record, {"exit_code": None, "signal": None, "error": "the keeper died before starting the worker"}
                )
                return
        if exit_info is not None:
            self._finish(record, exit_info)
            return
        catch_up_log(record, self.emit)
        worker_gone = record.state == "running" and not process_alive(record.pid, record.start_time)
        keeper_gone = not process_alive(record.keeper_pid, record.keeper_start_time)
        if worker_gone and keeper_gone and record.exit_info() is None:
            self._finish(record, {"exit_code": None, "signal": None})  # the keeper was killed too
