"""Benchmark: `meshdeck-agent serve --simulate 16xH200 --interval 1` with one subscribed client, 60 s.

Targets (issue #3): under 1 % of one core and under 40 MB peak RSS. Printed: the agent's CPU time /
wall time as the median of six 10-second windows and over the whole run, and its peak RSS (VmHWM),
each beside a baseline measured in the same run — an idle `python -c` sleeping process started at the
same moment — so numbers from different or busy machines can be compared. Run with `make bench` or
`pytest tests/benchmarks -s`; it asserts nothing about time, only that every sample arrived in order.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

AGENT = str(Path(__file__).resolve().parents[2] / "agent")
WINDOWS = 6
WINDOW_S = 10.0


def _peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def test_bench_agent_16xh200_one_subscriber():
    directory = Path(tempfile.mkdtemp(prefix="mdb-", dir="/tmp"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (AGENT, os.environ.get("PYTHONPATH", "")) if p))
    socket_path = directory / "agent.sock"
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "meshdeck_agent",
            "serve",
            "--socket",
            str(socket_path),
            "--simulate",
            "16xH200",
            "--interval",
            "1",
            "--log-level",
            "WARNING",
        ],
        env=env,
    )
    baseline = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    received: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while not socket_path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        client = socket.socket(socket.AF_UNIX)
        client.connect(str(socket_path))
        reader = client.makefile("rb")
        reader.readline()
        client.sendall(b'{"hello":{"protocol":1,"agent":"bench"}}\n{"id":1,"method":"samples.subscribe","params":{}}\n')

        def consume() -> None:
            import json

            for line in reader:
                message = json.loads(line)
                if message.get("event") == "samples":
                    received.extend(s["seq"] for s in message["data"]["samples"])

        threading.Thread(target=consume, daemon=True).start()
        agent_process, baseline_process = psutil.Process(agent.pid), psutil.Process(baseline.pid)
        time.sleep(2.0)  # past start-up: the inventory and first samples
        agent_cpu, baseline_cpu = [], []
        start_wall = time.monotonic()
        start_agent, start_base = _cpu(agent_process), _cpu(baseline_process)
        for _ in range(WINDOWS):
            wall0, a0, b0 = time.monotonic(), _cpu(agent_process), _cpu(baseline_process)
            time.sleep(WINDOW_S)
            elapsed = time.monotonic() - wall0
            agent_cpu.append((_cpu(agent_process) - a0) / elapsed)
            baseline_cpu.append((_cpu(baseline_process) - b0) / elapsed)
        total_wall = time.monotonic() - start_wall
        agent_total = (_cpu(agent_process) - start_agent) / total_wall
        baseline_total = (_cpu(baseline_process) - start_base) / total_wall
        agent_peak, baseline_peak = _peak_rss(agent.pid), _peak_rss(baseline.pid)
        client.sendall(b'{"id":2,"method":"agent.shutdown"}\n')
        agent.wait(timeout=30)
    finally:
        for process in (agent, baseline):
            if process.poll() is None:
                process.kill()
                process.wait()
        shutil.rmtree(directory, ignore_errors=True)

    cores = os.cpu_count()
    print()
    print(
        f"agent serve --simulate 16xH200 --interval 1, one subscriber, {WINDOWS}x{WINDOW_S:.0f} s on {cores} cores ({sys.platform}, Python {sys.version.split()[0]})"
    )
    print(
        f"  agent CPU/wall   median {100 * statistics.median(agent_cpu):.3f} % of a core   whole run {100 * agent_total:.3f} %   target < 1 %"
    )
    print(
        f"  baseline CPU     median {100 * statistics.median(baseline_cpu):.3f} %   whole run {100 * baseline_total:.3f} %"
    )
    print(f"  agent peak RSS   {agent_peak / 2**20:.1f} MiB   target < 40 MB ({40e6 / 2**20:.1f} MiB)")
    print(
        f"  baseline RSS     {baseline_peak / 2**20:.1f} MiB   ratio agent/baseline {agent_peak / max(1, baseline_peak):.2f}"
    )
    print(
        f"  samples received {len(received)} (seq {received[0] if received else '-'}..{received[-1] if received else '-'})"
    )
    assert received and received == list(range(received[0], received[0] + len(received)))
