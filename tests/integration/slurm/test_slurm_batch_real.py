"""The batch script from `launch --slurm-script`, submitted to a real Slurm 22.05 (two loopback nodes, 8 fake GPUs
each), and watched with meshdeck's own squeue/sinfo parsers."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from meshdeck.core.slurm_state import (
    SQUEUE_FORMAT,
    SlurmJob,
    parse_sinfo_json,
    parse_sinfo_text,
    parse_squeue_json,
    parse_squeue_text,
)
from meshdeck.launch.build import parse_layout_spec
from meshdeck.launch.slurm_batch import build_batch_script
from meshdeck.launch.slurm_options import slurm_options
from meshdeck.services.deployments.local import free_port, workload_profile
from meshdeck.services.slurm_local import GPUS_PER_NODE, SlurmCluster, processes_of
from slurm_fixtures import NODES_BEYOND_PARTITION


def _python_shim(cluster: SlurmCluster, name: str, *, sleep: bool) -> str:
    """A `python` for the profile that records which node ran which argv, then runs the real Python (or sleeps,
    for the jobs that are cancelled): the script still comes whole from the plan builder."""
    shim = cluster.root / name
    then = "exec sleep 300" if sleep else f'exec {sys.executable} "$@"'
    shim.write_text(
        "#!/bin/bash\n"
        f'printf "%s %s %s\\n" "$SLURM_NODEID" "$SLURMD_NODENAME" "$*" > {cluster.root}/{name}-ran-$SLURM_NODEID\n'
        f"{then}\n"
    )
    shim.chmod(0o755)
    return str(shim)


def _submit(cluster: SlurmCluster, hosts: list[str], python: str, **options: str) -> tuple[str, Path]:
    profile = workload_profile(
        "collectives", parse_layout_spec(f"dp={len(hosts)}"), hosts, python=python, master_port=free_port()
    )
    output = cluster.root / f"job-{time.monotonic_ns()}.out"
    chosen = slurm_options(job_name="meshdeck-test", output=str(output), **options)
    script = build_batch_script(profile, chosen, run_id="slurm-test")
    path = cluster.root / f"job-{time.monotonic_ns()}.sh"
    path.write_text(script.text)
    done = cluster.run("sbatch", "--parsable", str(path), check=False)
    if done.returncode:
        raise SubmitFailed(done.stderr)
    return done.stdout.strip().split(";")[0], output


class SubmitFailed(Exception):
    pass


def _job(cluster: SlurmCluster, job_id: str) -> SlurmJob:
    jobs = {str(j.job_id): j for j in parse_squeue_json(cluster.run("squeue", "--json").stdout)}
    return jobs[job_id]


def _watch(cluster: SlurmCluster, job_id: str, until: set[str], timeout_s: float) -> list[str]:
    """States seen, in order, until one in `until` (squeue keeps finished jobs for MinJobAge)."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = _job(cluster, job_id).state
        if not seen or seen[-1] != state:
            seen.append(state)
        if state in until:
            return seen
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} never reached {until}; seen {seen}")


def test_each_node_runs_its_ranks_argv_and_the_job_completes(slurm_cluster: SlurmCluster) -> None:
    python = _python_shim(slurm_cluster, "py-run", sleep=False)
    job_id, output = _submit(slurm_cluster, ["gpu-a", "gpu-b"], python, partition="debug", time_limit="5")
    seen = _watch(slurm_cluster, job_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout_s=60)
    log = output.read_text(errors="replace")
    assert seen[-1] == "COMPLETED", log[-3000:]
    assert "RUNNING" in seen or "COMPLETING" in seen
    for node_id, node_name in ((0, "node1"), (1, "node2")):
        ran = (slurm_cluster.root / f"py-run-ran-{node_id}").read_text().split()
        assert ran[:2] == [str(node_id), node_name]
        argv = " ".join(ran[2:])
        assert f"--node-rank {node_id} " in argv
        assert "--rdzv-endpoint 127.0.0.1:" in argv and "--local-addr 127.0.0.1" in argv  # NodeAddr, from Slurm
        assert f"is_host={1 if node_id == 0 else 0}" in argv
    assert len(re.findall(r"meshdeck-workload: rank \d+/2 running", log)) == 2, log[-3000:]
    assert "meshdeck: head node1 at 127.0.0.1" in log


def test_scancel_ends_a_running_job_cancelled_and_leaves_no_process(slurm_cluster: SlurmCluster) -> None:
    python = _python_shim(slurm_cluster, "py-sleep", sleep=True)
    idle = set(processes_of(slurm_cluster.conf))  # the daemons and their helpers (slurmctld's slurmscriptd)
    job_id, _ = _submit(slurm_cluster, ["gpu-a", "gpu-b"], python)
    _watch(slurm_cluster, job_id, {"RUNNING"}, timeout_s=20)
    deadline = time.monotonic() + 10
    while not (slurm_cluster.root / "py-sleep-ran-1").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    slurm_cluster.run("scancel", job_id)
    assert _watch(slurm_cluster, job_id, {"CANCELLED"}, timeout_s=20)[-1] == "CANCELLED"
    deadline = time.monotonic() + 10
    while (left := set(processes_of(slurm_cluster.conf)) - idle) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"processes left after scancel: {sorted(left)}"


def test_three_nodes_of_two_stay_pending_with_slurms_reason(slurm_cluster: SlurmCluster) -> None:
    job_id, _ = _submit(slurm_cluster, ["a", "b", "c"], sys.executable)
    time.sleep(1.0)  # a scheduling pass
    job = _job(slurm_cluster, job_id)
    text = {str(j.job_id): j for j in parse_squeue_text(slurm_cluster.run("squeue", "-h", "-o", SQUEUE_FORMAT).stdout)}
    slurm_cluster.run("scancel", job_id)
    assert job.state == "PENDING" and job.reason in NODES_BEYOND_PARTITION  # 3 nodes asked of a 2-node partition
    assert job.node_count == 3 and job.node_list == ""
    assert text[job_id] == job  # the text fallback reads the same record


def test_a_bad_partition_fails_at_submit_with_slurms_message(slurm_cluster: SlurmCluster) -> None:
    with pytest.raises(SubmitFailed, match="invalid partition specified: nope"):
        _submit(slurm_cluster, ["a", "b"], sys.executable, partition="nope")


def test_sinfo_json_and_text_show_the_partition_and_its_gpus(slurm_cluster: SlurmCluster) -> None:
    from_json = parse_sinfo_json(slurm_cluster.run("sinfo", "--json").stdout)
    from_text = parse_sinfo_text(slurm_cluster.run("sinfo", "-h", "-o", "%P|%a|%D|%G|%N").stdout)
    assert [(p.name, p.node_count, p.gpus_per_node, p.available) for p in from_json] == [
        ("debug", 2, GPUS_PER_NODE, True)
    ]
    assert [(p.name, p.node_list, p.node_count, p.gpus_per_node, p.default) for p in from_text] == [
        ("debug", "node[1-2]", 2, GPUS_PER_NODE, True)
    ]
