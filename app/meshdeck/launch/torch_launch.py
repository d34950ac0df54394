"""Per-node `torchrun` commands for a profile: a built-in workload (shipped with the command) or the
user's own script (a path on the servers).

    torchrun --nnodes N --nproc-per-node G --node-rank R --rdzv-backend c10d --rdzv-endpoint HEAD:PORT
             --rdzv-id RUN --rdzv-conf is_host=1|0 --local-addr NODE --max-restarts 0 SCRIPT ARGS...

`is_host` says outright which node hosts the c10d store (torch otherwise guesses from host names, and
two "nodes" on one machine would both claim it); `--max-restarts 0` because the agent applies the
restart policy. torchrun is run as `python -m torch.distributed.run` with the configured interpreter.

A built-in workload is not installed on the servers: its module files travel inside the command. The
argv is `python -c STAGER ENTRY TORCHRUN-ARGS -- WORKLOAD-ARGS` with the files, zlib + base64, in
`MESHDECK_WORKLOAD_BUNDLE` (and its sha256 in `MESHDECK_WORKLOAD_SHA256`); the stager checks the digest,
writes the files atomically into `~/.cache/meshdeck/workloads/<digest>/` and `exec`s torchrun on them.
No shell is involved anywhere. (`workload_bundle.py` packs the files; the dry run lists the ones inside
the bundle that is sent.)

The layout reaches every rank as `MESHDECK_TENSOR_PARALLEL`, `MESHDECK_PIPELINE_PARALLEL`,
`MESHDECK_DATA_PARALLEL` and `MESHDECK_EXPERT_PARALLEL` (1/0), so a user's script can build the same
DeviceMesh (dims dp × pp × tp, in that order; EP = the flattened dp × tp group of a pipeline stage).
These and the bundle are laid over the profile's env, which may not set them (`merge_env`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from meshdeck.core.errors import InputError
from meshdeck.launch.network import NodeNetwork, nccl_env, network_warnings
from meshdeck.launch.plan import LaunchPlan, NodeCommand, PortUse, ReadyCheck, layout_summary, merge_env
from meshdeck.launch.profile import Profile
from meshdeck.launch.workload_bundle import (
    BUILTIN_WORKLOADS,
    BUNDLE_ENV,
    BUNDLE_SHA_ENV,
    WorkloadBundle,
    workload_bundle,
)

# the bundle's names stay importable from here, where the torch launch that ships it is built
__all__ = ["BUILTIN_WORKLOADS", "BUNDLE_ENV", "BUNDLE_SHA_ENV", "STAGER", "WorkloadBundle", "build_torch_plan"]
__all__ += ["layout_env", "torchrun_args", "workload_bundle"]
RANK_RUNNING_LINE = r"meshdeck-workload: rank \d+/\d+ running"
LAYOUT_ENV = (
    "MESHDECK_TENSOR_PARALLEL",
    "MESHDECK_PIPELINE_PARALLEL",
    "MESHDECK_DATA_PARALLEL",
    "MESHDECK_EXPERT_PARALLEL",
)

# Runs on the server under the configured python, stdlib only, Python >= 3.8. Kept small on purpose:
# it is shown to the user in the dry run.
STAGER = """\
import base64, hashlib, json, os, sys, tempfile, zlib
blob = os.environ.pop("MESHDECK_WORKLOAD_BUNDLE").encode("ascii")
digest = hashlib.sha256(blob).hexdigest()
if digest != os.environ.pop("MESHDECK_WORKLOAD_SHA256", ""):
    sys.exit("meshdeck: the workload bundle does not match its sha256; refusing to run it")
cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
root = os.path.join(cache, "meshdeck", "workloads", digest[:32])
os.makedirs(root, mode=0o700, exist_ok=True)
for name, text in json.loads(zlib.decompress(base64.b64decode(blob))).items():
    if os.path.basename(name) != name or name.startswith("."):
        sys.exit("meshdeck: bad file name in the workload bundle: %r" % name)
    fd, tmp = tempfile.mkstemp(dir=root, prefix="." + name)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, os.path.join(root, name))
entry, rest = sys.argv[1], sys.argv[2:]
cut = rest.index("--")
script = os.path.join(root, entry)
os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run"] + rest[:cut] + [script] + rest[cut + 1:])
"""


def layout_env(profile: Profile) -> dict[str, str]:
    layout = profile.layout
    return {
        "MESHDECK_TENSOR_PARALLEL": str(layout.tensor_parallel),
        "MESHDECK_PIPELINE_PARALLEL": str(layout.pipeline_parallel),
        "MESHDECK_DATA_PARALLEL": str(layout.data_parallel),
        "MESHDECK_EXPERT_PARALLEL": "1" if layout.expert_parallel else "0",
    }


def torchrun_args(profile: Profile, node: NodeNetwork, rank: int, head: NodeNetwork, run_id: str) -> list[str]:
    return [
        "--nnodes",
        str(len(profile.hosts)),
        "--nproc-per-node",
        str(profile.gpus_per_node),
        "--node-rank",
        str(rank),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"{_endpoint_host(head.address)}:{profile.torch.master_port}",
        "--rdzv-id",
        run_id,
        "--rdzv-conf",
        f"is_host={1 if rank == 0 else 0}",
        "--local-addr",
        node.address,
        "--max-restarts",
        "0",
    ]


def _endpoint_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def build_torch_plan(profile: Profile, nodes: Sequence[NodeNetwork], *, run_id: str) -> LaunchPlan:
    """torchrun on every node; nodes[0] (the head) hosts the c10d rendezvous and starts first."""
    if [n.host for n in nodes] != list(profile.hosts):
        raise InputError("hosts", f"network facts for {[n.host for n in nodes]} do not match {profile.hosts}")
    if not run_id or not all(c.isalnum() or c in "-_." for c in run_id):
        raise InputError("run_id", f"{run_id!r} must be letters, digits, '-', '_' or '.'")
    head = nodes[0]
    script = profile.torch.script
    builtin = script in BUILTIN_WORKLOADS
    bundle = workload_bundle(script) if builtin else None
    python = profile.torch.python
    multi_node = len(nodes) > 1
    warnings = network_warnings(nodes, head.address) if multi_node and "NCCL_SOCKET_IFNAME" not in profile.env else []
    commands = []
    for rank, node in enumerate(nodes):
        run_args = torchrun_args(profile, node, rank, head, run_id)
        presets: list[Mapping[str, str]] = [{"NCCL_DEBUG": "INFO"}]
        if multi_node:
            presets.append(nccl_env(node, head.address))
        fixed = layout_env(profile)
        if bundle is not None:
            argv = [python, "-c", STAGER, bundle.entry, *run_args, "--", *profile.torch.args]
            fixed.update(bundle.env)
        else:
            argv = [python, "-m", "torch.distributed.run", *run_args, script, *profile.torch.args]
        ready = (
            (ReadyCheck("tcp", port=profile.torch.master_port, timeout_s=300.0),)
            if rank == 0
            else (ReadyCheck("running", settle_s=1.0),)
        )
        commands.append(
            NodeCommand(
                host=node.host,
                node_rank=rank,
                name=f"torchrun-node{rank}",
                role="head" if rank == 0 else "worker",
                stage=min(rank, 1),
                argv=tuple(argv),
                env=merge_env(*presets, profile=profile.env, fixed=fixed),
                gpus=tuple(range(profile.gpus_per_node)),
                ready=ready,
            )
        )
    world = profile.layout.world_size
    return LaunchPlan(
        name=profile.name,
        engine="torch",
        model=profile.model,
        head_host=head.host,
        head_address=head.address,
        commands=tuple(commands),
        ports=(PortUse(head.host, profile.torch.master_port, "c10d rendezvous"),),
        layout_class="torchrun",
        # built-in workloads print one line per rank once its process group is up: all ranks running
        serving_ready=(ReadyCheck("log", pattern=RANK_RUNNING_LINE, count=world, timeout_s=600.0),) if builtin else (),
        restart_as_whole=multi_node,
        warnings=tuple(warnings),
        layout=layout_summary(profile),
    )
