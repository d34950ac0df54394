"""The demo cluster behind `meshdeck --demo`: two simulated 8×H200 agents on this machine, demo-a and demo-b.

Both agents are real `meshdeck-agent` daemons started through the fleet's local transport (the
same code path as a server reached over SSH, minus SSH) with `--simulate 8xH200`: their GPUs,
NVLink/PCIe/InfiniBand traffic and vLLM stand-ins are simulated and say so in every inventory and
sample. Torch workloads they start are real processes. The demo has its own database, sockets and
known_hosts in a fresh folder, so it never touches the operator's real hosts, and `shutdown()`
stops both daemons and removes that folder. No Qt here.

The demo's two deployments are ordinary profiles: the layout the demo chooses for its two hosts — the
planner's best-ranked layout that runs as ONE deployment over both (vLLM, simulated by the agents
because the hosts are; the layouts ranked above it are several independent instances, and the profile's
note names its rank: `demo_layout_note`) — and the launch engineer's tiny DeepSeek-shaped torch
workload, which really runs (gloo on CPU) across the two agents.

With `--real-vllm` (and vLLM's CPU build from `make vllm-venv`) two more agents, cpu-a and cpu-b, run
unsimulated: a real vLLM serves the tiny DeepSeek-V3-shaped model TP=2 across them
(services.vllm_local's profile), labelled real wherever it shows.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from meshdeck_agent import protocol

from meshdeck import __version__
from meshdeck.core.layout_plan import LayoutPlan
from meshdeck.core.planner import PlanResult
from meshdeck.launch.profile import Layout, Profile, profile_from_mapping, profile_to_mapping
from meshdeck.services.deployments.local import free_port, workload_profile
from meshdeck.services.fleet import FleetService, FleetSettings
from meshdeck.services.vllm_local import local_vllm_profile, tiny_model_dir
from meshdeck.store.database import Database, open_database

log = logging.getLogger(__name__)

DEMO_HOSTS = ("demo-a", "demo-b")
REAL_VLLM_HOSTS = ("cpu-a", "cpu-b")  # real (unsimulated) agents of this machine for the real vLLM
DEMO_SPEC = "8xH200"
SHUTDOWN_TIMEOUT_S = 10.0


@dataclass
class DemoCluster:
    fleet: FleetService
    db: Database
    folder: Path
    hosts: tuple[str, ...] = DEMO_HOSTS
    spec: str = DEMO_SPEC
    real_vllm: str | None = None  # vLLM's CPU build (its `vllm` launcher) when the demo runs the real engine
    real_hosts: tuple[str, ...] = ()
    _closed: bool = field(default=False, repr=False)

    @classmethod
    def start(
        cls,
        *,
        db_path: str | Path | None = None,
        spec: str = DEMO_SPEC,
        hosts: tuple[str, ...] = DEMO_HOSTS,
        interval_s: float = 1.0,
        fleet_settings: FleetSettings | None = None,
        real_vllm: str | None = None,
    ) -> DemoCluster:
        """Open the demo database and start supervising one simulated local agent per host name (and, with
        `real_vllm`, the real agents REAL_VLLM_HOSTS for the real engine).

        The folder lives under /tmp: agent sockets need short paths (108 bytes of sun_path)."""
        folder = Path(tempfile.mkdtemp(prefix="meshdeck-demo-", dir="/tmp" if Path("/tmp").is_dir() else None))
        try:
            db = open_database(db_path or folder / "demo.sqlite")
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        settings = fleet_settings or FleetSettings(known_hosts=str(folder / "known_hosts"), ssh_config=None)
        fleet = FleetService(settings)
        real_hosts = REAL_VLLM_HOSTS if real_vllm else ()
        cluster = cls(fleet=fleet, db=db, folder=folder, hosts=hosts, spec=spec, real_vllm=real_vllm,
                      real_hosts=real_hosts)  # fmt: skip
        try:
            for name in (*hosts, *real_hosts):
                fleet.add_local(
                    name,
                    simulate=None if name in real_hosts else spec,
                    socket=str(folder / f"{name}.sock"),
                    state_dir=str(folder / name),
                    interval_s=interval_s,
                )
        except BaseException:
            cluster.shutdown()
            raise
        log.info("demo cluster: %s (simulated %s) in %s", ", ".join(hosts), spec, folder)
        return cluster

    def shutdown(self, timeout: float = SHUTDOWN_TIMEOUT_S) -> None:
        """Stop what the demo's agents run (workers outlive their daemon on purpose: a real deployment
        survives the app), then both daemons, the fleet, the database; remove the folder."""
        if self._closed:
            return
        self._closed = True
        for name in self.fleet.hosts():
            try:
                stop_workers(
                    lambda method, params=None, name=name: self.fleet.call(name, method, params, timeout=timeout)
                )
                self.fleet.call(name, "agent.shutdown", timeout=timeout)
            except Exception as exc:  # not connected (yet): asked directly on its socket below
                log.info("demo: shutting down %s through the fleet: %s", name, exc)
        self.fleet.close()
        for name in (*self.hosts, *self.real_hosts):  # a daemon `attach` started before the fleet connected to it
            socket_path = self.folder / f"{name}.sock"
            if socket_path.exists():
                shutdown_agent_socket(socket_path, timeout)
        self.db.close()
        sweep_processes(str(self.folder))
        shutil.rmtree(self.folder, ignore_errors=True)


def stop_workers(call: Callable[..., Any], grace_s: float = 2.0) -> int:
    """Stop every worker an agent still runs; returns how many were asked to stop."""
    stopped = 0
    for worker in call("workers.list").get("workers") or []:
        if worker.get("state") in ("starting", "running", "restarting"):
            call("workers.stop", {"id": worker["id"], "grace_s": grace_s})
            stopped += 1
    return stopped


def shutdown_agent_socket(path: Path, timeout: float = SHUTDOWN_TIMEOUT_S) -> bool:
    """Stop the workers of the daemon on a Unix socket, then the daemon. False when none answered."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(timeout)
            connection.connect(str(path))
            reader = connection.makefile("rb")
            connection.sendall(protocol.encode(protocol.hello(__version__)))
            ids = iter(range(1, 1_000_000))

            def call(method: str, params: dict[str, Any] | None = None) -> Any:
                request_id = next(ids)
                connection.sendall(protocol.encode(protocol.request(request_id, method, params)))
                for _ in range(1000):  # hello and sample events may come first
                    line = reader.readline()
                    if not line:
                        raise ConnectionError("the agent closed the connection")
                    message = protocol.decode(line)
                    if isinstance(message, protocol.Response) and message.id == request_id:
                        return message.result
                    if isinstance(message, protocol.ErrorReply) and message.id == request_id:
                        raise RuntimeError(f"{method}: {message.code}: {message.message}")
                raise TimeoutError(f"{method}: no answer")

            stop_workers(call)
            call("agent.shutdown")
            return True
    except (OSError, ConnectionError, RuntimeError, protocol.ProtocolError) as exc:
        log.info("demo: no agent answered on %s: %s", path, exc)
    return False


def sweep_processes(marker: str, grace_s: float = 5.0) -> list[int]:
    """Last resort (Linux): end any process whose command line names `marker` — the demo's own unique
    temporary folder, so only the demo's daemons, keepers and workers can match — that has not exited
    by itself within `grace_s` (daemons told to shut down take a moment). Returns the PIDs ended."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []

    def alive() -> dict[int, str]:
        found = {}
        for entry in proc.iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline:
                found[int(entry.name)] = cmdline
        return found

    deadline = time.monotonic() + grace_s
    left = alive()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = alive()
    for pid, cmdline in left.items():
        log.warning("demo: ending leftover process %d: %s", pid, cmdline[:200])
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    time.sleep(1.0 if left else 0.0)
    for pid in alive():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return list(left)


# -- the demo's profiles ------------------------------------------------------------------------------

DEMO_VLLM_PROFILE = "demo-deepseek-v3.2"
DEMO_TORCH_PROFILE = "demo-tiny-deepseek"
DEMO_REAL_VLLM_PROFILE = "demo-real-vllm-cpu"


def choose_demo_layout(result: PlanResult, nodes: int) -> LayoutPlan | None:
    """The best-ranked layout that fits and runs as one deployment over all `nodes` hosts (else the best fitting)."""
    fitting = result.fitting
    whole = [layout for layout in fitting if layout.instances == 1 and layout.nodes == nodes]
    candidates = whole or fitting
    return candidates[0] if candidates else None


def demo_layout_note(result: PlanResult, layout: LayoutPlan) -> str:
    """What the demo's vLLM profile is, with its rank in the plan: the words its saved version carries."""
    rank = next((i for i, planned in enumerate(result.layouts, start=1) if planned is layout), 0)
    text = f"the layout the demo chooses for its two hosts: rank {rank} of the plan, {layout.label()}"
    if rank == 1:
        return text + ", the planner's best"
    return text + (
        f", the best-ranked that runs as one deployment over both hosts (ranks 1–{rank - 1} do not: several "
        "independent instances, or fewer hosts)"
    )


def demo_vllm_profile(mapping: Mapping[str, Any]) -> Profile:
    """The planner's profile for the demo, named for the demo and on a free API port of this machine."""
    data = dict(mapping)
    data["name"] = DEMO_VLLM_PROFILE
    data["vllm"] = {**dict(data.get("vllm") or {}), "port": free_port()}
    return profile_from_mapping(data, source="demo")


def torch_python() -> str | None:
    """A Python that can run the torch workload: this one, or (in the packaged app, which carries no
    torch) `python3` on PATH if it imports torch. None when there is none: the demo skips that run."""
    if not getattr(sys, "frozen", False):
        return sys.executable
    candidate = shutil.which("python3")
    if candidate is None:
        return None
    try:
        subprocess.run([candidate, "-c", "import torch.distributed"], check=True, capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    return candidate


def demo_torch_profile(hosts: tuple[str, ...] = DEMO_HOSTS, python: str | None = None) -> Profile:
    """A real torch.distributed run of the tiny DeepSeek-shaped model: TP=2, one rank per demo host, gloo on CPU."""
    base = workload_profile("tiny-deepseek", Layout(tensor_parallel=len(hosts)), hosts, python=python or sys.executable)
    return profile_from_mapping({**profile_to_mapping(base), "name": DEMO_TORCH_PROFILE}, source="demo")


def demo_real_vllm_profile(executable: str, hosts: tuple[str, ...] = REAL_VLLM_HOSTS) -> Profile:
    """The real engine's profile: vLLM's CPU build, TP=2 over the two real demo agents, free ports, a 32 MiB KV
    pool (7,280 tokens: the demo's eight requests in flight fill a visible share of it)."""
    return local_vllm_profile(hosts, executable=executable, model=str(tiny_model_dir()), port=free_port(),
                              master_port=free_port(), name=DEMO_REAL_VLLM_PROFILE, kv_cache_memory="32M")  # fmt: skip
