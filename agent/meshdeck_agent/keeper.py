"""The keeper: a tiny process per worker that outlives the agent (like podman's conmon).

`meshdeck-agent keeper <worker dir>` reads `run.json`, starts the worker in its own session and process
group with stdout+stderr on a pipe, and then:
- writes `keeper.json` {"pid", "start_time", "keeper_pid", "started_at"} (start_time is field 22 of
  /proc/<pid>/stat, so a recycled pid is never mistaken for the worker);
- copies the pipe into the log file, rotating it at `log_max_bytes` (`<log>.1` ... `<log>.<keep>`)
  and recording the byte offset where the current file starts in `logstate.json`, so log offsets stay
  valid across rotations;
- when the worker exits, writes `exit.json` {"exit_code", "signal", "ended_at", "error"} at once (the
  agent reports it within its next poll), then ends whatever is left of the worker's process group
  (SIGTERM, then SIGKILL after `group_grace_s`) so no orphan keeps holding GPU memory.
The agent can restart or die at any time: the worker keeps running, the keeper keeps logging, and
the next agent reads these files to re-adopt it. SIGTERM to the keeper is forwarded to the group.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional

from .paths import atomic_write

RUN_FILE = "run.json"
KEEPER_FILE = "keeper.json"
EXIT_FILE = "exit.json"
LOGSTATE_FILE = "logstate.json"


def process_start_time(pid: int, proc_root: str = "/proc") -> Optional[int]:
    """Field 22 (starttime, clock ticks since boot) of /proc/<pid>/stat; None if the pid is gone."""
    try:
        with open(os.path.join(proc_root, str(pid), "stat"), "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    try:
        after_name = data[data.rindex(b")") + 2 :].split()
        return int(after_name[19])
    except (ValueError, IndexError):
        return None


def process_is_zombie(pid: int, proc_root: str = "/proc") -> bool:
    try:
        with open(os.path.join(proc_root, str(pid), "stat"), "rb") as handle:
            data = handle.read()
        return data[data.rindex(b")") + 2 : data.rindex(b")") + 3] == b"Z"
    except (OSError, ValueError):
        return False


def write_json(path: str, payload: Dict[str, Any]) -> None:
    atomic_write(path, json.dumps(payload, sort_keys=True).encode("utf-8"))


class RotatingLog:
    """Append-only log with size rotation and a logical byte offset that survives rotation."""

    def __init__(self, path: str, state_path: str, max_bytes: int, keep: int) -> None:
        self.path = path
        self.state_path = state_path
        self.max_bytes = max(1024, max_bytes)
        self.keep = max(1, keep)
        self.base = 0
        try:
            with open(state_path) as handle:
                self.base = int(json.load(handle).get("base", 0))
        except (OSError, ValueError, AttributeError):
            self.base = 0
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        self.handle = open(path, "ab")  # noqa: SIM115 - held for the object's life
        self.size = self.handle.tell()
        if not os.path.exists(state_path):
            write_json(state_path, {"base": self.base, "keep": self.keep})

    def write(self, data: bytes) -> None:
        while data:
            room = self.max_bytes - self.size
            if room <= 0:
                self.rotate()
                continue
            piece = data[:room]
            if len(data) > room:
                newline = piece.rfind(b"\n")
                if newline >= 0:
                    piece = piece[: newline + 1]  # rotate on a line boundary when one is in reach
                elif self.size > 0:
                    self.rotate()  # the next line does not fit: start it in a fresh file
                    continue
            self.handle.write(piece)
            self.handle.flush()
            self.size += len(piece)
            data = data[len(piece) :]

    def rotate(self) -> None:
        self.handle.close()
        for number in range(self.keep, 0, -1):
            older = "%s.%d" % (self.path, number)
            newer = self.path if number == 1 else "%s.%d" % (self.path, number - 1)
            if os.path.exists(newer):
                os.replace(newer, older)
        self.base += self.size
        write_json(self.state_path, {"base": self.base, "keep": self.keep})
        self.handle = open(self.path, "ab")  # noqa: SIM115 - held for the object's life
        self.size = 0

    def close(self) -> None:
        self.handle.close()


def _copy(pipe: Any, log: RotatingLog) -> None:
    while True:
        try:
            chunk = os.read(pipe.fileno(), 65536)
        except OSError:
            break
        if not chunk:
            break
        log.write(chunk)


def _end_group(pgid: int, grace_s: float) -> None:
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run_keeper(worker_dir: str) -> int:
    with open(os.path.join(worker_dir, RUN_FILE)) as handle:
        run: Dict[str, Any] = json.load(handle)
    log = RotatingLog(
        run["log"],
        os.path.join(worker_dir, LOGSTATE_FILE),
        int(run.get("log_max_bytes", 32 << 20)),
        int(run.get("log_keep", 3)),
    )
    env = dict(os.environ)
    env.update(run.get("env") or {})
    for name in run.get("unset_env") or ():
        env.pop(name, None)
    exit_path = os.path.join(worker_dir, EXIT_FILE)
    try:
        process = subprocess.Popen(
            run["argv"],
            cwd=run.get("cwd") or None,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        code = 127 if exc.errno in (errno.ENOENT, errno.ENOTDIR) else 126
        message = "meshdeck-agent: cannot start %s: %s\n" % (run["argv"][0], exc.strerror or exc)
        log.write(message.encode("utf-8"))
        log.close()
        write_json(exit_path, {"exit_code": code, "signal": None, "ended_at": time.time(), "error": message.strip()})
        return 0
    start_time = process_start_time(process.pid)
    write_json(
        os.path.join(worker_dir, KEEPER_FILE),
        {"pid": process.pid, "start_time": start_time, "keeper_pid": os.getpid(), "started_at": time.time()},
    )

    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    copier = threading.Thread(target=_copy, args=(process.stdout, log), daemon=True)
    copier.start()
    returncode = process.wait()
    write_json(
        exit_path,
        {
            "exit_code": returncode if returncode >= 0 else None,
            "signal": -returncode if returncode < 0 else None,
            "ended_at": time.time(),
            "error": None,
        },
    )
    _end_group(process.pid, float(run.get("group_grace_s", 5.0)))
    copier.join(timeout=5.0)
    log.close()
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: meshdeck-agent keeper <worker dir>\n")
        return 2
    return run_keeper(args[0])
