"""One round of the tiny vLLM through Slurm — `meshdeck bench slurm --local` and the real-Slurm CI test:

submit vLLM's CPU build, TP=2 across the cluster's two nodes (one srun task each, an agent beside each), follow
the job to RUNNING, reach the agents the job started, wait for the engine, send completions, wait until the
engine's metrics (scraped by the head node's agent) are stored, scancel, and count the processes the cluster's
SLURM_CONF left behind. The numbers come back under the names of the bench contract:

    slurm_version, nodes, job_id, states_seen (in order), ready_s, requests_ok, requests_failed,
    metric_rows_stored, stopped_state, leftover_processes
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from meshdeck.core.errors import InputError
from meshdeck.core.text import printable
from meshdeck.launch.slurm_options import slurm_options
from meshdeck.services.completion_load import send_completions
from meshdeck.services.deployments.local import LocalAgents, free_port
from meshdeck.services.history import HistoryRecorder
from meshdeck.services.slurm import SlurmClient
from meshdeck.services.slurm_jobs import SlurmDeployments, local_login
from meshdeck.services.slurm_local import missing_reason, processes_of, start_cluster, stop_cluster
from meshdeck.services.vllm_local import local_vllm_profile, tiny_model_dir
from meshdeck.store.database import Database, open_database
from meshdeck.store.query import list_series, query_range
from meshdeck.store.writer import SampleWriter

ENGINE_METRICS = ("kv_cache_usage_perc", "num_requests_running", "generation_tokens_total", "prompt_tokens_total")
READY_TIMEOUT_S = 900.0
STORED_WAIT_S = 120.0


def stored_rows(db: Database, metrics: Sequence[str], hosts: Sequence[str]) -> tuple[int, float]:
    """Raw rows of `metrics` stored for `hosts`, and the largest generated-token count among them."""
    rows, generated = 0, 0.0
    now = time.time()
    for metric in metrics:
        for series in list_series(db, metric=metric):
            if series.host not in hosts:
                continue
            for stored in query_range(db, since=now - 86400, until=now + 60, series_ids=[series.id], tier="raw"):
                rows += sum(stored.count)
                if metric == "generation_tokens_total":
                    generated = max([generated, *(m for m in stored.maximum if m == m)])
    return rows, generated


def slurm_vllm_round(
    jobs: SlurmDeployments,
    writer: SampleWriter,
    *,
    executable: str,
    conf: Path,
    partition: str | None = None,
    requests: int = 8,
    say: Callable[[str], None] = lambda text: None,
) -> dict[str, Any]:
    """Run the round (see the module doc) and return its numbers; the job is cancelled whatever happens."""
    idle = set(processes_of(conf))
    profile = local_vllm_profile(
        ["slurm-node0", "slurm-node1"],
        executable=executable,
        model=str(tiny_model_dir()),
        port=free_port(),
        master_port=free_port(),
        name="vllm-slurm",
    )
    version = SlurmClient(jobs.fleet, jobs.login.name).version()
    started = time.monotonic()
    record = jobs.submit(profile, slurm_options(job_name=profile.name, partition=partition, time_limit="30"))
    say(f"submitted Slurm job {record.job_id}")
    result: dict[str, Any] = {"slurm_version": version, "nodes": len(profile.hosts), "job_id": record.job_id}
    try:
        record = jobs.wait_ready(
            record.deployment, timeout_s=READY_TIMEOUT_S, progress=lambda r: say(f"job {r.job_id}: {r.state}")
        )
        result["ready_s"] = round(time.monotonic() - started, 2) if record.state == "RUNNING" else None
        if record.state != "RUNNING":
            result["failure"] = jobs.logs(record.deployment, lines=40)
            load_ok = load_failed = 0
        else:
            say(f"serving; sending {requests} completions")
            load = send_completions(
                f"http://127.0.0.1:{profile.vllm.port}/v1", profile.model, requests=requests, concurrency=4
            )
            load_ok, load_failed = load.ok, load.failed
            hosts = [agent.host for agent in jobs.node_agents(record)]
            deadline = time.monotonic() + STORED_WAIT_S
            while time.monotonic() < deadline:
                writer.flush(timeout=10)
                if stored_rows(jobs.db, ["generation_tokens_total"], hosts)[1] >= load.completion_tokens > 0:
                    break
                time.sleep(0.5)
            result["metric_rows_stored"] = stored_rows(jobs.db, ENGINE_METRICS, hosts)[0]
            result["agents_problem"] = jobs.agents_problem.get(record.deployment)
        result["requests_ok"], result["requests_failed"] = load_ok, load_failed
    finally:
        stopped = jobs.stop(record.deployment)
    result["stopped_state"] = stopped.state
    result["states_seen"] = list(stopped.states_seen)
    deadline = time.monotonic() + 20
    while (left := set(processes_of(conf)) - idle) and time.monotonic() < deadline:
        time.sleep(0.2)
    result["leftover_processes"] = len(left)
    if left:
        result["leftover_commands"] = sorted(_command_line(pid) for pid in left)
    result.setdefault("metric_rows_stored", 0)
    return result


def _command_line(pid: int) -> str:
    try:
        return printable(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"), 300)
    except OSError:
        return f"{pid} (gone)"


def run_slurm_bench_local(
    executable: str, *, requests: int = 8, say: Callable[[str], None] = lambda text: None
) -> dict[str, Any]:
    """`bench slurm --local`: a loopback Slurm (services/slurm_local.py) whose login node is this machine's
    agent, the round above on it, and everything stopped after (the cluster's daemons by PID)."""
    reason = missing_reason()
    if reason is not None:
        raise InputError("--local", reason)
    root = Path(tempfile.mkdtemp(prefix="md-slurm-", dir="/tmp"))
    processes: list[subprocess.Popen[bytes]] = []
    saved = os.environ.get("SLURM_CONF")
    try:
        (root / "cluster").mkdir()
        cluster = start_cluster(root / "cluster", processes)
        say(f"Slurm cluster up: {', '.join(cluster.nodes)} (partition {cluster.partition})")
        os.environ["SLURM_CONF"] = str(cluster.conf)  # the login agent (started below) and sbatch read it
        with LocalAgents(1, prefix="slurm-login", root=str(root)) as agents, open_database(root / "md.db") as db:
            writer = SampleWriter(db).start()
            unsubscribe = agents.fleet.subscribe(HistoryRecorder(writer).handle)
            try:
                jobs = SlurmDeployments(agents.fleet, db, local_login(agents.hosts[0], getpass.getuser()))
                return slurm_vllm_round(
                    jobs, writer, executable=executable, conf=cluster.conf, requests=requests, say=say
                )
            finally:
                unsubscribe()
                writer.stop()
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
        stop_cluster(root / "cluster", processes)
        shutil.rmtree(root, ignore_errors=True)
