"""What meshdeck reads from Slurm beyond squeue (scontrol, the completion record, sacctmgr, versions), how a job's
record keeps the states seen, and the batch script's agents beside each node's engine."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
from meshdeck.core.errors import InputError
from meshdeck.core.slurm_state import (
    parse_associations,
    parse_hostnames,
    parse_jobcomp,
    parse_node_addresses,
    parse_scontrol_job,
    parse_version,
)
from meshdeck.launch.build import parse_layout_spec
from meshdeck.launch.slurm_batch import (
    AGENT_CLEANUP,
    SOCKET_IFNAME_VARS,
    JobAgents,
    build_batch_script,
    interface_lines,
    job_agent_socket,
    socket_interfaces,
)
from meshdeck.launch.slurm_options import slurm_options
from meshdeck.services.deployments.local import workload_profile
from meshdeck.services.slurm_jobs import deployment_state
from meshdeck.services.vllm_local import local_vllm_profile
from meshdeck.store.database import open_database
from meshdeck.store.slurm_jobs import SlurmJobRecord, add_slurm_job, list_slurm_jobs, note_state

# As Slurm 22.05 prints them (captured from the loopback cluster the integration tests start).
SCONTROL_JOB = (
    "JobId=12 JobName=vllm-cpu UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=1 Nice=0 Account=(null) "
    "QOS=(null) JobState=PENDING Reason=Resources Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 "
    "NodeList=(null) NumNodes=2-2 NumCPUs=2 StdErr=/root/meshdeck-vllm-cpu-12.out "
    "StdIn=/dev/null StdOut=/root/meshdeck-vllm-cpu-12.out Power=\n"
)
JOBCOMP = (
    "JobId=11 UserId=root(0) GroupId=root(0) Name=sleeper JobState=CANCELLED Partition=debug TimeLimit=5 "
    "StartTime=2026-12-04T10:00:00 EndTime=2026-12-04T10:00:09 NodeList=node[1-2] NodeCnt=2 ProcCnt=2\n"
    "JobId=12 UserId=root(0) GroupId=root(0) Name=t JobState=TIMEOUT Partition=debug TimeLimit=1 "
    "NodeList=node1 NodeCnt=1 ProcCnt=1\n"
)


def test_scontrol_show_job_gives_the_state_reason_and_output_file() -> None:
    job, output = parse_scontrol_job(SCONTROL_JOB)
    assert (job.job_id, job.state, job.reason, job.node_list, job.node_count) == (12, "PENDING", "Resources", "", 2)
    assert output == "/root/meshdeck-vllm-cpu-12.out"
    with pytest.raises(InputError, match="JobState"):
        parse_scontrol_job("JobId=3 JobState=DANCING")


def test_the_completion_record_gives_the_last_state_of_a_job_that_left_squeue() -> None:
    assert parse_jobcomp(JOBCOMP, 12).state == "TIMEOUT"  # type: ignore[union-attr]
    assert parse_jobcomp(JOBCOMP, 11).node_list == "node[1-2]"  # type: ignore[union-attr]
    assert parse_jobcomp(JOBCOMP, 1) is None  # JobId=1 is not JobId=11


def test_node_names_addresses_accounts_and_version() -> None:
    assert parse_hostnames("node1\nnode2\n") == ("node1", "node2")
    with pytest.raises(InputError, match="not a node name"):
        parse_hostnames("node1; rm -rf /\n")
    nodes = "NodeName=node1 Arch=x86_64 NodeAddr=10.0.0.1 NodeHostName=node1\nNodeName=node2 NodeHostName=node2\n"
    assert parse_node_addresses(nodes) == {"node1": "10.0.0.1", "node2": "node2"}
    assert parse_associations("proj|normal,high\nlab|normal\n") == (("proj", "lab"), ("normal", "high"))
    assert parse_version("slurm 22.05.8\n") == "22.05.8"
    with pytest.raises(InputError, match="names no Slurm version"):
        parse_version("bash: sinfo: command not found")


def test_a_jobs_record_keeps_each_state_once_in_order_and_closes_at_the_final_one(tmp_path: Path) -> None:
    with open_database(tmp_path / "m.db") as db:
        add_slurm_job(db, SlurmJobRecord("d1", "hpc", 12, "p", "vllm", 2, reason="Priority"))
        assert note_state(db, "d1", "PENDING", "Priority")[1] is False
        assert note_state(db, "d1", "PENDING", "Resources")[1] is True  # the reason changed
        note_state(db, "d1", "RUNNING", None, node_names=("node1", "node2"))
        note_state(db, "d1", "RUNNING", None)
        ended, changed = note_state(db, "d1", "TIMEOUT", None)
        assert changed and ended.final and ended.ended_at is not None
        assert ended.states_seen == ("PENDING", "RUNNING", "TIMEOUT") and ended.node_names == ("node1", "node2")
        assert note_state(db, "d1", "RUNNING", None) == (ended, False)  # a final state is the last word
        assert [r.deployment for r in list_slurm_jobs(db, open_only=True)] == []
        with pytest.raises(InputError, match=r"slurm_job\.state"):
            note_state(db, "d1", "DANCING", None)
    assert [deployment_state(s) for s in ("PENDING", "RUNNING", "COMPLETING", "CANCELLED", "TIMEOUT")] == [
        "starting", "running", "stopping", "stopped", "failed"
    ]  # fmt: skip


def test_each_node_starts_its_agent_in_the_job_watching_its_engine() -> None:
    profile = local_vllm_profile(["a", "b"], executable="vllm", model="/m", port=8123, master_port=29511)
    agents = JobAgents(("python3", "-I", "/home/me/.cache/meshdeck/agent.pyz"))
    text = build_batch_script(profile, slurm_options(job_name="j"), run_id="dep-1", agents=agents).text
    task = shlex.split(text.split("\nsrun ", 1)[1])[-1]
    assert 'agent_dir="/tmp/meshdeck-slurm-${SLURM_JOB_ID}-${SLURM_NODEID}"' in task
    head = task.split("\n0) ", 1)[1].split("\n1) ")[0]
    worker = task.split("\n1) ", 1)[1].split("\n*) ")[0]
    assert head.startswith("python3 -I /home/me/.cache/meshdeck/agent.pyz serve --interval 1.0 --watch-engine ")
    assert "dep-1.vllm-node0=http://127.0.0.1:8123/metrics" in head
    assert '--socket "$agent_dir/agent.sock"' in head and " & agent_pid=$!; env " in head
    assert head.rstrip().endswith('& engine_pid=$!; wait "$engine_pid" ;;') and AGENT_CLEANUP in task
    assert "--watch-engine" not in worker and " serve " in worker  # the headless node serves no API
    assert job_agent_socket(12, 1) == "/tmp/meshdeck-slurm-12-1/agent.sock"
    plain = build_batch_script(
        workload_profile("collectives", parse_layout_spec("dp=2"), ["a", "b"], master_port=29500),
        slurm_options(job_name="j"),
        run_id="r",
    ).text
    assert "agent_dir" not in plain


def _branch(tmp_path: Path, engine: str, *, signal_after_s: float | None = None) -> tuple[int, Path]:
    """Run the task script's agent bookkeeping for real: `sleep` as the agent, `engine` as the engine."""
    agent_dir = tmp_path / "meshdeck-slurm-7-0"
    script = "\n".join([
        "set -euo pipefail",
        f"agent_dir={shlex.quote(str(agent_dir))}",
        'mkdir -p -m 700 "$agent_dir"',
        "agent_pid=",
        "engine_pid=",
        AGENT_CLEANUP,
        'case 0 in',
        f'0) sleep 300 & agent_pid=$!; {engine} & engine_pid=$!; wait "$engine_pid" ;;',
        "esac",
    ])  # fmt: skip
    shell = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    if signal_after_s is not None:
        time.sleep(signal_after_s)
        os.killpg(shell.pid, signal.SIGTERM)  # as Slurm signals every process of the step at scancel
    return shell.wait(timeout=30), agent_dir


def test_the_task_ends_with_its_engines_status_and_leaves_no_agent_or_directory(tmp_path: Path) -> None:
    before = _sleepers()
    rc, agent_dir = _branch(tmp_path, "sh -c 'sleep 0.2; exit 7'")
    assert rc == 7 and not agent_dir.exists()
    rc, agent_dir = _branch(tmp_path, "sleep 30", signal_after_s=0.5)
    assert rc == -signal.SIGTERM and not agent_dir.exists()
    assert not _sleepers() - before  # neither the agent's stand-in nor the engine is left


def test_a_signalled_task_waits_for_its_engine_to_finish_its_shutdown(tmp_path: Path) -> None:
    """The engine's graceful stop (vLLM drains) is not cut short by the task's shell exiting first."""
    marker = tmp_path / "drained"
    engine = f"sh -c 'trap \"sleep 0.5; touch {marker}; exit 0\" TERM; while :; do sleep 0.05; done'"
    rc, agent_dir = _branch(tmp_path, engine, signal_after_s=0.5)
    assert marker.exists() and not agent_dir.exists() and rc == -signal.SIGTERM


def _sleepers() -> set[str]:
    out = subprocess.run(["pgrep", "-a", "-f", "^sleep (300|30)$"], capture_output=True, text=True).stdout
    return {line.split(" ", 1)[1] for line in out.splitlines() if " " in line}


@pytest.mark.parametrize(
    ("node_addr", "expected"),
    [("127.0.0.1", "lo"), ("localhost", "lo"), ("203.0.113.9", "")],  # 203.0.113.0/24: TEST-NET-3, on no interface
)
def test_each_node_sets_the_socket_interfaces_to_the_one_holding_its_nodeaddr(node_addr: str, expected: str) -> None:
    script = "\n".join(["set -euo pipefail", *interface_lines(SOCKET_IFNAME_VARS),
                        'echo "${NCCL_SOCKET_IFNAME:-}|${GLOO_SOCKET_IFNAME:-}"'])  # fmt: skip
    env = {"PATH": os.environ["PATH"], "MESHDECK_SLURM_NODE_ADDR": node_addr, "SLURMD_NODENAME": "node1"}
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.strip() == f"{expected}|{expected}", done
    said = "NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME=lo (holds" if expected else "no interface holds NodeAddr 203.0.113.9"
    assert said in done.stderr


def test_the_profiles_own_interfaces_win_and_one_node_needs_none() -> None:
    hosts = ["a", "b"]
    profile = workload_profile("collectives", parse_layout_spec("dp=2"), hosts, master_port=29500)
    assert socket_interfaces(profile) == SOCKET_IFNAME_VARS
    pinned = workload_profile("collectives", parse_layout_spec("dp=2"), hosts, master_port=29500,
                              env={"NCCL_SOCKET_IFNAME": "ib0"})  # fmt: skip
    assert socket_interfaces(pinned) == ("GLOO_SOCKET_IFNAME",)
    text = build_batch_script(pinned, slurm_options(job_name="j"), run_id="r").text
    assert 'export GLOO_SOCKET_IFNAME="$node_if"' in shlex.split(text.split("\nsrun ", 1)[1])[-1]
    single = workload_profile("collectives", parse_layout_spec("dp=1"), ["a"], master_port=29500)
    assert (
        socket_interfaces(single) == ()
        and "node_if" not in build_batch_script(single, slurm_options(job_name="j"), run_id="r").text
    )
