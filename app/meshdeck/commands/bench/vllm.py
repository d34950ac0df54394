"""`meshdeck bench vllm --local [--json] [--requests N] [--vllm PATH]`

Launches a real vLLM (its CPU build, from `make vllm-venv`) serving meshdeck's tiny DeepSeek-V3-shaped model
TP=2 across two agents of this machine (`--nnodes 2 --node-rank 0|1 --headless`), sends N completions
(default 32), stops it, and prints what came back: time to ready, requests answered, KV bytes per token and
KV tokens as planned and as vLLM's startup log said, the highest KV-cache usage the agents scraped from vLLM's
/metrics and stored, and how many metric rows were stored. Exit 2 when vLLM's CPU build is not installed.

`--disaggregated` runs one prefill and one decode engine instead (services/pd_bench.py: NixlConnector with a CPU
buffer, vLLM's router in front) and prints whether the KV handoff happened (the decode engine's prompt tokens
by source, the bytes NIXL moved), whether the answers equal an aggregated engine's, the metric rows stored and
the processes left after the stop. Exit 1 when a request failed, the handoff was not seen, the answers differ
or a process was left.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from meshdeck.commands.bench._arguments import EXIT_NOT_INSTALLED, local_vllm, request_count
from meshdeck.core.errors import InputError
from meshdeck.core.text import printable
from meshdeck.services.deployments.model import LaunchProgress
from meshdeck.services.pd_bench import run_disaggregated_bench
from meshdeck.services.vllm_bench import VllmBenchResult, run_vllm_bench


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("vllm", help="a real vLLM (CPU build) TP=2 across two local agents, loaded")
    parser.add_argument("--local", action="store_true", help="run on agents of this machine (the only mode)")
    parser.add_argument("--requests", type=request_count, help="completions to send (default 32; 16 disaggregated)")
    parser.add_argument("--concurrency", type=request_count, default=8, help="completions in flight (default 8)")
    parser.add_argument("--vllm", help="the `vllm` executable (default: $MESHDECK_VLLM, else .venv-vllm/bin/vllm)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--disaggregated",
        action="store_true",
        help="one prefill + one decode engine, NixlConnector (CPU buffer) and vLLM's router (default 16 requests)",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if not args.local:
        raise InputError("--local", "only local runs are supported from the command line; pass --local")
    executable = local_vllm(args.vllm)
    if executable is None:
        return EXIT_NOT_INSTALLED

    def progress(update: LaunchProgress) -> None:
        print(printable(f"[{update.step}/{update.total}] {update.message}"), file=sys.stderr, flush=True)

    if args.disaggregated:
        requests = args.requests or 16
        result = run_disaggregated_bench(
            executable, requests=requests, concurrency=min(args.concurrency, 4), progress=progress
        )
    else:
        requests = args.requests or 32
        result = run_vllm_bench(executable, requests=requests, concurrency=args.concurrency, progress=progress)
    document = result.document
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print(render_disaggregated(document) if args.disaggregated else render(document))
    _report_details(result)
    served = document["requests_failed"] == 0 and document["requests_ok"] == requests
    if args.disaggregated:
        handed_over = document["kv_transfer_observed"] and document["outputs_match_aggregated"] is not False
        return 0 if served and handed_over and document["leftover_processes"] == 0 else 1
    return 0 if served else 1


def _report_details(result: VllmBenchResult) -> None:
    details = result.details
    print(printable(f"deployment {details['deployment']}: {details['stopped']}"), file=sys.stderr)
    for error in details["load_errors"]:
        print(printable(f"a completion failed: {error}"), file=sys.stderr)
    for error in details.get("warm_up_failures", ()):
        print(printable(f"a warm-up completion failed (NIXL's first handshake?): {error}"), file=sys.stderr)
    for command in details.get("leftover_commands", ()):
        print(printable(f"left running after the stop: {command}"), file=sys.stderr)


def render(document: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"vLLM (CPU build) TP={document['tensor_parallel']} across {document['nodes']} local agents: "
            f"ready in {document['ready_s']:.1f} s",
            f"completions: {document['requests_ok']} ok, {document['requests_failed']} failed",
            f"KV bytes per token: planned {document['kv_bytes_per_token_planned']}, "
            f"logged {document['kv_bytes_per_token_logged']}",
            f"KV tokens: planned {document['kv_tokens_planned']:,}, logged {document['kv_tokens_logged']}",
            f"KV-cache usage max {document['kv_usage_max']:.4f}; {document['metric_rows_stored']} metric rows stored",
        ]
    )


def render_disaggregated(document: dict[str, Any]) -> str:
    match = document["outputs_match_aggregated"]
    same = {True: "equal", False: "DIFFERENT", None: f"not compared ({document.get('outputs_match_reason')})"}[match]
    return "\n".join(
        [
            f"vLLM (CPU build) {document['prefill_engines']} prefill + {document['decode_engines']} decode engine(s), "
            f"{document['kv_connector']}, {document['router']}: ready in {document['ready_s']:.1f} s",
            f"completions: {document['requests_ok']} ok, {document['requests_failed']} failed",
            f"KV handoff: {'seen' if document['kv_transfer_observed'] else 'NOT SEEN'}; decode computed "
            f"{document['decode_prompt_tokens_computed']} of {document['prompt_tokens_sent']} prompt tokens itself",
            f"answers vs an aggregated engine: {same}",
            f"{document['metric_rows_stored']} metric rows stored; {document['leftover_processes']} process(es) left",
        ]
    )
