"""One supervised worker's record and the files that let any agent (this one or the next) know it.

`<state dir>/workers/<id>/`:
    spec.json      the WorkerSpec as received (wire form)              written by the agent
    agent.json     restarts, stop requested, keeper pid + start time   written by the agent
    run.json       what the keeper executes (argv, env, cwd, log)      written by the agent
    keeper.json    worker pid + start time                             written by the keeper
    exit.json      exit code / signal                                  written by the keeper
    logstate.json  logical offset of the current log file              written by the keeper
    output.log[.N] the worker's stdout+stderr (unless spec.log names another file)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..keeper import EXIT_FILE, KEEPER_FILE, LOGSTATE_FILE, process_is_zombie, process_start_time, write_json
from ..paths import self_command, self_env
from ..protocol import WorkerSpec
from ..scrape import ScrapeLoop
from ..sim.spec import SimVllmTracker

ACTIVE_STATES = ("starting", "running", "restarting")


def read_json(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path) as handle:
            value = json.load(handle)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def process_alive(pid: Optional[int], start_time: Optional[int]) -> bool:
    """True when `pid` is running and is the same process (same start time) we recorded."""
    if not pid:
        return False
    current = process_start_time(pid)
    if current is None or process_is_zombie(pid):
        return False
    return start_time is None or current == start_time


def oom_kill_count() -> Optional[int]:
    """The kernel's OOM-kill counter for this agent's cgroup (cgroup v2 memory.events), if readable."""
    try:
        with open("/proc/self/cgroup") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            path = os.path.join("/sys/fs/cgroup", line[3:].lstrip("/"), "memory.events")
            try:
                with open(path) as handle:
                    for row in handle:
                        name, _, value = row.partition(" ")
                        if name == "oom_kill":
                            return int(value)
            except (OSError, ValueError):
                return None
    return None


def exit_reason(exit_code: Optional[int], signal_number: Optional[int], stopped: bool, oom: bool) -> str:
    if stopped:
        return "stopped by request"
    if signal_number:
        try:
            name = signal.Signals(signal_number).name
        except ValueError:
            name = "signal %d" % signal_number
        if signal_number == signal.SIGKILL and oom:
            return "killed by SIGKILL: the kernel's OOM killer fired while it ran (out of host memory)"
        if signal_number == signal.SIGKILL:
            return "killed by SIGKILL (not by meshdeck; out-of-memory kills look like this)"
        return "killed by %s" % name
    if exit_code is None:
        return "ended; exit status unknown (its keeper was gone)"
    return "exited with code %d" % exit_code


class WorkerRecord:
    """Mutable state of one worker; the supervisor guards it with its lock (the log cursor is its monitor
    thread's own)."""

    def __init__(self, directory: str, spec: WorkerSpec, wire: Dict[str, Any]) -> None:
        self.dir = directory
        self.spec = spec
        self.wire = wire
        self.id = spec.id or os.path.basename(directory)
        self.state = "starting"
        self.pid: Optional[int] = None
        self.start_time: Optional[int] = None
        self.keeper_pid: Optional[int] = None
        self.keeper_start_time: Optional[int] = None
        self.keeper_process: Optional[subprocess.Popen[bytes]] = None
        self.exit_code: Optional[int] = None
        self.signal: Optional[int] = None
        self.reason = ""
        self.error: Optional[str] = None
        self.restarts = 0
        self.stop_requested = False
        self.restart_at = 0.0
        self.started_at: Optional[float] = None
        self.ended_at: Optional[float] = None
        self.oom_before: Optional[int] = None
        self.log_cursor = 0
        self.log_partial = b""
        self.adopted = False
        self.simulate: Optional[Dict[str, Any]] = None
        self.scrape: Optional[ScrapeLoop] = None
        self.scrape_url: Optional[str] = None
        self.tracker: Optional[SimVllmTracker] = None
        self.launching = False  # its keeper is being started: the monitor leaves it alone until then
        self.files_lock = threading.Lock()  # one writer at a time for the files this agent writes here

    @property
    def log_path(self) -> str:
        return self.spec.log or os.path.join(self.dir, "output.log")

    @property
    def logstate_path(self) -> str:
        return os.path.join(self.dir, LOGSTATE_FILE)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    def agent_state(self) -> Dict[str, Any]:
        """What agent.json holds (read under the supervisor's lock, written outside it)."""
        return {
            "restarts": self.restarts,
            "stop_requested": self.stop_requested,
            "keeper_pid": self.keeper_pid,
            "keeper_start_time": self.keeper_start_time,
            "simulate": self.simulate,
        }

    def write_agent_state(self, state: Dict[str, Any]) -> None:
        """Write agent.json; the caller holds `files_lock` (two writers would share the atomic writer's
        temporary file)."""
        write_json(os.path.join(self.dir, "agent.json"), state)

    def load_agent_state(self) -> None:
        state = read_json(os.path.join(self.dir, "agent.json")) or {}
        self.restarts = int(state.get("restarts") or 0)
        self.stop_requested = bool(state.get("stop_requested"))
        self.keeper_pid = state.get("keeper_pid")
        self.keeper_start_time = state.get("keeper_start_time")
        self.simulate = state.get("simulate")

    def keeper_info(self) -> Optional[Dict[str, Any]]:
        return read_json(os.path.join(self.dir, KEEPER_FILE))

    def exit_info(self) -> Optional[Dict[str, Any]]:
        return read_json(os.path.join(self.dir, EXIT_FILE))

    def clear_run_files(self) -> None:
        for name in (KEEPER_FILE, EXIT_FILE):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.dir, name))

    def to_wire(self) -> Dict[str, Any]:
        return {
            "id": self.id,
            "name": self.spec.name,
            "state": self.state,
            "pid": self.pid,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "reason": self.reason,
            "error": self.error,
            "restarts": self.restarts,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "argv": list(self.spec.argv),
            "gpus": list(self.spec.gpus),
            "metrics_url": self.spec.metrics_url,
            "simulated": self.simulate is not None,
            "adopted": self.adopted,
            "log": self.log_path,
        }

    def event(self) -> Dict[str, Any]:
        """The `worker` event: the state fields of `to_wire` and when it was sent."""
        wire = self.to_wire()
        event = {key: wire[key] for key in ("id", "name", "state", "pid", "exit_code", "signal", "restarts", "reason")}
        event["ts"] = time.time()
        return event


def run_file(record: WorkerRecord, free_gpu_bytes: Optional[Callable[[List[int], str], int]]) -> Dict[str, Any]:
    """What run.json tells the keeper to execute. A simulated vLLM worker (one with a stand-in plan) runs
    the agent's stand-in with the same argv; `free_gpu_bytes` says how much of its simulated GPUs is free."""
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
        if free_gpu_bytes is not None:
            env["MESHDECK_SIM_GPU_FREE_BYTES"] = str(free_gpu_bytes(record.simulate["gpus"], record.id))
    return {
        "argv": argv,
        "env": env,
        "cwd": spec.cwd,
        "log": record.log_path,
        "log_max_bytes": 32 << 20,
        "log_keep": 3,
    }


NO_KEEPER = "the keeper died before starting the worker"


@dataclass(frozen=True)
class Seen:
    """One look at a starting or running worker: its exit (None while it runs), the pid its keeper started
    (when it just did), and the kernel's OOM-kill count at its exit."""

    exit_info: Optional[Dict[str, Any]]
    started: Optional[Tuple[int, Optional[int]]]
    oom_after: Optional[int]


def observe(record: WorkerRecord, state: str) -> Seen:
    """What the keeper's files and /proc say about a worker in `state` (starting or running). Reads files
    and /proc only: the supervisor calls it without its lock."""
    exit_info = record.exit_info()
    keeper = record.keeper_info() if state == "starting" else None
    started = (keeper["pid"], keeper.get("start_time")) if keeper and keeper.get("pid") else None
    keeper_alive = process_alive(record.keeper_pid, record.keeper_start_time)
    if exit_info is None and state == "starting" and started is None and not keeper_alive:
        exit_info = record.exit_info() or {"exit_code": None, "signal": None, "error": NO_KEEPER}
    elif exit_info is None and (started or state == "running") and not keeper_alive:
        pid, start_time = started or (record.pid, record.start_time)
        if not process_alive(pid, start_time):
            exit_info = record.exit_info() or {"exit_code": None, "signal": None}  # the keeper was killed too
    return Seen(exit_info, started, oom_kill_count() if exit_info is not None else None)
