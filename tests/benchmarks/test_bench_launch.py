"""Benchmark: launch -> every rank running, for tiny-deepseek (tp=2, pp=2) on two local agents acting as two
nodes, against the very same torchrun commands started by hand (two subprocesses, no agents, no checks).

Prints the median of each and their ratio; the overhead is meshdeck's: pre-start ready checks (the
head's rendezvous port, the node settle time), agent round trips, keepers and log polling. Run with
`make bench` (or pytest tests/benchmarks/test_bench_launch.py -s). No wall time is asserted.
"""

from __future__ import annotations

import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from meshdeck.launch.build import parse_layout_spec
from meshdeck.services.deployments.local import LocalAgents, run_builtin_workload, workload_profile
from meshdeck.services.deployments.targets import LOCAL_ADDRESS, prepare_launch

ROUNDS = 3
LAYOUT = "tp=2,pp=2"
RUNNING = re.compile(r"meshdeck-workload: rank \d+/\d+ running")


def by_hand(agents: LocalAgents, cache: str) -> float:
    """Start the plan's argv/env as plain processes, head first; seconds until all 4 ranks print 'running'."""
    profile = workload_profile("tiny-deepseek", parse_layout_spec(LAYOUT), agents.hosts, args=["--iters", "1"])
    plan = prepare_launch(
        profile, agents.fleet, addresses=dict.fromkeys(agents.hosts, LOCAL_ADDRESS), run_id="hand"
    ).plan
    with tempfile.TemporaryDirectory() as logs:
        started = time.monotonic()
        processes = []
        for command in plan.commands:
            env = {**os.environ, **command.env_dict, "XDG_CACHE_HOME": cache}
            log = open(Path(logs) / command.name, "w")  # noqa: SIM115 - closed below
            processes.append((subprocess.Popen(list(command.argv), env=env, stdout=log, stderr=subprocess.STDOUT), log))
        seen = 0
        while seen < 4:
            seen = sum(len(RUNNING.findall((Path(logs) / c.name).read_text())) for c in plan.commands)
            time.sleep(0.05)
            assert time.monotonic() - started < 600, "ranks never came up"
        elapsed = time.monotonic() - started
        for process, log in processes:
            assert process.wait(timeout=300) == 0
            log.close()
    return elapsed


def test_bench_launch_to_all_ranks_running_against_torchrun_by_hand() -> None:
    meshdeck_s: list[float] = []
    hand_s: list[float] = []
    with tempfile.TemporaryDirectory() as cache, LocalAgents(2) as agents:
        for _ in range(ROUNDS):
            run = run_builtin_workload(
                agents.fleet, agents.hosts, "tiny-deepseek", parse_layout_spec(LAYOUT), args=["--iters", "1"],
                env={"XDG_CACHE_HOME": cache}, preflight=False,
            )  # fmt: skip
            assert run.snapshot.state == "completed", run.snapshot.reason
            meshdeck_s.append(run.launch_s)
            hand_s.append(by_hand(agents, cache))
    ours, theirs = statistics.median(meshdeck_s), statistics.median(hand_s)
    print(
        f"\nlaunch -> 4 ranks running, tiny-deepseek {LAYOUT} on 2 local agents, {ROUNDS} rounds "
        f"({platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}):\n"
        f"  meshdeck launch   median {ours:.2f} s  {[round(s, 2) for s in meshdeck_s]}\n"
        f"  torchrun by hand  median {theirs:.2f} s  {[round(s, 2) for s in hand_s]}\n"
        f"  ratio meshdeck / by hand = {ours / theirs:.2f}"
    )
