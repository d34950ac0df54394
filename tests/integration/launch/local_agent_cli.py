"""The `meshdeck` command line against this test's own local agent: an isolated runtime dir (the agent's
socket and state live there, so no other test's or user's agent is reached), a meshdeck-named worker
started on that agent directly, and a way to run the CLI."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from meshdeck.services.deployments.model import worker_id, worker_name
from meshdeck.services.fleet import FleetService


@contextlib.contextmanager
def isolated_runtime() -> Iterator[dict[str, str]]:
    """An environment whose XDG_RUNTIME_DIR is a fresh short dir; the agent daemon started there is ended."""
    directory = Path(tempfile.mkdtemp(prefix="md-", dir="/tmp"))  # the agent socket needs a short path
    env = {**os.environ, "XDG_RUNTIME_DIR": str(directory), "OMP_NUM_THREADS": "1"}
    try:
        yield env
    finally:
        pid_file = directory / "meshdeck" / "agent.state" / "agent.pid"
        if pid_file.exists():  # this test's own agent daemon
            pid = json.loads(pid_file.read_text())["pid"]
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 20
            while (directory / "meshdeck" / "agent.sock").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        shutil.rmtree(directory, ignore_errors=True)


def meshdeck(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # stdin is never the terminal pytest may run in: nothing waits for an answer
        [sys.executable, "-m", "meshdeck", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_local_worker(deployment: str, command: str, argv: Sequence[str], *, output: str = "") -> None:
    """Start `argv` on this process's local agent (XDG_RUNTIME_DIR set to an isolated runtime) as part
    `command` of `deployment`, and wait until its log holds `output`. The daemon keeps it once we close."""
    spec = {"id": worker_id(deployment, command), "name": worker_name(deployment, 0, command),
            "argv": list(argv), "restart": "never"}  # fmt: skip
    with FleetService() as fleet:
        fleet.add_local("local")
        deadline = time.monotonic() + 60
        while fleet.status("local").state != "connected":
            assert time.monotonic() < deadline, fleet.status("local").reason
            time.sleep(0.1)
        fleet.call("local", "workers.start", {"spec": spec}, timeout=30)
        while output not in fleet.call("local", "workers.logs", {"id": spec["id"], "offset": 0}, timeout=30)["data"]:
            assert time.monotonic() < deadline, f"{output!r} not in the log of {spec['id']}"
            time.sleep(0.1)
