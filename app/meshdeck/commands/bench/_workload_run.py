"""Shared by `meshdeck bench collectives` and `meshdeck bench tiny-model`: start local agents, run the
built-in workload through them (services.deployments.local), print progress on stderr and the result."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from meshdeck.core.errors import InputError
from meshdeck.launch.build import parse_layout_spec
from meshdeck.services.deployments.local import LocalAgents, WorkloadRun, run_builtin_workload
from meshdeck.services.deployments.model import LaunchProgress


def add_common_options(parser: argparse.ArgumentParser, default_layout: str) -> None:
    parser.add_argument("--layout", default=default_layout, help=f"tp=,pp=,dp= sizes and ep (default {default_layout})")
    parser.add_argument("--local", action="store_true", help="run on agents of this machine (gloo on CPU without GPUs)")
    parser.add_argument("--nodes", type=int, default=1, help="local agents acting as nodes (default 1)")
    parser.add_argument("--no-preflight", action="store_true", help="skip the pre-flight checks")
    parser.add_argument("--json", action="store_true", help="print the workload's result as JSON")


def run(
    args: argparse.Namespace,
    workload: str,
    workload_args: Sequence[str],
    render: Callable[[dict[str, Any]], str],
) -> int:
    if not args.local:
        raise InputError("--local", "only local runs are supported from the command line; pass --local")
    layout = parse_layout_spec(args.layout)

    def progress(update: LaunchProgress) -> None:
        print(f"[{update.step}/{update.total}] {update.message}", file=sys.stderr, flush=True)

    with LocalAgents(args.nodes) as agents:
        run_result: WorkloadRun = run_builtin_workload(
            agents.fleet,
            agents.hosts,
            workload,
            layout,
            args=workload_args,
            preflight=not args.no_preflight,
            progress=progress,
        )
    snapshot = run_result.snapshot
    if run_result.result is None or snapshot.state != "completed":
        tail = "\n".join("\n".join(text.splitlines()[-15:]) for text in run_result.logs.values())
        print(f"meshdeck: {workload} {snapshot.state}: {snapshot.reason}\n{tail}", file=sys.stderr)
        return 1
    result = dict(run_result.result)
    result["deployment"] = snapshot.id
    result["launch_to_running_s"] = round(run_result.launch_s, 3)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(render(result))
        print(f"(deployment {snapshot.id}: all ranks running {run_result.launch_s:.1f} s after launch)")
    return 0
