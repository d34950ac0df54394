"""`meshdeck bench tiny-model --layout tp=2,pp=2,dp=1 --local [--nodes 2] [--json]`

A small DeepSeek-shaped model (MLA-style latent-KV attention, shared + routed experts, top-k router)
sharded by the layout, run by real torchrun processes started through local agents, its logits checked
against a single-process run (fp32, max abs diff < 1e-4); prints tokens/s and bytes moved per group.
"""

from __future__ import annotations

import argparse
from typing import Any

from meshdeck.commands import Subparsers
from meshdeck.commands.bench import _workload_run


def register(subparsers: Subparsers) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "tiny-model", help="a tiny DeepSeek sharded by a layout, checked against a single-process run"
    )
    _workload_run.add_common_options(parser, "tp=2,pp=2,dp=1")
    parser.add_argument("--batch", type=int, default=8, help="global batch (sequences), split over DP")
    parser.add_argument("--seq-len", type=int, default=16)
    parser.add_argument("--iters", type=int, default=3, help="timed forwards")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    workload_args = ["--batch", str(args.batch), "--seq-len", str(args.seq_len), "--iters", str(args.iters)]
    workload_args += ["--seed", str(args.seed)]
    return _workload_run.run(args, "tiny-deepseek", workload_args, render)


def render(result: dict[str, Any]) -> str:
    moved = ", ".join(f"{group} {count / 1024:.1f} KiB" for group, count in result["bytes_per_forward"].items())
    verdict = "matches" if result["matches_reference"] else "DOES NOT MATCH"
    return "\n".join(
        [
            f"tiny-deepseek on {result['world_size']} ranks ({result['backend']}), layout {result['layout']}",
            f"logits {verdict} the single-process run: max |diff| {result['max_abs_diff']:.3g} "
            f"(tolerance {result['tolerance']:g})",
            f"{result['tokens_per_s']:.1f} tokens/s over {result['forwards']} forwards "
            f"(batch {result['batch']} × {result['seq_len']} tokens)",
            f"bytes moved per forward: {moved}",
        ]
    )
