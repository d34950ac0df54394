"""Run a built-in torch workload on agents of this machine — `meshdeck bench collectives|tiny-model --local`,
the CI's "two local agents acting as two nodes", and the launch benchmark.

    with LocalAgents(2) as agents:                        # two agent daemons, own sockets and state dirs
        run = run_builtin_workload(agents.fleet, agents.hosts, "tiny-deepseek", parse_layout_spec("tp=2,pp=2"))
        run.result["matches_reference"]

It takes exactly the path the GUI takes: a profile, pre-flight, a LaunchPlan, DeployService starting
real `torchrun` processes through the agents; the workload's `MESHDECK_RESULT` line is read back from
the worker logs. Nothing here is a shortcut around the agents.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from meshdeck_agent.keeper import process_is_zombie, process_start_time

from meshdeck.core.errors import InputError
from meshdeck.launch.plan import LaunchPlan, ReadyCheck
from meshdeck.launch.preflight_rules import PreflightReport
from meshdeck.launch.profile import Layout, Profile, profile_from_mapping
from meshdeck.services.deployments.model import DeploymentSnapshot, LaunchProgress, new_deployment_id, worker_id
from meshdeck.services.deployments.registry import DeployService, LaunchFailed
from meshdeck.services.deployments.targets import LOCAL_ADDRESS, prepare_launch
from meshdeck.services.deployments.waits import read_log
from meshdeck.services.fleet import FleetService, FleetSettings
from meshdeck.services.preflight import run_preflight

RESULT_MARK = "MESHDECK_RESULT "
CONNECT_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOCAL_ADDRESS, 0))
        return int(probe.getsockname()[1])


def distinct_free_ports(count: int) -> list[int]:
    """`count` different free ports (free_port may hand the same one out twice once it was released)."""
    ports: list[int] = []
    while len(ports) < count:
        if (port := free_port()) not in ports:
            ports.append(port)
    return ports


class LocalAgents:
    """N agent daemons on this machine (`local-0`, `local-1`, ...), each its own socket and state dir.

    Closing shuts the daemons down and removes their directory; the caller stops its deployments first.
    """

    def __init__(self, count: int, *, prefix: str = "local", root: str | None = None) -> None:
        if not 1 <= count <= 16:
            raise InputError("--nodes", f"must be 1-16 local agents, got {count}")
        # sockets need short paths (sun_path is 108 bytes)
        self.root = Path(tempfile.mkdtemp(prefix="md-", dir=root or "/tmp"))
        self.fleet = FleetService(FleetSettings(known_hosts=str(self.root / "known_hosts")))
        self.hosts = [f"{prefix}-{index}" for index in range(count)]
        try:
            for host in self.hosts:
                self.fleet.add_local(host, socket=str(self.root / f"{host}.sock"), state_dir=str(self.root / host))
            self._wait_connected()
        except BaseException:
            self.close()
            raise

    def _wait_connected(self) -> None:
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        for host in self.hosts:
            while self.fleet.status(host).state != "connected":
                if time.monotonic() > deadline:
                    status = self.fleet.status(host)
                    raise InputError("local agents", f"{host} did not connect: {status.state} {status.reason}")
                time.sleep(0.1)

    def close(self, timeout_s: float = 20.0) -> None:
        daemons = [pid for pid in (_daemon_pid(self.root / host) for host in self.hosts) if pid is not None]
        for host in self.fleet.hosts():
            with contextlib.suppress(Exception):  # already gone
                self.fleet.call(host, "agent.shutdown", timeout=15)
        self.fleet.close()
        deadline = time.monotonic() + timeout_s  # none of the daemons outlives this call
        while any(_running(*daemon) for daemon in daemons) and time.monotonic() < deadline:
            time.sleep(0.05)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalAgents:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _daemon_pid(state_dir: Path) -> tuple[int, int | None] | None:
    """(pid, start time) of the agent daemon serving from `state_dir` (its agent.pid record), or None."""
    try:
        record = json.loads((state_dir / "agent.pid").read_text())
        return int(record["pid"]), record.get("start_time")
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _running(pid: int, start_time: int | None) -> bool:
    started = process_start_time(pid)
    return started is not None and started == (start_time or started) and not process_is_zombie(pid)


@dataclass(frozen=True)
class WorkloadRun:
    snapshot: DeploymentSnapshot
    result: Mapping[str, Any] | None  # the workload's MESHDECK_RESULT, when it printed one
    logs: Mapping[str, str]  # command name -> its whole log
    preflight: PreflightReport | None
    launch_s: float  # launch called -> every rank running
    total_s: float


def workload_profile(
    workload: str,
    layout: Layout,
    hosts: Sequence[str],
    *,
    args: Sequence[str] = (),
    python: str = sys.executable,
    master_port: int | None = None,
    env: Mapping[str, str] | None = None,
) -> Profile:
    nodes = len(hosts)
    if layout.world_size % nodes:
        raise InputError("--layout", f"{layout.world_size} ranks do not split evenly over {nodes} node(s)")
    return profile_from_mapping(
        {
            "name": f"bench-{workload}",
            "model": workload,
            "engine": "torch",
            "hosts": list(hosts),
            "gpus_per_node": layout.world_size // nodes,
            "layout": layout.model_dump(),
            "torch": {
                "script": workload,
                "args": list(args),
                "python": python,
                "master_port": master_port or free_port(),
            },
            "env": dict(env or {}),
        },
        source="bench",
    )


def with_ready_timeout(plan: LaunchPlan, timeout_s: float) -> LaunchPlan:
    """The plan with every ready check's timeout capped at `timeout_s`."""

    def cap(checks: tuple[ReadyCheck, ...]) -> tuple[ReadyCheck, ...]:
        return tuple(replace(c, timeout_s=min(c.timeout_s, timeout_s)) for c in checks)

    commands = tuple(replace(c, ready=cap(c.ready)) for c in plan.commands)
    return replace(plan, commands=commands, serving_ready=cap(plan.serving_ready))


def result_line(logs: Mapping[str, str]) -> Mapping[str, Any] | None:
    """The JSON object on the first RESULT_MARK line that holds one (a line cut short or holding another
    value is passed over: the log comes from a server); None when there is none."""
    for text in logs.values():
        for line in text.splitlines():
            if not line.startswith(RESULT_MARK):
                continue
            try:
                result = json.loads(line[len(RESULT_MARK) :])
            except ValueError:
                continue
            if isinstance(result, dict):
                return result
    return None


def run_builtin_workload(
    fleet: Any,
    hosts: Sequence[str],
    workload: str,
    layout: Layout,
    *,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    preflight: bool = True,
    progress: Callable[[LaunchProgress], None] | None = None,
    on_running: Callable[[DeployService, DeploymentSnapshot], None] | None = None,
    timeout_s: float = 900.0,
    ready_timeout_s: float = 300.0,
) -> WorkloadRun:
    """Launch `workload` on `hosts` (agents on this machine), wait for it to finish, read its result.

    `ready_timeout_s` caps every ready check (a stuck rendezvous fails the run with the logs instead of
    waiting the plan's full server-class timeouts); `timeout_s` caps the run after it is up.
    """
    profile = workload_profile(workload, layout, hosts, args=args, env=env)
    started = time.monotonic()
    deployment_id = new_deployment_id(profile.name)
    prepared = prepare_launch(profile, fleet, addresses=dict.fromkeys(hosts, LOCAL_ADDRESS), run_id=deployment_id)
    prepared = replace(prepared, plan=with_ready_timeout(prepared.plan, ready_timeout_s))
    report = run_preflight(fleet, prepared.plan, profile, inventories=prepared.inventories) if preflight else None
    if report is not None and not report.passed:
        raise InputError(
            "pre-flight", "; ".join(f"{r.host or 'cluster'}: {r.check}: {r.reason}" for r in report.failures)
        )
    deploy = DeployService(fleet)
    try:
        launch_started = time.monotonic()
        try:
            snapshot = deploy.launch(prepared.plan, deployment_id=deployment_id, progress=progress)
        except LaunchFailed as failed:
            snapshot = failed.snapshot
        launch_s = time.monotonic() - launch_started
        if not snapshot.final and on_running is not None:
            on_running(deploy, snapshot)
        deadline = time.monotonic() + timeout_s
        while not snapshot.final and time.monotonic() < deadline:
            time.sleep(0.2)
            snapshot = deploy.get(snapshot.id)
        if not snapshot.final:
            snapshot = deploy.stop(snapshot.id, grace_s=5).snapshot
        logs = {
            c.name: read_log(lambda *a: fleet.call(*a, timeout=60), c.host, worker_id(snapshot.id, c.name))
            for c in prepared.plan.commands
        }
    finally:
        deploy.close()
    return WorkloadRun(
        snapshot=snapshot,
        result=result_line(logs),
        logs=logs,
        preflight=report,
        launch_s=launch_s,
        total_s=time.monotonic() - started,
    )
