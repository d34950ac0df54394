"""Suite-wide test settings. Area fixtures live in the conftest.py of each test folder.

Processes: agents, workers and sshds are real in this suite, and the agent is a daemon whose workers
outlive it by design, so a test that forgets to stop one leaves it running after pytest exits (and, on
a 2-core CI machine, slows every later test). At the end of the session any such process started
during the session is killed and listed; with MESHDECK_STRICT_LEAKS=1 the session fails instead of
only reporting them.

Keyring: no test reaches the OS keyring of the machine it runs on; each starts with keyring's fail
backend (what CI has; `no_keyring` says so explicitly), and `memory_keyring` gives one test a working
keyring kept in memory (tests/fakes/memory_keyring.py).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

FAKES = str(Path(__file__).resolve().parent / "fakes")
if FAKES not in sys.path:
    sys.path.insert(0, FAKES)

from memory_keyring import MemoryKeyring, installed  # noqa: E402 - needs tests/fakes on sys.path first

# Qt never needs a display in tests; screenshots under Xvfb set DISPLAY themselves.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

_LEAK_MARKERS = (
    "meshdeck_agent",
    "meshdeck-agent",
    "simvllm",
    "torch.distributed.run",
    "torchrun",
    "sshd -D",
    "vllm serve",
    "VLLM::",
)
_SESSION_START = time.time()
_LEAKED: list[str] = []
# Processes this session starts inherit this mark; another pytest session running at the same time marks
# its own, so the sweep below never kills a concurrent session's agents. A process without a readable
# mark (sshd's listener overwrites its environment with its process title; a process started through an
# SSH login gets sshd's environment) is this session's only when it descends from this pytest or its
# command line names this session's temporary directory.
_SESSION_ENV = "MESHDECK_TEST_SESSION"
_SESSION_MARK = f"{os.getpid()}-{time.time_ns()}"
os.environ[_SESSION_ENV] = _SESSION_MARK


def _ours_without_mark(proc: psutil.Process, cmdline: str, basetemp: str | None) -> bool:
    if basetemp and basetemp in cmdline:
        return True
    return any(parent.pid == os.getpid() for parent in proc.parents())


def _leftover_processes(basetemp: str | None) -> Iterator[psutil.Process]:
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "create_time", "cmdline"]):
        try:
            if proc.info["pid"] == me or proc.info["create_time"] < _SESSION_START - 1:
                continue
            cmdline = " ".join(proc.info["cmdline"] or ())
            if not any(marker in cmdline for marker in _LEAK_MARKERS):
                continue
            mark = proc.environ().get(_SESSION_ENV)
            if mark is None and not _ours_without_mark(proc, cmdline, basetemp):
                continue  # no mark and nothing ties it to this session
            if mark is not None and mark != _SESSION_MARK:
                continue  # started by another test session
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        yield proc


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):
        return
    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = None
    if factory is not None:
        try:
            basetemp = str(factory.getbasetemp())
        except (OSError, ValueError):
            basetemp = None
    leftovers = list(_leftover_processes(basetemp))
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


@pytest.fixture(autouse=True)
def _no_real_keyring() -> Iterator[None]:
    """A secret a test stores never lands in the keyring of the desktop the tests run on."""
    with installed(None):
        yield


@pytest.fixture
def memory_keyring() -> Iterator[MemoryKeyring]:
    """An OS keyring that works, kept in memory for this test (tests/fakes/memory_keyring.py)."""
    with installed(MemoryKeyring()) as backend:
        yield backend  # type: ignore[misc]


@pytest.fixture
def no_keyring() -> Iterator[None]:
    """No usable OS keyring (keyring's fail backend), as on CI or a server without a desktop session."""
    with installed(None):
        yield
