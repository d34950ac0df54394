"""What a launch is, before anything runs: one `NodeCommand` per process to start, in stages.

A `LaunchPlan` is the whole answer of the pure launcher: for each command the host it runs on, its
argv (a list — nothing here is ever joined into a shell line except for display), its environment,
the GPUs it owns, the stage it starts in and how to tell it is up before the next stage starts.
`services.deployments` executes a plan; `meshdeck launch --dry-run --json` prints `dry_run()` and runs nothing.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

from meshdeck.core.errors import InputError
from meshdeck.core.secret_env import masked_env
from meshdeck.launch.profile import Profile, reserved_env_reason
from meshdeck.launch.workload_bundle import BUNDLE_ENV, StagedFile, describe_bundle, staged_files

READY_KINDS = ("tcp", "log", "running")
ENGINES = ("vllm", "torch")


def worker_id(deployment_id: str, command_name: str) -> str:
    """The id the agents know a deployment's command by (at most 64 characters: new_deployment_id's bound)."""
    return f"{deployment_id}.{command_name}"


@dataclass(frozen=True)
class ReadyCheck:
    """How to know a command is far enough along for the next stage to start.

    tcp:     `port` accepts connections on the command's node (probed by that node's agent)
    log:     `count` lines of its log match `pattern` (a regular expression); as a plan's serving check
             without a serving command, lines are counted over the logs of every command
    running: its worker is in state running (for `settle_s` seconds)
    Several checks on one command: any one passing is enough.
    """

    kind: str
    port: int | None = None
    pattern: str | None = None
    count: int = 1
    settle_s: float = 0.0
    timeout_s: float = 600.0

    def describe(self) -> str:
        if self.kind == "tcp":
            return f"port {self.port} open"
        if self.kind == "log":
            times = f" ×{self.count}" if self.count > 1 else ""
            return f"log line /{self.pattern}/{times}"
        return f"process running {self.settle_s:g} s"


@dataclass(frozen=True)
class PlannedStartup:
    """The planner's prediction per GPU / per DP engine, kept beside what the engine reports (planned vs measured)."""

    gpu_memory_bytes: int
    weights_bytes: int
    kv_cache_bytes: int
    kv_tokens: int  # per DP engine (one replica's KV pool)
    max_concurrency: float  # at max_model_len, per DP engine
    max_model_len: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class NodeCommand:
    host: str
    node_rank: int
    name: str  # unique in the plan: "vllm-node0", "ray-head", "torchrun-node1"
    role: str  # "head" | "worker"
    stage: int  # start order: every command of stage N is ready before stage N+1 starts
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    gpus: tuple[int, ...] = ()
    ready: tuple[ReadyCheck, ...] = ()
    metrics_url: str | None = None

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    @cached_property
    def staged(self) -> tuple[StagedFile, ...]:
        """The files this command ships inline, read out of the bundle in its env: the ones that are sent."""
        return staged_files(self.env_dict)

    def shown_env(self, *, inline_workload: bool = False) -> tuple[tuple[str, str], ...]:
        """The env as shown to a person or kept in a record: secret values masked, and the inline workload
        named by its files (`inline_workload` keeps its base64, for the machine-readable dry run)."""
        shown = masked_env(self.env)
        if inline_workload or BUNDLE_ENV not in self.env_dict:
            return shown
        described = describe_bundle(self.env_dict)
        return tuple((key, described if key == BUNDLE_ENV else value) for key, value in shown)

    def display(self) -> str:
        """One shell-quoted line, `env K=V ... argv`, of what runs (secrets masked, the inline workload named)."""
        assignments = [f"{k}={v}" for k, v in self.shown_env()]
        return shlex.join(["env", *assignments, *self.argv] if assignments else list(self.argv))


@dataclass(frozen=True)
class PortUse:
    host: str
    port: int
    purpose: str  # "vLLM API", "torch.distributed master", "DP RPC", "Ray GCS", "c10d rendezvous"
    address: str | None = None  # where the other nodes reach it; None: the head's address


@dataclass(frozen=True)
class LaunchPlan:
    name: str
    engine: str
    model: str
    head_host: str
    head_address: str
    commands: tuple[NodeCommand, ...]
    ports: tuple[PortUse, ...]  # ports the plan needs free on the head, and reachable from every node
    layout_class: str  # "single-node", "multi-node-mp", "ray", "dp-multi-node", "torchrun"
    serving_url: str | None = None  # vLLM's OpenAI endpoint on the head, once up
    serving_command: str | None = None  # the command whose `serving_ready` means the deployment is up
    serving_ready: tuple[ReadyCheck, ...] = ()  # checked after the last stage started
    restart_as_whole: bool = False  # a crash of one part restarts every part (multi-node vLLM)
    warnings: tuple[str, ...] = ()
    layout: Mapping[str, int | bool] = field(default_factory=dict)
    planned: PlannedStartup | None = None  # the planner's prediction (vLLM), kept beside what is measured

    @property
    def hosts(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for command in self.commands:
            seen.setdefault(command.host, None)
        return tuple(seen)

    @property
    def stages(self) -> tuple[tuple[NodeCommand, ...], ...]:
        numbers = sorted({c.stage for c in self.commands})
        return tuple(tuple(c for c in self.commands if c.stage == n) for n in numbers)

    def dry_run(self, *, inline_workload: bool = True) -> dict[str, Any]:
        """The `--dry-run --json` document: {"nodes": [{"host", "argv", "env", ...}, ...], ...}, secrets masked.

        `inline_workload=False` names the inline workload's files instead of carrying its base64 (records)."""
        return {
            "name": self.name,
            "engine": self.engine,
            "layout_class": self.layout_class,
            "layout": dict(self.layout),
            "head": {"host": self.head_host, "address": self.head_address},
            "nodes": [
                {
                    "host": c.host,
                    "name": c.name,
                    "role": c.role,
                    "stage": c.stage,
                    "node_rank": c.node_rank,
                    "argv": list(c.argv),
                    "env": dict(c.shown_env(inline_workload=inline_workload)),
                    "gpus": list(c.gpus),
                    "ready": [check.describe() for check in c.ready],
                    "staged_files": [{"name": f.name, "sha256": f.sha256, "size": f.size} for f in c.staged],
                }
                for c in self.commands
            ],
            "ports": [
                {"host": p.host, "port": p.port, "purpose": p.purpose, "address": p.address or self.head_address}
                for p in self.ports
            ],
            "serving_url": self.serving_url,
            "serving_ready": [check.describe() for check in self.serving_ready],
            "warnings": list(self.warnings),
            "planned": self.planned.as_dict() if self.planned else None,
        }


def layout_summary(profile: Profile) -> dict[str, int | bool]:
    layout = profile.layout
    return {
        "tensor_parallel": layout.tensor_parallel,
        "pipeline_parallel": layout.pipeline_parallel,
        "data_parallel": layout.data_parallel,
        "expert_parallel": layout.expert_parallel,
        "nodes": len(profile.hosts),
        "gpus_per_node": profile.gpus_per_node,
    }


def merge_env(
    *presets: Mapping[str, str], profile: Mapping[str, str], fixed: Mapping[str, str] | None = None
) -> tuple[tuple[str, str], ...]:
    """A command's env: meshdeck's presets (NCCL_DEBUG, the NIC choices; later ones win), then the profile's
    env over them, then what meshdeck sets itself (`fixed`: the inline workload, the layout, a node's own
    address), which nothing overrides. Sorted, for stable plans and diffs.

    A profile key among `fixed` is refused: profile validation already does so, naming the file; this
    keeps a profile built another way from replacing what the dry run shows."""
    fixed = fixed or {}
    for key in sorted(fixed):
        reason = reserved_env_reason(key)
        if reason is None:  # a builder's mistake: validation would let a profile set it
            raise ValueError(f"launch builders fix only reserved env keys; {key} is not one")
        if key in profile:
            raise InputError(f"env.{key}", reason)
    merged: dict[str, str] = {}
    for layer in presets:
        merged.update(layer)
    merged.update(profile)
    merged.update(fixed)
    return tuple(sorted(merged.items()))
