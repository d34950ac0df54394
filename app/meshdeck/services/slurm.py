"""Slurm's client commands on a cluster's login node, asked through that node's meshdeck agent (`slurm.run`).

A Slurm cluster is added by its login node, an SSH target like any host (`hosts add NAME TARGET --slurm`): the
agent there runs `sinfo`, `squeue`, `sacct`, `sacctmgr`, `sbatch`, `scancel` and `scontrol` as argv lists and
hands back their output, bounded; this module turns the answers into core/slurm_state.py's records. JSON where
the release has it (`--json`: 21.08+, its schema changing by release), the pinned text formats otherwise.

What a cluster says about itself (`cluster_info`): its Slurm version, partitions with nodes and GPUs per node
(GRES), and the user's accounts and QOS from `sacctmgr` — only where accounting runs (slurmdbd); without it the
info says so instead of guessing. Nothing here keeps state: the job records are services/slurm_jobs.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from meshdeck.core.errors import InputError
from meshdeck.core.slurm_state import (
    SACCT_FIELDS,
    SINFO_FORMAT,
    SlurmJob,
    SlurmPartition,
    parse_associations,
    parse_hostnames,
    parse_jobcomp,
    parse_node_addresses,
    parse_sacct,
    parse_scontrol_job,
    parse_sinfo_json,
    parse_sinfo_text,
    parse_squeue_json,
    parse_version,
)
from meshdeck.core.text import printable
from meshdeck.remote.errors import RemoteError, RpcError
from meshdeck.services.fleet import FleetService

DEFAULT_TIMEOUT_S = 30.0
OUTPUT_TAIL_BYTES = 256 * 1024


class SlurmCommandFailed(InputError):
    """A Slurm command exited non-zero; the message is Slurm's own (its stderr), which names what it refused."""

    def __init__(self, command: str, message: str) -> None:
        super().__init__(command, message)
        self.command = command
        self.slurm_message = message


@dataclass(frozen=True)
class SlurmOutput:
    rc: int
    stdout: str
    stderr: str
    truncated: bool = False


@dataclass(frozen=True)
class SlurmClusterInfo:
    """What a login node's Slurm says: `accounting` False means sacctmgr could not answer (no slurmdbd), so
    accounts and QOS are not known (empty), not absent; `problems`: what could not be read, in Slurm's words."""

    login: str
    version: str | None
    partitions: tuple[SlurmPartition, ...] = ()
    accounts: tuple[str, ...] = ()
    qos: tuple[str, ...] = ()
    accounting: bool = False
    problems: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        return {
            "login": self.login,
            "slurm_version": self.version,
            "partitions": [
                {
                    "name": p.name,
                    "nodes": p.node_count,
                    "node_list": p.node_list,
                    "gpus_per_node": p.gpus_per_node,
                    "available": p.available,
                    "default": p.default,
                }
                for p in self.partitions
            ],
            "accounts": list(self.accounts),
            "qos": list(self.qos),
            "accounting": self.accounting,
            "problems": list(self.problems),
        }


class SlurmClient:
    """Slurm's commands on one login host (`login`, a host in `fleet`), each answer parsed once."""

    def __init__(self, fleet: FleetService, login: str) -> None:
        self.fleet = fleet
        self.login = login

    def run(
        self, command: str, *args: str, stdin: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> SlurmOutput:
        """Run `command args...` on the login node; raises RemoteError when the agent cannot be asked."""
        params: dict[str, Any] = {"command": command, "args": list(args), "timeout_s": timeout_s}
        if stdin is not None:
            params["stdin"] = stdin
        reply = self.fleet.call(self.login, "slurm.run", params, timeout=timeout_s + 15.0)
        if not isinstance(reply, dict) or not isinstance(reply.get("rc"), int):
            raise InputError("slurm.run", f"{self.login}: the agent's answer is not a command result")
        return SlurmOutput(
            rc=reply["rc"],
            stdout=str(reply.get("stdout") or ""),
            stderr=str(reply.get("stderr") or ""),
            truncated=bool(reply.get("truncated")),
        )

    def checked(self, command: str, *args: str, stdin: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
        """stdout of a command that must succeed; SlurmCommandFailed with Slurm's message otherwise."""
        done = self.run(command, *args, stdin=stdin, timeout_s=timeout_s)
        if done.rc != 0:
            raise SlurmCommandFailed(command, slurm_message(done))
        return done.stdout

    def version(self) -> str:
        return parse_version(self.checked("sinfo", "--version"))

    def partitions(self) -> tuple[SlurmPartition, ...]:
        done = self.run("sinfo", "--json")
        if done.rc == 0 and not done.truncated:
            try:
                return parse_sinfo_json(done.stdout)
            except InputError:
                pass  # a schema this parser does not know: the pinned text format below says the same
        return parse_sinfo_text(self.checked("sinfo", "-h", "-o", SINFO_FORMAT))

    def associations(self, user: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """(accounts, QOS) of `user`; None when sacctmgr cannot answer (no accounting database)."""
        done = self.run("sacctmgr", "-n", "-P", "show", "assoc", f"user={user}", "format=Account,QOS")
        if done.rc != 0:
            return None
        return parse_associations(done.stdout)

    def submit(self, script: str) -> int:
        """`sbatch --parsable` with the script on stdin -> the job id; Slurm's refusal raises SlurmCommandFailed."""
        out = self.checked("sbatch", "--parsable", stdin=script, timeout_s=60.0)
        first = out.strip().split(";")[0]
        if not first.isdigit():
            raise InputError("sbatch --parsable", f"printed {printable(out, 200)!r}, not a job id")
        return int(first)

    def job(self, job_id: int) -> SlurmJob | None:
        """The job as squeue knows it, or None once it has left squeue (then `final_state`)."""
        done = self.run("squeue", "--json", "--jobs", str(job_id))
        if done.rc != 0:
            if "Invalid job id" in done.stderr:
                return None
            raise SlurmCommandFailed("squeue", slurm_message(done))
        jobs = [job for job in parse_squeue_json(done.stdout) if job.job_id == job_id]
        return jobs[0] if jobs else None

    def job_detail(self, job_id: int) -> tuple[SlurmJob, str | None] | None:
        """`scontrol show job`: the job and its output file (absolute); None once slurmctld forgot it."""
        done = self.run("scontrol", "show", "job", "-o", str(job_id))
        if done.rc != 0:
            return None
        return parse_scontrol_job(done.stdout)

    def final_state(self, job_id: int) -> SlurmJob | None:
        """The state of a job that left squeue: from sacct when accounting runs, else from the completion record
        (JobCompType=jobcomp/filetxt, its file named by JobCompLoc in `scontrol show config`)."""
        done = self.run("sacct", "-n", "-P", "-j", str(job_id), "-o", ",".join(SACCT_FIELDS))
        if done.rc == 0:
            for job in parse_sacct(done.stdout):
                if job.job_id == job_id:
                    return job
        config = self.config()
        if config.get("JobCompType") == "jobcomp/filetxt" and config.get("JobCompLoc"):
            text = self.read_file(config["JobCompLoc"], tail_bytes=1024 * 1024)
            return parse_jobcomp(text, job_id)
        return None

    def config(self) -> dict[str, str]:
        """`scontrol show config` as `Key = value` pairs."""
        found = {}
        for line in self.checked("scontrol", "show", "config").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() and " " not in key.strip():
                found[key.strip()] = value.strip()
        return found

    def cancel(self, job_id: int) -> None:
        self.checked("scancel", str(job_id))

    def hostnames(self, node_list: str) -> tuple[str, ...]:
        return parse_hostnames(self.checked("scontrol", "show", "hostnames", node_list))

    def node_addresses(self, names: tuple[str, ...]) -> dict[str, str]:
        return parse_node_addresses(self.checked("scontrol", "show", "node", "-o", ",".join(names)))

    def read_file(self, path: str, *, tail_bytes: int = OUTPUT_TAIL_BYTES) -> str:
        """The last `tail_bytes` of a file on the login node (a job's output on the shared filesystem)."""
        reply = self.fleet.call(self.login, "files.read", {"path": path, "tail": tail_bytes, "limit": tail_bytes})
        if not isinstance(reply, dict) or not isinstance(reply.get("data"), str):
            raise InputError("files.read", f"{self.login}: the agent's answer is not file data")
        return str(reply["data"])


def cluster_lines(info: SlurmClusterInfo, *, limit: int = 2000) -> list[str]:
    """The cluster in words, a line each (escaped): every partition (nodes, GPUs per node, default, up), the
    user's accounts and QOS where accounting runs, and what could not be read. The CLI and the console show these."""
    lines = []
    for p in info.partitions:
        flags = ("default " if p.default else "") + ("up" if p.available else "DOWN")
        lines.append(f"partition {p.name}: {p.node_count} nodes x {p.gpus_per_node} GPUs ({p.node_list}), {flags}")
    if not info.partitions:
        lines.append("partitions: none readable")
    if info.accounting:
        lines.append(f"accounts  {', '.join(info.accounts) or 'none'}")
        lines.append(f"QOS       {', '.join(info.qos) or 'none'}")
    lines += [f"note      {problem}" for problem in info.problems]
    return [printable(line, limit) for line in lines]


def cluster_text(info: SlurmClusterInfo) -> str:
    """`Slurm 22.05.8` and the cluster's lines (`cluster_lines`), for the console."""
    return "\n".join([f"Slurm {printable(info.version or '(version not known)', 64)}", *cluster_lines(info)])


def slurm_message(done: SlurmOutput) -> str:
    """What Slurm said when it refused (stderr, else stdout), printable and short."""
    text = (done.stderr or done.stdout).strip() or f"exited {done.rc} and printed nothing"
    return printable(text, 2000)


def cluster_info(client: SlurmClient, user: str) -> SlurmClusterInfo:
    """Version, partitions, accounts and QOS; each part that fails is named in `problems`, the rest kept."""
    problems: list[str] = []
    version = None
    partitions: tuple[SlurmPartition, ...] = ()
    try:
        version = client.version()
    except (InputError, RemoteError) as exc:
        problems.append(f"version: {exc}")
    try:
        partitions = client.partitions()
    except (InputError, RemoteError) as exc:
        problems.append(f"partitions: {exc}")
    associations = None
    try:
        associations = client.associations(user)
    except (InputError, RpcError) as exc:
        problems.append(f"accounts: {exc}")
    if associations is None:
        problems.append("accounts and QOS: not known (sacctmgr has no accounting database to ask)")
    accounts, qos = associations or ((), ())
    return SlurmClusterInfo(
        login=client.login,
        version=version,
        partitions=partitions,
        accounts=accounts,
        qos=qos,
        accounting=associations is not None,
        problems=tuple(problems),
    )
