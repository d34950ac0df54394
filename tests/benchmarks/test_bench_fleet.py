"""Benchmark: 32 hosts — real sshd connections to simulated agents sampling at 1 Hz — in one process.

Printed: the client's CPU per host (this process's user+system CPU over the window, per host, as %
of one core) and the end-to-end delay from a sample's timestamp (taken by the agent) to its delivery
to a fleet subscriber, median and p99. The baseline is 1 host measured the same way in the same
run; the 32-host numbers are also printed as a ratio to it. Every SSH connection is a real login
to a real OpenSSH server on 127.0.0.1 (4 servers, 8 connections each); each host has its own agent
daemon (own socket). Run with `make bench` or `pytest tests/benchmarks -s`; it never asserts a time.
"""

from __future__ import annotations

import os
import shutil
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from integration.remote.remote_agent_fixtures import (  # noqa: F401  (agent_pyz is a fixture)
    agent_pyz,
    isolated_ssh_options,
    short_temp_dir,
    stop_agent,
)
from meshdeck.remote.events import SamplesReceived
from meshdeck.remote.supervisor import Backoff, SupervisorSettings
from meshdeck.services.fleet import FleetService, FleetSettings, ssh_connector
from sshd import SshdFactory, ssh_client_key, sshd_factory  # noqa: F401  (fixtures)

HOSTS = 32
SERVERS = 4
WINDOW_S = float(os.environ.get("MESHDECK_BENCH_FLEET_WINDOW_S", "60"))
BASELINE_WINDOW_S = float(os.environ.get("MESHDECK_BENCH_FLEET_BASELINE_S", "20"))

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(1800)]  # 32 logins + daemon starts on 2 busy cores


class DelayMeter:
    """Subscriber: records (delivered - sample ts) for samples that arrive while measuring."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.delays: list[float] = []
        self.samples_per_host: dict[str, int] = {}
        self.measuring = False

    def __call__(self, event: object) -> None:
        if not isinstance(event, SamplesReceived):
            return
        now = time.time()
        with self.lock:
            self.samples_per_host[event.host] = self.samples_per_host.get(event.host, 0) + len(event.samples)
            if self.measuring and not event.backfill:
                self.delays.extend(now - s["ts"] for s in event.samples)

    def start(self) -> None:
        with self.lock:
            self.delays, self.measuring = [], True

    def stop(self) -> list[float]:
        with self.lock:
            self.measuring = False
            return list(self.delays)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _measure(meter: DelayMeter, hosts: int, window_s: float) -> dict[str, float]:
    meter.start()
    cpu_before, wall_before = time.process_time(), time.monotonic()
    time.sleep(window_s)
    cpu = time.process_time() - cpu_before
    wall = time.monotonic() - wall_before
    delays = meter.stop()
    assert delays, "no samples arrived during the window"
    return {
        "hosts": hosts,
        "cpu_pct_per_host": 100.0 * cpu / wall / hosts,
        "delay_median_ms": statistics.median(delays) * 1e3,
        "delay_p99_ms": _percentile(delays, 0.99) * 1e3,
        "samples": len(delays),
        "samples_per_s": len(delays) / wall,
    }


@pytest.fixture
def sockets_dir() -> Iterator[Path]:
    path = short_temp_dir("mdb-")
    yield path
    for socket_dir in sorted(path.iterdir()):
        stop_agent(socket_dir / "a.sock")
    shutil.rmtree(path, ignore_errors=True)


def test_bench_32_hosts_over_ssh_at_1hz(
    sshd_factory: SshdFactory,  # noqa: F811
    ssh_client_key: Path,  # noqa: F811
    agent_pyz: Path,  # noqa: F811
    sockets_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    servers = [sshd_factory.start(authorize=ssh_client_key) for _ in range(SERVERS)]
    known_hosts = tmp_path / "known_hosts"
    for server in servers:
        server.write_known_hosts(known_hosts)
    keys_dir = tmp_path / "no-default-keys"
    keys_dir.mkdir()
    settings = FleetSettings(
        known_hosts=str(known_hosts),
        user_known_hosts=(),
        ssh_config=None,
        agent_pyz=str(agent_pyz),
        remote_cache_dir=str(tmp_path / "remote-cache"),
        ssh=isolated_ssh_options(keys_dir),
        supervisor=SupervisorSettings(hello_timeout_s=60, call_timeout_s=60, backoff=Backoff(initial_s=1, max_s=5)),
    )
    meter = DelayMeter()
    with FleetService(settings) as fleet:
        fleet.subscribe(meter)

        def add(index: int) -> None:
            socket_dir = sockets_dir / f"h{index:02d}"
            socket_dir.mkdir()
            host_settings = replace(settings, agent_socket=str(socket_dir / "a.sock"))
            server = servers[index % SERVERS]
            connector = ssh_connector(
                host_settings,
                "127.0.0.1",
                port=server.port,
                identity_file=str(ssh_client_key),
                simulate="8xH200",
                host_keys=fleet.host_keys,
            )
            fleet.add_host(f"gpu-{index:02d}", connector)

        def wait_flowing(count: int, timeout: float = 900.0) -> None:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                with meter.lock:
                    flowing = sum(1 for n in meter.samples_per_host.values() if n >= 2)
                if flowing >= count:
                    return
                time.sleep(0.5)
            states = {name: fleet.status(name).reason or fleet.status(name).state for name in fleet.hosts()}
            raise AssertionError(f"only {flowing} of {count} hosts deliver samples: {states}")

        add(0)
        wait_flowing(1)
        baseline = _measure(meter, 1, BASELINE_WINDOW_S)
        started = time.monotonic()
        for index in range(1, HOSTS):
            add(index)
        wait_flowing(HOSTS)
        setup_s = time.monotonic() - started
        time.sleep(5)  # let the connection burst settle
        full = _measure(meter, HOSTS, WINDOW_S)
        states = {fleet.status(name).state for name in fleet.hosts()}

    print(f"\nfleet benchmark on {os.cpu_count()} CPU(s); 31 more hosts connected and streaming in {setup_s:.1f} s")
    print(
        f"{'hosts':>5} {'window s':>9} {'samples/s':>10} {'CPU %/host':>11} {'delay median ms':>16} {'delay p99 ms':>13}"
    )
    for row, window in ((baseline, BASELINE_WINDOW_S), (full, WINDOW_S)):
        print(
            f"{row['hosts']:>5} {window:>9.0f} {row['samples_per_s']:>10.1f} {row['cpu_pct_per_host']:>11.3f} "
            f"{row['delay_median_ms']:>16.1f} {row['delay_p99_ms']:>13.1f}"
        )
    print(
        f"ratio 32 hosts / 1 host: CPU per host x{full['cpu_pct_per_host'] / baseline['cpu_pct_per_host']:.2f}, "
        f"delay median x{full['delay_median_ms'] / baseline['delay_median_ms']:.2f}, "
        f"p99 x{full['delay_p99_ms'] / baseline['delay_p99_ms']:.2f}"
    )
    assert states == {"connected"}
    assert full["samples_per_s"] > HOSTS * 0.5  # every host kept streaming (about 1 sample/s each)
