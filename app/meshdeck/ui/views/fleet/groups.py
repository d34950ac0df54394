"""How the fleet's cells are grouped: all hosts together, or by the deployment running on them.

A deployment's GPUs are those its plan placed parts on (`PlannedNumbers.gpus`); a deployment found on
the agents without a plan takes every GPU of the hosts its workers run on. Deployments that ended are
left out; a GPU in no running deployment goes to the last group. The same placement tells the KV-cache
column which GPUs a vLLM worker's engine uses (`worker_placement`).
"""

from __future__ import annotations

from collections.abc import Iterable

from meshdeck.core.text import printable
from meshdeck.services.deployments.model import DeploymentSnapshot
from meshdeck.ui.views.fleet.layout import Block, Group
from meshdeck.ui.views.fleet.table import FleetTable

NOT_DEPLOYED = "not in a running deployment"


def host_groups(table: FleetTable) -> tuple[Group, ...]:
    """One group of every host, in name order."""
    blocks = tuple(
        Block(h, tuple(range(int(table.host_first[h]), int(table.host_first[h + 1])))) for h in range(len(table.hosts))
    )
    return (Group("", blocks),)


def _placed_gpus(snapshot: DeploymentSnapshot) -> dict[str, set[int] | None]:
    """host -> the GPU indices the deployment uses there (None: all of the host's)."""
    placed: dict[str, set[int] | None] = {}
    if snapshot.planned is not None and snapshot.planned.gpus:
        for host, gpu in snapshot.planned.gpus:
            chosen = placed.setdefault(host, set())
            assert chosen is not None
            chosen.add(gpu)
        return placed
    for worker in snapshot.workers:
        placed[worker.host] = None
    return placed


def deployment_groups(table: FleetTable, snapshots: Iterable[DeploymentSnapshot]) -> tuple[Group, ...]:
    """A group per running deployment (newest first), then the GPUs in none."""
    taken = [False] * table.cells
    host_index = {host: h for h, host in enumerate(table.hosts)}
    groups: list[Group] = []
    for snapshot in sorted((s for s in snapshots if not s.final), key=lambda s: s.started_at, reverse=True):
        blocks = []
        for host, gpus in sorted(_placed_gpus(snapshot).items()):
            h = host_index.get(host)
            if h is None:
                continue
            cells = tuple(
                cell
                for cell in range(int(table.host_first[h]), int(table.host_first[h + 1]))
                if not taken[cell] and (gpus is None or int(table.cell_gpu[cell]) in gpus)
            )
            for cell in cells:
                taken[cell] = True
            if cells:
                blocks.append(Block(h, cells))
        gpu_count = sum(len(b.cells) for b in blocks)
        title = (
            f"{printable(snapshot.name, 80)} ({printable(snapshot.engine, 20)}, {printable(snapshot.state, 20)}): "
            f"{gpu_count} GPUs on {len(blocks)} hosts"
        )
        groups.append(Group(title, tuple(blocks)))
    rest = []
    for h in range(len(table.hosts)):
        cells = tuple(c for c in range(int(table.host_first[h]), int(table.host_first[h + 1])) if not taken[c])
        if cells:
            rest.append(Block(h, cells))
    if rest:
        groups.append(
            Group(f"{NOT_DEPLOYED}: {sum(len(b.cells) for b in rest)} GPUs on {len(rest)} hosts", tuple(rest))
        )
    return tuple(groups)


def worker_placement(snapshots: Iterable[DeploymentSnapshot]) -> dict[tuple[str, str], tuple[int, ...]]:
    """(host, worker id) -> the GPUs its plan placed it on, for running deployments that have a plan."""
    placement: dict[tuple[str, str], tuple[int, ...]] = {}
    for snapshot in snapshots:
        if snapshot.final:
            continue
        placed = _placed_gpus(snapshot)
        for worker in snapshot.workers:
            gpus = placed.get(worker.host)
            if gpus is not None:
                placement[(worker.host, worker.worker_id)] = tuple(sorted(gpus))
    return placement


def deployment_of_host(snapshots: Iterable[DeploymentSnapshot]) -> dict[str, str]:
    """host -> the name of the running deployment on it (the newest where two share a host): the groups
    of the dashboard's fleet-scale charts."""
    named: dict[str, str] = {}
    for snapshot in sorted((s for s in snapshots if not s.final), key=lambda s: s.started_at, reverse=True):
        for host in _placed_gpus(snapshot):
            named.setdefault(host, printable(snapshot.name, 80))
    return named
