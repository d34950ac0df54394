"""Suite-wide test settings. Area fixtures live in the conftest.py of each test folder.

Processes: agents, workers and sshds are real in this suite, and the agent is a daemon whose workers
outlive it by design, so a test that forgets to stop one leaves it running after pytest exits (and, on
a 2-core CI machine, slows every later test). At the end of the session any such process started
during the session is killed and listed; with MESHDECK_STRICT_LEAKS=1 the session fails instead of
only reporting them.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import psutil
import pytest

# Qt never needs a display in tests; screenshots under Xvfb set DISPLAY themselves.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

_LEAK_MARKERS = ("meshdeck_agent", "meshdeck-agent", "simvllm", "torch.distributed.run", "torchrun", "sshd -D")
_SESSION_START = time.time()
_LEAKED: list[str] = []
# Processes this session starts inherit this mark; another pytest session running at the same time marks
# its own, so the sweep below never kills a concurrent session's agents. (Processes started through an
# SSH login get sshd's environment, without any mark: those are swept by creation time alone.)
_SESSION_ENV = "MESHDECK_TEST_SESSION"
_SESSION_MARK = f"{os.getpid()}-{time.time_ns()}"
os.environ[_SESSION_ENV] = _SESSION_MARK


def _leftover_processes() -> Iterator[psutil.Process]:
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "create_time", "cmdline"]):
        try:
            if proc.info["pid"] == me or proc.info["create_time"] < _SESSION_START - 1:
                continue
            cmdline = " ".join(proc.info["cmdline"] or ())
            if not any(marker in cmdline for marker in _LEAK_MARKERS):
                continue
            if proc.environ().get(_SESSION_ENV, _SESSION_MARK) != _SESSION_MARK:
                continue  # started by another test session
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        yield proc


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):
        return
    leftovers = list(_leftover_processes())
    for proc in leftovers:
        try:
            _LEAKED.append(f"pid {proc.pid}: {' '.join(proc.cmdline())[:200]}")
            proc.send_signal(signal.SIGKILL)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    if _LEAKED and os.environ.get("MESHDECK_STRICT_LEAKS") == "1":
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _LEAKED:
        terminalreporter.section("processes left running by tests (killed)", yellow=True)
        for line in _LEAKED:
            terminalreporter.write_line(line)
