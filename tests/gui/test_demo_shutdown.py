"""`meshdeck --demo` ended by a signal, checked from outside as an operator would: once it is up, SIGTERM or
SIGINT (Ctrl+C) leaves no process started for it — agents, keepers, engines, torchrun — and no temporary
folder, within 15 s. SIGTERM used to kill the console at once and leave the agents (and with `--real-vllm` the
real engine, answering on 0.0.0.0) running; Ctrl+C waited for the next event the window handled.

What counts as started for it: every process that carries this test's mark in its environment (the console
passes its environment down to the agents, their keepers and the engines) or descends from the console,
seen at any time while it ran."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

MARK = "MESHDECK_SHUTDOWN_TEST"
QUIT_WITHIN_S = 15.0
FOLDER_LINE = re.compile(r"demo cluster: .* in (/\S+)")


class Started:
    """The processes of one console run: (pid, create time) -> command line, for all it ever started."""

    def __init__(self, root: int, mark: str) -> None:
        self.root, self.mark = root, mark
        self.seen: dict[tuple[int, float], str] = {}

    def look(self) -> None:
        found: list[psutil.Process] = []
        try:
            root = psutil.Process(self.root)
            found += [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
        for process in psutil.process_iter():
            try:
                if process.environ().get(MARK) == self.mark:
                    found.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        for process in found:
            try:
                self.seen.setdefault((process.pid, process.create_time()), " ".join(process.cmdline())[:300])
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue

    def alive(self) -> list[str]:
        self.look()  # and anything started since
        left = []
        for (pid, created), cmdline in self.seen.items():
            try:
                process = psutil.Process(pid)
                if process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{pid}: {cmdline}")
            except psutil.NoSuchProcess:
                continue
        return left

    def kill_all(self) -> None:
        for pid, created in self.seen:
            try:
                process = psutil.Process(pid)
                if process.create_time() == created:
                    process.kill()
            except psutil.NoSuchProcess:
                continue


@contextmanager
def demo_console(tmp_path: Path, *extra: str) -> Iterator[tuple[subprocess.Popen[bytes], Started, Path]]:
    mark = uuid.uuid4().hex
    log = tmp_path / "console.log"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(tmp_path / "config"), MARK: mark}
    argv = [sys.executable, "-m", "meshdeck", "--log-level", "INFO", "--demo", *extra]
    with log.open("wb") as sink:
        console = subprocess.Popen(argv, env=env, stdout=sink, stderr=subprocess.STDOUT)
    started = Started(console.pid, mark)
    try:
        yield console, started, log
    finally:
        if console.poll() is None:
            console.kill()
            console.wait(30)
        started.kill_all()


def wait_until_up(console: subprocess.Popen[bytes], started: Started, log: Path, done: str, timeout_s: float) -> Path:
    """Until the tour logged `done` (its engines run); returns the demo's folder."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        started.look()
        text = log.read_text(errors="replace")
        if done in text:
            folder = FOLDER_LINE.search(text)
            assert folder is not None, text[-3000:]
            return Path(folder.group(1))
        assert console.poll() is None, text[-3000:]
        time.sleep(0.5)
    raise AssertionError(f"the demo was not up in {timeout_s:.0f} s: {log.read_text(errors='replace')[-3000:]}")


def assert_ends_in_order(
    console: subprocess.Popen[bytes], started: Started, folder: Path, signum: int, log: Path
) -> None:
    """Send `signum`; within QUIT_WITHIN_S the console exits 128 + signum, nothing it started runs, its folder is gone."""
    started.look()
    console.send_signal(signum)
    deadline = time.monotonic() + QUIT_WITHIN_S
    while time.monotonic() < deadline and (console.poll() is None or started.alive() or folder.exists()):
        time.sleep(0.2)
    left = started.alive()
    text = log.read_text(errors="replace")[-3000:]
    assert not left, "\n".join(left)
    assert not folder.exists(), text
    assert console.poll() == 128 + signum, text


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_ends_the_demo_with_every_process_it_started_and_its_folder(tmp_path: Path, signum: int) -> None:
    with demo_console(tmp_path) as (console, started, log):
        folder = wait_until_up(console, started, log, "demo: done", timeout_s=400)
        assert folder.is_dir()
        commands = "\n".join(started.seen.values())
        assert "meshdeck_agent serve" in commands and "keeper" in commands, commands  # agents and their workers
        assert_ends_in_order(console, started, folder, signum, log)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigterm_ends_the_demos_real_vllm_engine_too(tmp_path: Path) -> None:
    from meshdeck.services.vllm_local import VllmNotInstalled, find_vllm_executable

    try:
        find_vllm_executable()
    except VllmNotInstalled as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the real-vLLM tests and `make test` makes their venv: {exc}")
        pytest.skip(str(exc))
    with demo_console(tmp_path, "--real-vllm") as (console, started, log):
        folder = wait_until_up(console, started, log, "sending completions to the REAL vLLM", timeout_s=700)
        engines = [command for command in started.seen.values() if "vllm serve" in command and "simvllm" not in command]
        assert engines, "\n".join(started.seen.values())
        assert_ends_in_order(console, started, folder, signal.SIGTERM, log)
