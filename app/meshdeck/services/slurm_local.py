"""A real Slurm cluster (Debian's 22.05) of two nodes on loopback, started from a temp dir: the Slurm tests'
cluster and `meshdeck bench slurm --local`'s.

munged (its own key and socket), `slurmctld -D -i` and one `slurmd -D -N nodeI` per node, all plain foreground
processes so each is stopped by its own PID at the end. Every node has `NodeAddr=127.0.0.1` and its own
`Port`; its 8 "GPUs" are character devices made with `mknod c 195 N` (Slurm refuses plain files in gres.conf).
Accounting is off; finished jobs are read from `JobCompType=jobcomp/filetxt`.

`make system-deps` installs Slurm's Debian packages as root, so under CI (CI set) missing binaries fail the
tests; elsewhere they skip, naming the packages (`missing_reason`). Daemons need root here (SlurmUser=root, mknod).
It is a test bed, not a cluster to serve from: every "GPU" is a fake device.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel", "scontrol")
PACKAGES = "slurmctld slurmd slurm-client munge"
NODES = ("node1", "node2")
GPUS_PER_NODE = 8
PARTITION = "debug"


@dataclass(frozen=True)
class SlurmCluster:
    """The running cluster: where its files are and the env its client commands need (SLURM_CONF)."""

    root: Path
    conf: Path
    nodes: tuple[str, ...]
    partition: str
    pids: tuple[int, ...]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster (argv, never a shell line)."""
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, check=check, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def missing_reason() -> str | None:
    missing = [name for name in BINARIES if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]
    if missing:
        return f"Slurm binaries missing ({', '.join(missing)}): apt-get install {PACKAGES} (make system-deps as root)"
    if os.geteuid() != 0:
        return "the loopback Slurm cluster runs its daemons as root (SlurmUser=root, mknod for the fake GPUs)"
    return None


def _write_config(root: Path, munge_socket: Path) -> Path:
    devices = root / "dev"
    devices.mkdir()
    for index in range(GPUS_PER_NODE):
        os.mknod(devices / f"nvidia{index}", 0o600 | 0o020000, os.makedev(195, index))
    ports = [_free_port() for _ in range(len(NODES) + 1)]
    node_lines = [
        f"NodeName={name} NodeAddr=127.0.0.1 Port={port} CPUs=2 Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN"
        for name, port in zip(NODES, ports[1:], strict=True)
    ]
    conf = root / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=meshdeck-test",
                "SlurmctldHost=localhost(127.0.0.1)",
                f"SlurmctldPort={ports[0]}",
                "AuthType=auth/munge",
                f"AuthInfo=socket={munge_socket}",
                "SlurmUser=root",
                "SlurmdUser=root",
                f"StateSaveLocation={root}/state",
                f"SlurmdSpoolDir={root}/spool-%n",
                f"SlurmctldPidFile={root}/slurmctld.pid",
                f"SlurmdPidFile={root}/slurmd-%n.pid",
                f"SlurmctldLogFile={root}/slurmctld.log",
                f"SlurmdLogFile={root}/slurmd-%n.log",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "GresTypes=gpu",
                "JobCompType=jobcomp/filetxt",
                f"JobCompLoc={root}/jobcomp.txt",
                "AccountingStorageType=accounting_storage/none",
                "JobAcctGatherType=jobacct_gather/none",
                "MpiDefault=none",
                "ReturnToService=2",
                "SchedulerType=sched/backfill",
                "SlurmdParameters=config_overrides",
                "MinJobAge=300",
                "KillWait=1",
                "OverTimeLimit=0",
                "InactiveLimit=0",
                *node_lines,
                f"PartitionName={PARTITION} Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    (root / "gres.conf").write_text(
        f"NodeName={NODES[0]},{NODES[1]} Name=gpu File={devices}/nvidia[0-{GPUS_PER_NODE - 1}]\n"
    )
    return conf


def _wait_until(ready: object, what: str, log: Path, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(ready) and ready():
            return
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
    raise RuntimeError(f"{what} did not come up in {timeout_s:g} s; log tail:\n{tail}")


def processes_of(conf: Path) -> list[int]:
    """PIDs of every process carrying this cluster's SLURM_CONF: its daemons, slurmstepd and the jobs' tasks
    (they inherit it from slurmd), and no one else's."""
    marker = f"SLURM_CONF={conf}".encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in reversed(processes):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in reversed(processes):
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def start_cluster(root: Path, processes: list[subprocess.Popen[bytes]]) -> SlurmCluster:
    """munged, slurmctld and the slurmds started under `root` (each appended to `processes` as it starts),
    returned once both nodes are idle in sinfo."""
    for sub in ("state", "munge"):
        (root / sub).mkdir(mode=0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    munge_socket = root / "munge" / "munge.socket"
    conf = _write_config(root, munge_socket)
    env = {**os.environ, "SLURM_CONF": str(conf)}

    def daemon(argv: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)

    processes.append(
        daemon(
            [
                "munged",
                "-F",
                "--force",
                f"--socket={munge_socket}",
                f"--key-file={key}",
                f"--pid-file={root}/munge/munged.pid",
                f"--log-file={root}/munge/munged.log",
                f"--seed-file={root}/munge/munged.seed",
            ]
        )
    )
    _wait_until(munge_socket.exists, "munged", root / "munge" / "munged.log")
    processes.append(daemon(["slurmctld", "-D", "-i", "-f", str(conf)]))
    for node in NODES:
        processes.append(daemon(["slurmd", "-D", "-N", node, "-f", str(conf)]))
    cluster = SlurmCluster(root, conf, NODES, PARTITION, tuple(p.pid for p in processes))

    def idle() -> bool:
        done = cluster.run("sinfo", "-h", "-N", "-o", "%N %t", check=False, timeout=5)
        states = [line.split()[-1] for line in done.stdout.splitlines() if line.strip()]
        return done.returncode == 0 and len(states) == len(NODES) and all(s == "idle" for s in states)

    _wait_until(idle, "the two slurmd nodes (idle in sinfo)", root / "slurmctld.log", timeout_s=30.0)
    return cluster


def stop_cluster(root: Path, processes: list[subprocess.Popen[bytes]]) -> None:
    """Every daemon by its PID, then any slurmstepd or task still carrying this cluster's SLURM_CONF."""
    _stop(processes)
    for pid in processes_of(root / "slurm.conf"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
