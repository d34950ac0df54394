"""Slurm's client commands and file reads for the app, on a cluster's login node (`slurm.run`, `files.read`).

The app adds a Slurm cluster by its login node; this agent runs there and runs Slurm's own commands for it —
only those named in SLURM_COMMANDS, as argv lists (never a shell), from the user's home (where `sbatch` writes
a job's output by default), with a timeout and with stdout and stderr each cut at MAX_OUTPUT_BYTES. The batch
script goes to `sbatch` on stdin. `files.read` reads a job's output file (on the cluster's shared filesystem)
from an offset or from its end, bounded. Parsing the answers is the app's (meshdeck/core/slurm_state.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
from typing import Any, Dict, List

from . import protocol

SLURM_COMMANDS = ("sinfo", "squeue", "sacct", "sacctmgr", "sbatch", "scancel", "scontrol")
EXTRA_DIRS = ("/usr/sbin", "/usr/bin", "/usr/local/bin", "/opt/slurm/bin")
MAX_ARGS = 64
MAX_ARG_CHARS = 4096
MAX_STDIN_BYTES = 4 * 1024 * 1024
MAX_OUTPUT_BYTES = 2 * 1024 * 1024
DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 300.0
DEFAULT_READ = 64 * 1024
MAX_READ = 1024 * 1024


def _bad(field: str, problem: str) -> protocol.ProtocolError:
    return protocol.ProtocolError(protocol.BAD_PARAMS, "%s: %s" % (field, problem))


def find_command(name: str) -> str:
    """The path of Slurm command `name`: on PATH, else in the directories Slurm's packages use."""
    found = shutil.which(name)
    if found:
        return found
    for directory in EXTRA_DIRS:
        path = os.path.join(directory, name)
        if os.access(path, os.X_OK):
            return path
    raise protocol.ProtocolError(
        protocol.NOT_FOUND,
        "%s is not installed here (looked on PATH and in %s)" % (name, ", ".join(EXTRA_DIRS)),
    )


def run_slurm(params: Dict[str, Any]) -> Dict[str, Any]:
    command = params["command"]
    if command not in SLURM_COMMANDS:
        raise _bad("command", "must be one of %s, got %s" % (", ".join(SLURM_COMMANDS), protocol.excerpt(command)))
    args = params.get("args") or []
    if len(args) > MAX_ARGS:
        raise _bad("args", "at most %d arguments, got %d" % (MAX_ARGS, len(args)))
    for index, arg in enumerate(args):
        if not isinstance(arg, str) or len(arg) > MAX_ARG_CHARS or "\0" in arg or not arg.isprintable():
            raise _bad("args[%d]" % index, "must be a printable string of at most %d characters" % MAX_ARG_CHARS)
    stdin = params.get("stdin")
    if stdin is not None and len(stdin.encode("utf-8", errors="replace")) > MAX_STDIN_BYTES:
        raise _bad("stdin", "is over %d bytes" % MAX_STDIN_BYTES)
    timeout_s = float(params.get("timeout_s", DEFAULT_TIMEOUT_S))
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise _bad("timeout_s", "must be above 0 and at most %g" % MAX_TIMEOUT_S)
    argv: List[str] = [find_command(command), *args]
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=os.path.expanduser("~"),
            start_new_session=True,
        )
    except OSError as exc:
        raise protocol.ProtocolError(protocol.NOT_FOUND, "%s: %s" % (argv[0], exc.strerror or exc)) from None
    try:
        out, err = process.communicate(None if stdin is None else stdin.encode("utf-8"), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)  # its own session: whatever it started goes too
        process.communicate()
        raise protocol.ProtocolError(
            protocol.INTERNAL, "%s did not finish in %g s and was killed" % (command, timeout_s)
        ) from None
    truncated = len(out) > MAX_OUTPUT_BYTES or len(err) > MAX_OUTPUT_BYTES
    return {
        "rc": process.returncode,
        "stdout": out[:MAX_OUTPUT_BYTES].decode("utf-8", errors="replace"),
        "stderr": err[:MAX_OUTPUT_BYTES].decode("utf-8", errors="replace"),
        "truncated": truncated,
        "command": argv,
    }


def read_file(params: Dict[str, Any]) -> Dict[str, Any]:
    """`limit` bytes of a regular file from `offset`, or its last `tail` bytes."""
    path = params["path"]
    if not path or "\0" in path:
        raise _bad("path", "must be a non-empty path")
    limit = int(params.get("limit", DEFAULT_READ))
    if not 1 <= limit <= MAX_READ:
        raise _bad("limit", "must be 1-%d bytes" % MAX_READ)
    offset = int(params.get("offset", 0))
    tail = params.get("tail")
    try:
        fd = os.open(os.path.expanduser(path), os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise protocol.ProtocolError(protocol.NOT_FOUND, "no file %s" % protocol.excerpt(path)) from None
    except OSError as exc:
        raise _bad("path", "%s: %s" % (protocol.excerpt(path), exc.strerror or exc)) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise _bad("path", "%s is not a regular file" % protocol.excerpt(path))
    with os.fdopen(fd, "rb") as handle:
        size = info.st_size
        start = max(0, size - int(tail)) if tail is not None else min(offset, size)
        handle.seek(start)
        data = handle.read(limit)
    return {
        "path": path,
        "size": size,
        "offset": start,
        "data": data.decode("utf-8", errors="replace"),
        "eof": start + len(data) >= size,
    }
