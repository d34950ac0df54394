"""`meshdeck bench fleet` stopped by a signal in its measuring window: SIGTERM and Ctrl+C (SIGINT, also while
the console's event loop runs) end the run early with 128 + the signal, and every agent process it started
is gone. Before, SIGTERM left the agents running and SIGINT under --console waited for the window's end."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading

import psutil
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

WINDOW_OPENS = "bench fleet: the window opens"
OPEN_S = 420  # for the window to open: connect, then settle (up to 180 s on a loaded machine)
END_S = 180  # for the run to end after the signal


def _lines(stream: object, into: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line)


def _agents_of(pid: int) -> list[psutil.Process]:
    """The agent processes (daemons and `attach` relays) below `pid`."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "meshdeck_agent" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize(
    ("signum", "flags"),
    [
        (signal.SIGTERM, ()),
        (signal.SIGINT, ()),
        pytest.param(signal.SIGINT, ("--console",), marks=pytest.mark.gui),
    ],
    ids=["SIGTERM", "SIGINT", "SIGINT-console"],
)
def test_a_signal_in_the_window_ends_the_run_and_stops_every_agent_it_started(
    signum: signal.Signals, flags: tuple[str, ...]
):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    command = [sys.executable, "-m", "meshdeck", "--log-level", "INFO", "bench", "fleet", "--host-count", "2"]
    command += ["--gpus-per-host", "1", "--seconds", "3600", *flags]
    bench = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(bench.stderr, lines), daemon=True).start()
    agents: list[psutil.Process] = []
    try:
        seen: list[str] = []
        while not any(WINDOW_OPENS in line for line in seen[-1:]):
            try:
                seen.append(lines.get(timeout=OPEN_S))
            except queue.Empty:
                pytest.fail(f"the window did not open within {OPEN_S} s: {''.join(seen[-20:])}")
        agents = _agents_of(bench.pid)
        assert len(agents) >= 2, seen[-20:]
        bench.send_signal(signum)
        assert bench.wait(timeout=END_S) == 128 + signum
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        left = [agent for agent in agents if _alive(agent)]
        for agent in left:
            agent.kill()
    assert left == [], [" ".join(agent.cmdline()) for agent in left]
    said = "".join(lines.queue)
    assert f"stopped by {signum.name}; every agent it started is stopped" in said
