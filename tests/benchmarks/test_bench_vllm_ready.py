"""Benchmark: time to ready of the real vLLM (CPU build) TP=2 two-node deployment through meshdeck, against the
very same two `vllm serve` commands (the plan's argv and env) started by hand, in one run.

Through meshdeck: DeployService.launch on two local agents — the head, its master port open, the headless node,
5 s of it running, then vLLM's own "ready" (its API port open or "Application startup complete"). By hand: the
same order a person would follow from vLLM's docs — the head, wait for its master port, the other node, wait
for the API port — as plain subprocesses polled every 0.1 s. The rounds alternate which goes first; medians
are printed and only their ratio is asserted (≤ 1.1): a start takes a minute or two on this machine, and its
spread between rounds is larger than meshdeck's share. `make bench`, or
`pytest tests/benchmarks/test_bench_vllm_ready.py -s -o addopts=""`; MESHDECK_BENCH_VLLM_ROUNDS (default 3).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from meshdeck.services.vllm_bench import LocalVllmDeployment
from meshdeck.services.vllm_local import VllmNotInstalled, find_vllm_executable

ROUNDS = int(os.environ.get("MESHDECK_BENCH_VLLM_ROUNDS", "3"))
START_TIMEOUT_S = 1800.0


def port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def wait_port(port: int, started: float, processes: list[subprocess.Popen]) -> None:
    while not port_open(port):
        assert all(p.poll() is None for p in processes), "a vllm serve exited while starting"
        assert time.monotonic() - started < START_TIMEOUT_S, f"port {port} never opened"
        time.sleep(0.1)


def by_hand(executable: str) -> float:
    """The plan's two commands as plain processes, head first; seconds until vLLM's API port answers."""
    with LocalVllmDeployment(executable) as run:  # only for the plan: the same argv, env and free ports
        plan = run.plan
    head, worker = plan.commands
    api_port = int(head.argv[head.argv.index("--port") + 1])
    master_port = int(head.argv[head.argv.index("--master-port") + 1])
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as logs:
        try:
            started = time.monotonic()
            for command, wait_for in ((head, master_port), (worker, api_port)):
                env = {**os.environ, **command.env_dict}
                with open(Path(logs) / command.name, "wb") as log:
                    process = subprocess.Popen(
                        list(command.argv), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                    )
                processes.append(process)
                wait_port(wait_for, started, processes)
            return time.monotonic() - started
        finally:
            for process in reversed(processes):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
            for process in processes:
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=30)


def through_meshdeck(executable: str) -> float:
    with LocalVllmDeployment(executable) as run:
        run.launch()
        ready_s = run.ready_s
        run.stop()
    assert ready_s is not None
    return ready_s


@pytest.mark.timeout(3600)  # rounds of minute-long starts: past the suite's 300 s default
def test_bench_vllm_time_to_ready_against_vllm_serve_by_hand() -> None:
    try:
        executable = find_vllm_executable()
    except VllmNotInstalled as exc:
        pytest.skip(str(exc))
    meshdeck_s: list[float] = []
    hand_s: list[float] = []
    for round_number in range(ROUNDS):
        order = (("meshdeck", through_meshdeck), ("by hand", by_hand))
        for name, run in order if round_number % 2 == 0 else reversed(order):
            seconds = run(executable)
            (meshdeck_s if name == "meshdeck" else hand_s).append(seconds)
            print(f"round {round_number + 1}: {name} ready in {seconds:.1f} s", flush=True)
    meshdeck_median, hand_median = statistics.median(meshdeck_s), statistics.median(hand_s)
    ratio = meshdeck_median / hand_median
    print(
        f"\nvLLM TP=2 on two local nodes, time to ready, median of {ROUNDS}: meshdeck {meshdeck_median:.1f} s, "
        f"by hand {hand_median:.1f} s, ratio {ratio:.3f}"
    )
    assert ratio <= 1.1
