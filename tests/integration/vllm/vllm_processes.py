"""The processes a real vLLM deployment runs, and whether any outlived it (the real-vLLM tests' helpers)."""

from __future__ import annotations

import time

import psutil


def process_tree(pid: int) -> list[psutil.Process]:
    """`pid` and every process below it (vLLM's engine core, its workers, their resource trackers)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def alive(processes: list[psutil.Process]) -> list[str]:
    """The ones still running (a reused pid is told apart by its start time), described."""
    left = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{process.pid} {' '.join(process.cmdline())[:120]}")
        except psutil.NoSuchProcess:
            continue
    return left


def still_running(processes: list[psutil.Process], within_s: float = 30.0) -> list[str]:
    """The processes still running once `within_s` has passed (an empty list as soon as all are gone)."""
    deadline = time.monotonic() + within_s
    while (left := alive(processes)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def processes_naming(text: str) -> list[psutil.Process]:
    """Processes whose command line holds `text` (a deployment id: its workers' keepers name their folder)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if text in " ".join(process.info["cmdline"] or ()):
                found.append(process)
        except psutil.NoSuchProcess:
            continue
    return found
