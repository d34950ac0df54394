"""Which processes of a local deployment are still alive: every process in the sessions its workers lead.

The agent's keeper starts each worker in its own session (keeper.py), and what the worker starts — vLLM's
engine core, its CPU workers, NIXL's and the router's threads' processes — stays in that session unless it
leaves on purpose. So after a stop, a live process whose session id is one of the workers' pids is one the
stop left behind, whatever its command line became (vLLM renames its children `VLLM::EngineCore`). Local
agents only: it reads this machine's /proc.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

from meshdeck_agent.keeper import process_is_zombie
from meshdeck_agent.procinfo import ProcessGone, ProcReader

MAX_LISTED = 20


def processes_in_sessions(sessions: Iterable[int], proc_root: str = "/proc") -> list[str]:
    """`pid command` of each live (not zombie) process in one of `sessions`, at most MAX_LISTED."""
    wanted = {s for s in sessions if s > 1}
    if not wanted:
        return []
    reader = ProcReader(proc_root)
    found: list[str] = []
    for name in os.listdir(proc_root):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            stat = reader.stat(pid)
        except ProcessGone:
            continue
        if stat.session in wanted and not process_is_zombie(pid, proc_root):
            try:
                command = reader.command(pid)[0] or ""
            except ProcessGone:
                continue
            found.append(f"{pid} {command[:120]}")
            if len(found) >= MAX_LISTED:
                break
    return found


def alive(pids: Iterable[int], proc_root: str = "/proc") -> list[str]:
    """`pid command` of each of `pids` still running (not a zombie)."""
    reader = ProcReader(proc_root)
    found = []
    for pid in pids:
        try:
            reader.stat(pid)
            if not process_is_zombie(pid, proc_root):
                found.append(f"{pid} {(reader.command(pid)[0] or '')[:120]}")
        except ProcessGone:
            continue
    return found


def left_after(sessions: Iterable[int], within_s: float = 30.0, *, keepers: Iterable[int] = ()) -> list[str]:
    """The sessions' processes, and the `keepers` (the agent's per-worker keepers: each ends once its worker's
    process group and log pipe are gone), still alive once `within_s` passed (empty as soon as all are gone)."""
    sessions, keepers = list(sessions), list(keepers)
    deadline = time.monotonic() + within_s
    while (left := processes_in_sessions(sessions) + alive(keepers)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left
