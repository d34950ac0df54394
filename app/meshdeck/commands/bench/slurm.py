"""`meshdeck bench slurm --local [--json] [--requests N] [--vllm PATH]`

Starts a Slurm cluster of two nodes on this machine (Debian's slurmctld/slurmd/munge, as root, daemons stopped
by PID after), submits the tiny DeepSeek-V3-shaped model to it through meshdeck (vLLM's CPU build, TP=2, one
srun task per node, an agent beside each), waits until it serves, sends N completions (default 8), waits for the
engine's metrics to be stored from the agents the job started, cancels the job and counts the processes left.
JSON keys (the bench contract): slurm_version, nodes, job_id, states_seen, ready_s, requests_ok, requests_failed,
metric_rows_stored, stopped_state, leftover_processes. Exit 2 when vLLM's CPU build or Slurm is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from meshdeck.commands.bench._arguments import EXIT_NOT_INSTALLED, local_vllm, request_count
from meshdeck.core.errors import InputError
from meshdeck.core.text import printable
from meshdeck.services.slurm_bench import run_slurm_bench_local

CONTRACT = ("slurm_version", "nodes", "job_id", "states_seen", "ready_s", "requests_ok", "requests_failed",
            "metric_rows_stored", "stopped_state", "leftover_processes")  # fmt: skip


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("slurm", help="the tiny vLLM TP=2 submitted to a loopback Slurm cluster")
    parser.add_argument("--local", action="store_true", help="start the cluster on this machine (the only mode)")
    parser.add_argument("--requests", type=request_count, default=8, help="completions to send (default 8)")
    parser.add_argument("--vllm", help="the `vllm` executable (default: $MESHDECK_VLLM, else .venv-vllm/bin/vllm)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if not args.local:
        raise InputError("--local", "only a loopback cluster is started from the command line; pass --local")
    executable = local_vllm(args.vllm)
    if executable is None:
        return EXIT_NOT_INSTALLED
    try:
        result = run_slurm_bench_local(
            executable, requests=args.requests, say=lambda text: print(printable(text), file=sys.stderr, flush=True)
        )
    except InputError as exc:
        if exc.field == "--local":
            print(f"meshdeck: {exc}", file=sys.stderr)
            return EXIT_NOT_INSTALLED
        raise
    document = {key: result.get(key) for key in CONTRACT}
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print(render(document))
    if result.get("failure"):
        print(printable(f"the job's output ended with:\n{result['failure']}"), file=sys.stderr)
    ok = document["requests_failed"] == 0 and document["requests_ok"] == args.requests
    return 0 if ok and document["leftover_processes"] == 0 else 1


def render(document: dict[str, Any]) -> str:
    ready = f"{document['ready_s']:.1f} s" if document["ready_s"] is not None else "never"
    return "\n".join(
        [
            f"Slurm {document['slurm_version']}, {document['nodes']} nodes: job {document['job_id']} "
            f"{' -> '.join(document['states_seen'])}",
            f"ready (submit to serving) in {ready}",
            f"completions: {document['requests_ok']} ok, {document['requests_failed']} failed",
            f"{document['metric_rows_stored']} engine metric rows stored from the job's agents",
            f"stopped: {document['stopped_state']}; {document['leftover_processes']} processes left",
        ]
    )
