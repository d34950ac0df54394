"""The demo cluster behind `meshdeck --demo`: two simulated 8×H200 agents on this machine, demo-a and demo-b.

Both agents are real `meshdeck-agent` daemons started through the fleet's local transport (the
same code path as a server reached over SSH, minus SSH) with `--simulate 8xH200`: their GPUs,
NVLink/PCIe/InfiniBand traffic and vLLM stand-ins are simulated and say so in every inventory and
sample. Torch workloads they start are real processes. The demo has its own database, sockets and
known_hosts in a fresh folder, so it never touches the operator's real hosts, and `shutdown()`
stops both daemons and removes that folder. No Qt here.

Every port the demo's engines open is chosen free when its profile is made (`on_free_ports`): vLLM's API,
torch.distributed master, data-parallel RPC and Ray ports, torchrun's rendezvous. The fixed defaults (29550,
29501, ...) made a second demo on the same machine, or anything else listening there, fail its launch.

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from meshdeck_agent import protocol

from meshdeck import __version__
from meshdeck.core.layout_plan import LayoutPlan
from meshdeck.core.planner import PlanResult
from meshdeck.launch.profile import Layout, Profile, profile_from_mapping, profile_to_mapping
from meshdeck.services.deployments.local import workload_profile
from meshdeck.services.deployments.targets import LOCAL_ADDRESS
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
        survives the app), then the daemons — every agent at once — the fleet, the database; end what is
        left of their processes (`ProcessSweep`) and remove the folder."""
        if self._closed:
            return
        self._closed = True
        processes = ProcessSweep(str(self.folder))
        processes.look()  # before anything stops: the engines are still below their keepers
        names = list(dict.fromkeys([*self.fleet.hosts(), *self.hosts, *self.real_hosts]))
        with ThreadPoolExecutor(max_workers=max(1, len(names)), thread_name_prefix="demo-stop") as pool:
            list(
                pool.map(lambda name: self._stop_agent(name, timeout), names)
            )  # all at once: each waits for its engines
        self.fleet.close()
        self.db.close()
        processes.sweep()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _stop_agent(self, name: str, timeout: float) -> None:
        """One agent's workers, then the agent: through the fleet, else directly on its socket (not connected,
        or a daemon `attach` started before the fleet connected to it)."""
        try:
            stop_workers(lambda method, params=None: self.fleet.call(name, method, params, timeout=timeout))
            self.fleet.call(name, "agent.shutdown", timeout=timeout)
            return
        except Exception as exc:
            log.info("demo: shutting down %s through the fleet: %s", name, exc)
        socket_path = self.folder / f"{name}.sock"
        if socket_path.exists():
            shutdown_agent_socket(socket_path, timeout)


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


class ProcessSweep:
    """The processes of a marker (Linux /proc): those whose command line names it — the demo's own unique
    temporary folder, so only the demo's daemons and keepers match — and every process they started (an
    engine's command line does not name the folder: the real vLLM and its workers, torchrun's ranks).

    `look()` remembers what it saw (by PID and start time, so a reused PID is never taken for one of them):
    an engine whose keeper has gone is still found later, though nothing marked is above it any more."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.seen: dict[tuple[int, int], str] = {}  # (pid, start time) -> command line

    def look(self) -> dict[int, str]:
        """The marker's processes alive now: PID -> command line."""
        proc = Path("/proc")
        if not proc.is_dir():
            return {}
        parents: dict[int, int] = {}
        started: dict[int, int] = {}
        commands: dict[int, str] = {}
        for entry in proc.iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                stat = (entry / "stat").read_bytes()
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            pid = int(entry.name)
            fields = stat[stat.rindex(b")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...
            parents[pid], started[pid], commands[pid] = int(fields[1]), int(fields[19]), cmdline
        found = {pid for pid in commands if self.marker in commands[pid] or (pid, started[pid]) in self.seen}
        below = found
        while below:  # and what they started, generation by generation
            below = {pid for pid, parent in parents.items() if parent in below and pid not in found}
            found |= below
        self.seen.update(((pid, started[pid]), commands[pid]) for pid in found)
        return {pid: commands[pid] for pid in found}

    def sweep(self, grace_s: float = 5.0) -> list[int]:
        """Last resort: end the processes that have not exited by themselves within `grace_s` (daemons told
        to shut down take a moment): SIGTERM, then SIGKILL a second later. Returns the PIDs ended."""
        deadline = time.monotonic() + grace_s
        left = self.look()
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = self.look()
        for pid, cmdline in left.items():
            log.warning("demo: ending leftover process %d: %s", pid, cmdline[:200])
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
        time.sleep(1.0 if left else 0.0)
        for pid in self.look():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return list(left)


def sweep_processes(marker: str, grace_s: float = 5.0) -> list[int]:
    """`ProcessSweep(marker).sweep(grace_s)`: end what the marker's processes left running."""
    return ProcessSweep(marker).sweep(grace_s)


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


def free_ports(count: int) -> list[int]:
    """`count` different ports free on this machine now (held open together while chosen: never one twice)."""
    probes: list[socket.socket] = []
    try:
        for _ in range(count):
            probe = socket.socket()
            probes.append(probe)
            probe.bind((LOCAL_ADDRESS, 0))
        return [int(probe.getsockname()[1]) for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def on_free_ports(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A profile mapping with every port its engine opens chosen free: vLLM's API, torch.distributed master,
    data-parallel RPC and Ray ports (the defaults 8000, 29501, 29550, 6379), or torchrun's rendezvous (29500)."""
    data = dict(mapping)
    if data.get("engine", "vllm") == "vllm":
        api, master, rpc, ray = free_ports(4)
        ports = {"port": api, "master_port": master, "data_parallel_rpc_port": rpc, "ray_port": ray}
        data["vllm"] = {**dict(data.get("vllm") or {}), **ports}
    else:
        data["torch"] = {**dict(data.get("torch") or {}), "master_port": free_ports(1)[0]}
    return data


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
    """The planner's profile for the demo, named for the demo, every port free on this machine."""
    return profile_from_mapping({**on_free_ports(mapping), "name": DEMO_VLLM_PROFILE}, source="demo")


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
    return profile_from_mapping({**on_free_ports(profile_to_mapping(base)), "name": DEMO_TORCH_PROFILE}, source="demo")


def demo_real_vllm_profile(executable: str, hosts: tuple[str, ...] = REAL_VLLM_HOSTS) -> Profile:
    """The real engine's profile: vLLM's CPU build, TP=2 over the two real demo agents, free ports, a 32 MiB KV
    pool (7,280 tokens: the demo's eight requests in flight fill a visible share of it)."""
    placeholder = 1  # every port is chosen free below
    profile = local_vllm_profile(hosts, executable=executable, model=str(tiny_model_dir()), port=placeholder,
                                 master_port=placeholder, name=DEMO_REAL_VLLM_PROFILE, kv_cache_memory="32M")  # fmt: skip
    return profile_from_mapping(on_free_ports(profile_to_mapping(profile)), source="demo")
