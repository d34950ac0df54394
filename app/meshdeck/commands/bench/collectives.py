"""`meshdeck bench collectives --layout tp=2,pp=1,dp=2 --local [--nodes 2] [--max-bytes N] [--json]`

All-reduce in TP groups, all-to-all in EP groups, send/recv between PP neighbours and all-gather in DP
groups, from 1 KiB doubling up to --max-bytes, with algorithm and bus bandwidth per group as nccl-tests
reports them — real torchrun processes started through local agents (NCCL on GPUs, gloo on CPU).
"""

from __future__ import annotations

import argparse
from typing import Any

from meshdeck.commands import Subparsers
from meshdeck.commands.bench import _workload_run


def register(subparsers: Subparsers) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "collectives", help="collective bandwidth per TP/EP/PP/DP group of a layout (like nccl-tests)"
    )
    _workload_run.add_common_options(parser, "tp=2,pp=1,dp=2")
    parser.add_argument("--min-bytes", type=int, default=1024)
    parser.add_argument("--max-bytes", type=int, help="largest message (default 256 MiB on GPU, 4 MiB on CPU)")
    parser.add_argument("--iters", type=int, default=5)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    workload_args = ["--min-bytes", str(args.min_bytes), "--iters", str(args.iters)]
    if args.max_bytes:
        workload_args += ["--max-bytes", str(args.max_bytes)]
    return _workload_run.run(args, "collectives", workload_args, render)


def render(result: dict[str, Any]) -> str:
    lines = [
        f"collectives on {result['world_size']} ranks ({result['backend']}), layout {result['layout']}",
        f"{'group':<6}{'op':<12}{'ranks':<16}{'size(B)':>12}{'time(us)':>12}{'algbw(GB/s)':>13}{'busbw(GB/s)':>13}",
    ]
    for row in result["results"]:
        ranks = ",".join(str(r) for r in row["ranks"])
        lines.append(
            f"{row['group']:<6}{row['op']:<12}{ranks:<16}{row['bytes']:>12}{row['time_us']:>12.1f}"
            f"{row['algbw_gbps']:>13.3f}{row['busbw_gbps']:>13.3f}"
        )
    return "\n".join(lines)
