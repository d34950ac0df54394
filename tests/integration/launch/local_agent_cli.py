"""The `meshdeck` command line against this test's own local agent: an isolated runtime dir (the agent's
socket and state live there, so no other test's or user's agent is reached) and a way to run the CLI."""

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
from collections.abc import Iterator
from pathlib import Path


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
    return subprocess.run(
        [sys.executable, "-m", "meshdeck", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
