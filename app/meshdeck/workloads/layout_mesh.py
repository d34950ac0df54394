"""The DeviceMesh of a meshdeck layout inside a torchrun job, shared by the built-in workloads.

Shipped to the servers next to the workload that imports it, so: torch and the standard library only,
nothing else from meshdeck. A user's own script may copy it (or read the same environment):

    MESHDECK_TENSOR_PARALLEL, MESHDECK_PIPELINE_PARALLEL, MESHDECK_DATA_PARALLEL  sizes (default 1)
    MESHDECK_EXPERT_PARALLEL                                                    1 = experts over dp × tp

Ranks are laid out row-major over (dp, pp, tp) — `init_device_mesh(device, (dp, pp, tp))` — so a
tensor-parallel group is consecutive ranks (on one node when the node holds a multiple of TP), pipeline
neighbours are `tp` ranks apart, and the expert-parallel group of a pipeline stage is its dp × tp ranks
(vLLM's rule: with expert parallelism, EP size = TP × DP).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

RUNNING_MARK = "meshdeck-workload: rank %d/%d running"
RESULT_MARK = "MESHDECK_RESULT "


def say_line(text: str) -> None:
    """Write one whole line in one write: the ranks of a node share one pipe and the agent runs them
    with PYTHONUNBUFFERED=1, under which print() writes the text and its newline separately, so two
    ranks' lines could run together and the launcher's line-based ready check would miss one."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


@dataclass(frozen=True)
class LayoutSizes:
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    data_parallel: int = 1
    expert_parallel: bool = False

    @property
    def world_size(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise SystemExit(f"{name} must be a positive integer, got {raw!r}")
    return int(raw)


def layout_from_env(world_size: int | None = None) -> LayoutSizes:
    """The layout meshdeck planned, from MESHDECK_* (a lone run with no env is all data parallel)."""
    world = world_size if world_size is not None else int(os.environ.get("WORLD_SIZE", "1"))
    tensor_parallel = _env_int("MESHDECK_TENSOR_PARALLEL", 1)
    pipeline_parallel = _env_int("MESHDECK_PIPELINE_PARALLEL", 1)
    data_parallel = _env_int("MESHDECK_DATA_PARALLEL", max(1, world // (tensor_parallel * pipeline_parallel)))
    expert_parallel = os.environ.get("MESHDECK_EXPERT_PARALLEL", "0") in ("1", "true", "True")
    sizes = LayoutSizes(tensor_parallel, pipeline_parallel, data_parallel, expert_parallel)
    if sizes.world_size != world:
        raise SystemExit(
            f"layout tp={tensor_parallel} × pp={pipeline_parallel} × dp={data_parallel} = {sizes.world_size} "
            f"ranks, but torchrun started {world}"
        )
    return sizes


def pick_device(requested: str) -> tuple[str, torch.device]:
    """(backend, device): NCCL on this rank's GPU when there is one per local rank, else gloo on CPU."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        if torch.cuda.device_count() < local_world:
            if requested == "cuda":
                raise SystemExit(f"{local_world} ranks on this node but only {torch.cuda.device_count()} GPU(s)")
        else:
            torch.cuda.set_device(local_rank)
            return "nccl", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")


@dataclass
class LayoutMesh:
    """This rank's place in the layout and its process groups (None where the group would be one rank)."""

    sizes: LayoutSizes
    mesh: DeviceMesh
    rank: int
    data_rank: int
    stage: int
    tensor_rank: int
    tensor_group: dist.ProcessGroup | None  # None: a dimension of size 1 (no collective needed)
    data_group: dist.ProcessGroup | None
    pipe_group: dist.ProcessGroup | None
    expert_group: dist.ProcessGroup | None  # dp × tp ranks of this stage, when expert parallel
    expert_rank: int
    expert_ranks: tuple[int, ...]
    device: torch.device

    def global_rank(self, data_rank: int, stage: int, tensor_rank: int) -> int:
        sizes = self.sizes
        return (data_rank * sizes.pipeline_parallel + stage) * sizes.tensor_parallel + tensor_rank

    def group_ranks(self, kind: str) -> tuple[int, ...]:
        sizes = self.sizes
        if kind == "tp":
            return tuple(self.global_rank(self.data_rank, self.stage, t) for t in range(sizes.tensor_parallel))
        if kind == "dp":
            return tuple(self.global_rank(d, self.stage, self.tensor_rank) for d in range(sizes.data_parallel))
        if kind == "pp":
            return tuple(self.global_rank(self.data_rank, s, self.tensor_rank) for s in range(sizes.pipeline_parallel))
        if kind == "ep":
            return self.expert_ranks
        raise ValueError(kind)


def build_layout_mesh(sizes: LayoutSizes, device: torch.device) -> LayoutMesh:
    """Create the (dp, pp, tp) DeviceMesh and the EP groups. Every rank must call this, in step."""
    mesh = init_device_mesh(
        device.type,
        (sizes.data_parallel, sizes.pipeline_parallel, sizes.tensor_parallel),
        mesh_dim_names=("dp", "pp", "tp"),
    )
    data_rank, stage, tensor_rank = mesh.get_coordinate() or (0, 0, 0)
    rank = dist.get_rank()
    expert_group: dist.ProcessGroup | None = None
    expert_ranks: tuple[int, ...] = (rank,)
    if sizes.expert_parallel:
        # One EP group per pipeline stage: its dp × tp ranks, ordered by (dp, tp). Every rank creates every
        # group (new_group is collective) and keeps its own.
        for each_stage in range(sizes.pipeline_parallel):
            ranks = tuple(
                (d * sizes.pipeline_parallel + each_stage) * sizes.tensor_parallel + t
                for d in range(sizes.data_parallel)
                for t in range(sizes.tensor_parallel)
            )
            group = dist.new_group(list(ranks))
            if each_stage == stage:
                expert_group, expert_ranks = group, ranks
    return LayoutMesh(
        sizes=sizes,
        mesh=mesh,
        rank=rank,
        data_rank=data_rank,
        stage=stage,
        tensor_rank=tensor_rank,
        tensor_group=mesh.get_group("tp") if sizes.tensor_parallel > 1 else None,
        data_group=mesh.get_group("dp") if sizes.data_parallel > 1 else None,
        pipe_group=mesh.get_group("pp") if sizes.pipeline_parallel > 1 else None,
        expert_group=expert_group if len(expert_ranks) > 1 else None,
        expert_rank=expert_ranks.index(rank),
        expert_ranks=expert_ranks,
        device=device,
    )


def init_job(requested_device: str = "auto") -> tuple[LayoutMesh, str]:
    """init_process_group + the layout's mesh; prints the per-rank running line meshdeck waits for."""
    backend, device = pick_device(requested_device)
    dist.init_process_group(backend=backend, device_id=device if backend == "nccl" else None)
    sizes = layout_from_env(dist.get_world_size())
    layout_mesh = build_layout_mesh(sizes, device)
    say_line(RUNNING_MARK % (dist.get_rank(), dist.get_world_size()))
    return layout_mesh, backend


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def now() -> float:
    return time.perf_counter()
