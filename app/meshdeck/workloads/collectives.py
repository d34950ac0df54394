"""Collective bandwidth per group of a layout, measured the way nccl-tests reports it.

Run by torchrun on every node (`torchrun ... collectives.py [--min-bytes N] [--max-bytes N]`); the
layout comes from MESHDECK_* (see layout_mesh.py). For each message size from 1 KiB doubling up to
256 MiB (capped by --max-bytes; on CPU the default cap is 4 MiB) it times, concurrently in every group:

    TP groups   all-reduce        busbw = algbw × 2(n-1)/n
    EP groups   all-to-all        busbw = algbw × (n-1)/n     (only with expert parallel)
    PP pairs    send/recv         busbw = algbw               (stage s -> s+1, all pairs at once)
    DP groups   all-gather        busbw = algbw × (n-1)/n

as nccl-tests does (`size` is the per-rank buffer for all-reduce and all-to-all, the gathered output
for all-gather; algbw = size / time; the time of a group is its slowest rank). Rank 0 prints a table
and one line `MESHDECK_RESULT {json}` that meshdeck reads from the log. Runs on NCCL with GPUs and on
gloo on CPUs; nothing here imports meshdeck (the file is shipped to servers that only have torch).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

if __package__:
    from . import layout_mesh
else:  # shipped next to layout_mesh.py and run as a script
    import layout_mesh

KIB = 1024
MIB = 1024 * KIB
BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}
# torch >= 2.11 renamed all_gather_into_tensor; older servers only have the old name
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
GROUP_OP = {"tp": "all_reduce", "ep": "all_to_all", "pp": "send_recv", "dp": "all_gather"}


def message_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


def bus_bandwidth(op: str, size_bytes: int, seconds: float, group_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes/s, as nccl-tests prints)."""
    algbw = size_bytes / seconds / 1e9 if seconds > 0 else 0.0
    return algbw, algbw * BUS_FACTOR[op](group_size)


def _operation(kind: str, mesh: layout_mesh.LayoutMesh, size: int) -> Callable[[], None] | None:
    """A closure running one collective of `size` bytes in this rank's `kind` group; None if not in one."""
    elements = max(1, size // 4)
    device = mesh.device
    if kind == "tp" and mesh.tensor_group is not None:
        buffer = torch.ones(elements, dtype=torch.float32, device=device)
        return lambda: dist.all_reduce(buffer, group=mesh.tensor_group)
    if kind == "dp" and mesh.data_group is not None:
        n = mesh.sizes.data_parallel
        part = max(1, elements // n)  # size = the gathered output, as nccl-tests counts all-gather
        send = torch.ones(part, dtype=torch.float32, device=device)
        out = torch.empty(part * n, dtype=torch.float32, device=device)
        return lambda: _all_gather_single(out, send, group=mesh.data_group)
    if kind == "ep" and mesh.expert_group is not None:
        n = len(mesh.expert_ranks)
        per_peer = max(1, elements // n)
        send = torch.ones(per_peer * n, dtype=torch.float32, device=device)
        out = torch.empty_like(send)
        return lambda: dist.all_to_all_single(out, send, group=mesh.expert_group)
    if kind == "pp" and mesh.pipe_group is not None:
        buffer = torch.ones(elements, dtype=torch.float32, device=device)
        inbox = torch.empty_like(buffer)
        stages = mesh.sizes.pipeline_parallel
        nxt = mesh.global_rank(mesh.data_rank, mesh.stage + 1, mesh.tensor_rank) if mesh.stage + 1 < stages else None
        prv = mesh.global_rank(mesh.data_rank, mesh.stage - 1, mesh.tensor_rank) if mesh.stage > 0 else None

        def send_recv() -> None:
            ops = []
            if nxt is not None:
                ops.append(dist.P2POp(dist.isend, buffer, nxt))
            if prv is not None:
                ops.append(dist.P2POp(dist.irecv, inbox, prv))
            for request in dist.batch_isend_irecv(ops):
                request.wait()

        return send_recv
    return None


def _actual_bytes(kind: str, mesh: layout_mesh.LayoutMesh, size: int) -> int:
    """The size nccl-tests would report for the buffers `_operation` really moved."""
    elements = max(1, size // 4)
    if kind == "dp":
        n = mesh.sizes.data_parallel
        return max(1, elements // n) * n * 4
    if kind == "ep":
        n = len(mesh.expert_ranks)
        return max(1, elements // n) * n * 4
    return elements * 4


def time_operation(run: Callable[[], None], mesh: layout_mesh.LayoutMesh, warmup: int, iters: int) -> float:
    for _ in range(warmup):
        run()
    layout_mesh.synchronize(mesh.device)
    start = layout_mesh.now()
    for _ in range(iters):
        run()
    layout_mesh.synchronize(mesh.device)
    return (layout_mesh.now() - start) / iters


def measure(mesh: layout_mesh.LayoutMesh, sizes: list[int], warmup: int, iters: int) -> list[dict[str, Any]]:
    """Every rank's timings, gathered to all ranks; one row per (group, size), the slowest rank's time."""
    kinds = [k for k in ("tp", "ep", "pp", "dp") if k != "ep" or mesh.sizes.expert_parallel]
    local: list[dict[str, Any]] = []
    for kind in kinds:
        for size in sizes:
            run = _operation(kind, mesh, size)
            dist.barrier()  # groups start each size together, as in a real step
            if run is None:
                continue
            seconds = time_operation(run, mesh, warmup, iters)
            local.append({"group": kind, "ranks": list(mesh.group_ranks(kind)), "bytes": size, "seconds": seconds})
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, local)
    slowest: dict[tuple[str, tuple[int, ...], int], float] = {}
    for rows in everyone:
        for row in rows:
            key = (row["group"], tuple(row["ranks"]), row["bytes"])
            slowest[key] = max(slowest.get(key, 0.0), row["seconds"])
    results = []
    for (kind, ranks, size), seconds in sorted(slowest.items(), key=lambda item: (kinds.index(item[0][0]), item[0])):
        op = GROUP_OP[kind]
        group_size = len(ranks)
        moved = _actual_bytes(kind, mesh, size)
        algbw, busbw = bus_bandwidth(op, moved, seconds, group_size if op != "send_recv" else 2)
        results.append(
            {
                "group": kind,
                "op": op,
                "ranks": list(ranks),
                "bytes": moved,
                "time_us": seconds * 1e6,
                "algbw_gbps": algbw,
                "busbw_gbps": busbw,
            }
        )
    return results


def format_table(results: list[dict[str, Any]]) -> str:
    lines = [
        f"{'group':<6}{'op':<12}{'ranks':<18}{'size(B)':>12}{'time(us)':>12}{'algbw(GB/s)':>13}{'busbw(GB/s)':>13}"
    ]
    for row in results:
        ranks = ",".join(str(r) for r in row["ranks"])
        lines.append(
            f"{row['group']:<6}{row['op']:<12}{ranks:<18}{row['bytes']:>12}{row['time_us']:>12.1f}"
            f"{row['algbw_gbps']:>13.3f}{row['busbw_gbps']:>13.3f}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="meshdeck collectives: bandwidth per layout group")
    parser.add_argument("--min-bytes", type=int, default=KIB)
    parser.add_argument("--max-bytes", type=int, default=None, help="default 256 MiB on GPU, 4 MiB on CPU")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    args = parser.parse_args(argv)
    if args.min_bytes < 4 or (args.max_bytes is not None and args.max_bytes < args.min_bytes):
        parser.error("need 4 <= --min-bytes <= --max-bytes")
    if args.iters < 1 or args.warmup < 0:
        parser.error("--iters must be >= 1 and --warmup >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    mesh, backend = layout_mesh.init_job(args.device)
    try:
        max_bytes = args.max_bytes or (256 * MIB if backend == "nccl" else 4 * MIB)
        sizes = message_sizes(args.min_bytes, max_bytes)
        results = measure(mesh, sizes, args.warmup, args.iters)
        if mesh.rank == 0:
            print(format_table(results), flush=True)
            summary = {
                "workload": "collectives",
                "backend": backend,
                "world_size": dist.get_world_size(),
                "layout": mesh.sizes.as_dict(),
                "results": results,
            }
            layout_mesh.say_line(layout_mesh.RESULT_MARK + json.dumps(summary))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
