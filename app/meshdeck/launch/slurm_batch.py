"""A profile's launch plan as one Slurm batch script (`meshdeck launch PROFILE --slurm-script`).

On a Slurm cluster the scheduler picks the nodes, so nothing may be started on them behind its back: the job
itself must start each node's command. The script asks for the plan's nodes (one task per node, the profile's
GPUs per node as GRES) and runs ONE `srun` step whose per-task script picks its node's command by
`$SLURM_NODEID` (0..N-1, in the allocation's host order, so node 0 is the head). Each branch is the plan's
argv and env for that rank, exactly as `launch --dry-run` builds them, each word shell-quoted; only two values
come from the allocation, because only Slurm knows them when the job starts:

- the head's address: the allocation's first host (`scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1`)
  and its `NodeAddr` from `scontrol show node`, resolved once in the batch script (which Slurm runs on that
  host) and passed to every task in `MESHDECK_SLURM_HEAD_ADDR` (srun exports the batch script's env);
- the node's own address: `NodeAddr` of `$SLURMD_NODENAME` in each task (`MESHDECK_SLURM_NODE_ADDR`).

The sockets NCCL (bootstrap, its socket transport) and gloo open go on the interface that holds the node's
NodeAddr: each task finds it (`ip -o -4 addr`, the address resolved by `getent`) and exports NCCL_SOCKET_IFNAME
and GLOO_SOCKET_IFNAME, unless the profile sets them (its env wins); the job's output says which it chose. Over
SSH the agents report each server's NICs before the launch; in a job no agent runs before the engine, and the
network slurmctld reaches a node by is the one every node can reach (InfiniBand data still goes over verbs:
NCCL_IB_HCA is the profile's).

`NodeAddr` rather than `hostname -I`: it is the address slurmctld itself reaches the node by, one per node and
the same answer on every node, where `hostname -I` lists every interface of a multi-homed server in no promised
order (it would pick the management network as often as the fabric). Where NodeAddr is unset Slurm reports the
node's name, which the cluster resolves. The plan is built with placeholder addresses (`.invalid` never
resolves) and exactly those words are swapped; any other use of a placeholder is a builder's bug and refused.

Agents inside the allocation (`JobAgents`, optional): before its engine, each task starts meshdeck's agent in
the foreground as a background child of the task (`serve`, never `attach`: attach would detach it into its own
session, out of the step's process tree, and it would outlive the job). Its socket and state live in
`/tmp/meshdeck-slurm-$SLURM_JOB_ID-$SLURM_NODEID` (node-local; the app computes the same path from the job id
and the node's index, `job_agent_dir`), and it scrapes the engine's `/metrics` under the worker id meshdeck
gives that command (`--watch-engine`), so samples land as they do for a launch through the agents. With agents
the engine runs as the task shell's child (not `exec`): when it ends, or the step is signalled (scancel, the time
limit), the shell's EXIT trap stops the agent and removes its directory, so nothing of meshdeck's stays on the
node; the task's exit status is still the engine's. The agent's own command comes from the login
node's agent (the same zipapp on the cluster's shared home, run only if it still hashes as uploaded).

All nodes start at once (srun has no stages): the workers wait for the head as they do over SSH (torchrun's
c10d rendezvous and vLLM's TCPStore retry until their timeouts). `--kill-on-bad-exit=1` ends the step when one
node's command fails. Ray layouts (several commands per node) and secrets in the profile's env are refused:
the script is stored by slurmctld, and a token exported before sbatch reaches the job anyway (--export=ALL).
Pure: contacts nothing.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from meshdeck.core.errors import InputError
from meshdeck.core.secret_env import refuse_secret_env
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.network import NodeNetwork
from meshdeck.launch.plan import LaunchPlan, NodeCommand, worker_id
from meshdeck.launch.profile import Profile
from meshdeck.launch.slurm_options import SlurmOptions

HEAD_ADDR_VAR = "MESHDECK_SLURM_HEAD_ADDR"
NODE_ADDR_VAR = "MESHDECK_SLURM_NODE_ADDR"
HEAD_PLACEHOLDER = "meshdeck-slurm-head.invalid"
_PLACEHOLDER = re.compile(r"meshdeck-slurm-(head|node[0-9]+)\.invalid")
MAX_SCRIPT_BYTES = 4 * 1024 * 1024  # Slurm's default max_script_size (SchedulerParameters)
AGENT_DIR_PREFIX = "/tmp/meshdeck-slurm-"
SOCKET_IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
_AGENT_DIR_SHELL = f'"{AGENT_DIR_PREFIX}${{SLURM_JOB_ID}}-${{SLURM_NODEID}}"'
# When the task's shell exits — its engine ended, or the step was signalled (scancel, the time limit: Slurm sends
# SIGTERM to every process of the step, and bash runs its EXIT trap on it) — the engine is waited for (signalled
# too, it gets its graceful shutdown until Slurm's KillWait, as it would as the task itself), then the agent is
# stopped and its node-local directory removed. The task's exit status stays the engine's.
AGENT_CLEANUP = (
    'trap \'if [ -n "$engine_pid" ]; then wait "$engine_pid" 2>/dev/null || true; fi; '
    'if [ -n "$agent_pid" ]; then kill "$agent_pid" 2>/dev/null || true; '
    'wait "$agent_pid" 2>/dev/null || true; fi; rm -rf -- "$agent_dir"\' EXIT'
)


def job_agent_dir(job_id: int, node_index: int) -> str:
    """Where node `node_index` (its SLURM_NODEID) of job `job_id` keeps its agent's socket and state."""
    return f"{AGENT_DIR_PREFIX}{job_id}-{node_index}"


def job_agent_socket(job_id: int, node_index: int) -> str:
    return f"{job_agent_dir(job_id, node_index)}/agent.sock"


@dataclass(frozen=True)
class JobAgents:
    """How each node runs meshdeck's agent in the job: `command` runs the agent (the words before its
    subcommand, e.g. `python3 -I -c <verify> <zipapp> <sha256>`); `interval_s` between samples."""

    command: tuple[str, ...]
    interval_s: float = 1.0


def node_placeholder(rank: int) -> str:
    """The address rank `rank` is planned with; rank 0's is the head's."""
    return HEAD_PLACEHOLDER if rank == 0 else f"meshdeck-slurm-node{rank}.invalid"


@dataclass(frozen=True)
class BatchScript:
    """The script to sbatch, the plan it was made from (for the dry-run comparison) and its warnings."""

    text: str
    plan: LaunchPlan
    warnings: tuple[str, ...] = ()


def build_batch_script(
    profile: Profile, options: SlurmOptions, *, run_id: str, agents: JobAgents | None = None
) -> BatchScript:
    """The batch script running `profile`'s plan (vLLM or torchrun), one Slurm task per node; with `agents`,
    each node also runs meshdeck's agent for the job's lifetime."""
    nodes = [NodeNetwork(host, node_placeholder(rank), nics_known=False) for rank, host in enumerate(profile.hosts)]
    plan = build_launch_plan(profile, nodes, run_id=run_id)
    ranks = [command.node_rank for command in plan.commands]
    if ranks != list(range(len(profile.hosts))):
        raise InputError(
            "vllm.distributed_backend",
            f"a Slurm job runs one command per node; this {plan.layout_class} plan has "
            f"{len(plan.commands)} commands on {len(profile.hosts)} nodes (remove distributed_backend: ray)",
        )
    refuse_secret_env(
        plan.commands[0].env,
        "the batch script, which slurmctld keeps",
        "export it in the shell that runs sbatch (the job inherits it) and leave it out of the profile's env",
    )
    count = len(plan.commands)
    lines = ["#!/bin/bash", f"# Written by `meshdeck launch --slurm-script` from profile {profile.name!r}."]
    lines += [f"#SBATCH {option}" for option in sbatch_options(options, nodes=count, gpus=profile.gpus_per_node)]
    lines += [
        "set -euo pipefail",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
        f"{HEAD_ADDR_VAR}=$({_node_addr('$head_node')})",
        f"export {HEAD_ADDR_VAR}",
        f'echo "meshdeck: head $head_node at ${HEAD_ADDR_VAR}" >&2',
        shlex.join(
            [
                "srun",
                f"--nodes={count}",
                f"--ntasks={count}",
                "--ntasks-per-node=1",
                "--kill-on-bad-exit=1",
                "bash",
                "-c",
                task_script(plan.commands, agents=agents, run_id=run_id, interfaces=socket_interfaces(profile)),
            ]
        ),
        "",
    ]
    text = "\n".join(lines)
    if len(text.encode()) > MAX_SCRIPT_BYTES:
        raise InputError("torch.script", f"the batch script is over Slurm's default {MAX_SCRIPT_BYTES} bytes")
    warnings = [w for w in plan.warnings if ".invalid" not in w]
    return BatchScript(text=text, plan=plan, warnings=tuple(warnings))


def sbatch_options(options: SlurmOptions, *, nodes: int, gpus: int) -> list[str]:
    """The `#SBATCH` options, in sbatch's own spelling (values were checked by slurm_options)."""
    out = [f"--job-name={options.job_name}", f"--nodes={nodes}", "--ntasks-per-node=1"]
    if gpus:
        out.append(f"--gpus-per-node={gpus}")
    for flag, value in (
        ("--partition", options.partition),
        ("--account", options.account),
        ("--qos", options.qos),
        ("--time", options.time_limit),
    ):
        if value is not None:
            out.append(f"{flag}={value}")
    out.append(f"--output={options.output}")
    return out


def socket_interfaces(profile: Profile) -> tuple[str, ...]:
    """The socket-interface variables the job sets from each node's NodeAddr: those the profile leaves unset, on
    a job of more than one node (within one node NCCL and gloo need no interface)."""
    if len(profile.hosts) < 2:
        return ()
    return tuple(name for name in SOCKET_IFNAME_VARS if name not in profile.env)


def task_script(
    commands: tuple[NodeCommand, ...],
    *,
    agents: JobAgents | None = None,
    run_id: str = "",
    interfaces: tuple[str, ...] = (),
) -> str:
    """The per-task script: the node's own address (and, for `interfaces`, the interface that holds it), then a
    `case` over `$SLURM_NODEID`, one branch per rank (its agent started first, when there are `agents`)."""
    lines = [
        "set -euo pipefail",
        f"{NODE_ADDR_VAR}=$({_node_addr('$SLURMD_NODENAME')})",
        *interface_lines(interfaces),
    ]
    if agents is not None:
        lines += [
            f"agent_dir={_AGENT_DIR_SHELL}",
            'mkdir -p -m 700 "$agent_dir"',
            "agent_pid=",
            "engine_pid=",
            AGENT_CLEANUP,
        ]
    lines.append('case "$SLURM_NODEID" in')
    for command in commands:
        if agents is None:
            lines.append(f"{command.node_rank}) exec {node_line(command)} ;;")
        else:  # the engine as a child, so the EXIT trap runs when it ends (or the step is signalled)
            agent = agent_line(agents, command, run_id)
            engine = f'{node_line(command)} & engine_pid=$!; wait "$engine_pid"'
            lines.append(f"{command.node_rank}) {agent} & agent_pid=$!; {engine} ;;")
    lines += ['*) echo "meshdeck: no command for node $SLURM_NODEID" >&2; exit 2 ;;', "esac"]
    return "\n".join(lines) + "\n"


def interface_lines(names: tuple[str, ...]) -> list[str]:
    """Export `names` (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME) as the interface holding this node's NodeAddr, and
    say so in the job's output; where no interface holds it (or `ip` is missing) they are left to NCCL and gloo."""
    if not names:
        return []
    exports = " ".join(f'{name}="$node_if"' for name in names)
    return [
        f"node_ip=$(getent ahostsv4 \"${NODE_ADDR_VAR}\" | awk 'NR == 1 {{print $1}}') || node_ip=",
        'node_if=$(ip -o -4 addr show 2>/dev/null | awk -v a="$node_ip" '
        "'{split($4, p, \"/\"); if (p[1] == a) {print $2; exit}}') || node_if=",
        'if [ -n "$node_if" ]; then',
        f"  export {exports}",
        f'  echo "meshdeck: $SLURMD_NODENAME: {"/".join(names)}=$node_if (holds its NodeAddr ${NODE_ADDR_VAR})" >&2',
        "else",
        f'  echo "meshdeck: $SLURMD_NODENAME: no interface holds NodeAddr ${NODE_ADDR_VAR}; '
        f'{"/".join(names)} left to NCCL and gloo" >&2',
        "fi",
    ]


def agent_line(agents: JobAgents, command: NodeCommand, run_id: str) -> str:
    """`<agent> serve` on this node's socket, watching this command's engine under its worker id."""
    words = [*agents.command, "serve", "--interval", repr(float(agents.interval_s))]
    if command.metrics_url:
        words += ["--watch-engine", f"{worker_id(run_id, command.name)}={command.metrics_url}"]
    options = ' --socket "$agent_dir/agent.sock" --state-dir "$agent_dir" --log-file "$agent_dir/agent.log"'
    return shlex.join(words) + options + " </dev/null"


def node_line(command: NodeCommand) -> str:
    """`env K=V ... argv` for one rank, every word quoted, the planned addresses read from the shell."""
    words = ["env", *(f"{key}={value}" for key, value in command.env), *command.argv]
    own = node_placeholder(command.node_rank)
    return " ".join(_word(word, own) for word in words)


def _word(word: str, own: str) -> str:
    """`word` shell-quoted, with the head's and this node's placeholder as their variables' values (on the
    head the two are one: its NodeAddr)."""
    swaps = {HEAD_PLACEHOLDER: f'"${{{HEAD_ADDR_VAR}}}"'}
    if own != HEAD_PLACEHOLDER:
        swaps[own] = f'"${{{NODE_ADDR_VAR}}}"'
    others = word
    for placeholder in swaps:
        others = others.replace(placeholder, "")
    if _PLACEHOLDER.search(others):  # another node's address: a builder's bug, never input
        raise ValueError(f"another node's placeholder address in {word!r}")
    parts: list[str] = []
    rest = word
    while rest:
        hits = [(rest.find(p), p) for p in swaps if p in rest]
        if not hits:
            parts.append(shlex.quote(rest))
            break
        index, placeholder = min(hits)
        if index:
            parts.append(shlex.quote(rest[:index]))
        parts.append(swaps[placeholder])
        rest = rest[index + len(placeholder) :]
    return "".join(parts) if parts else shlex.quote(word)


def _node_addr(name_expr: str) -> str:
    """A shell pipeline printing the NodeAddr of the node named by `name_expr` (a quoted shell expression)."""
    return f"scontrol show node -o \"{name_expr}\" | tr ' ' '\\n' | sed -n 's/^NodeAddr=//p'"
