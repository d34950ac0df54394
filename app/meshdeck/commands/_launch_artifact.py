"""What `launch --k8s-manifest` and `launch --slurm-script` share: they write a file another tool runs
(`kubectl apply`, `sbatch`) and start nothing, so the options of a launch are refused with them, the output
is checked before any work, and the plan's warnings go to stderr."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from meshdeck.core.errors import InputError
from meshdeck.core.text import printable
from meshdeck.services.files import STDOUT, open_output, output_target

LAUNCH_ONLY = ("dry_run", "wait", "force", "skip_preflight", "json")


def write_artifact(
    args: argparse.Namespace,
    flag: str,
    conflicts: Sequence[str],
    build: Callable[[], tuple[str, Sequence[str]]],
    next_step: str,
) -> int:
    """Refuse `conflicts` (argparse dests) beside `flag`, then write what `build` makes (text, warnings) to
    `-o` (stdout by default); a file written is named on stderr with `next_step`."""
    for option in (*LAUNCH_ONLY, *conflicts):
        if getattr(args, option):
            raise InputError(flag, f"starts nothing; --{option.replace('_', '-')} does not go with it")
    target = output_target(args.output or STDOUT, option="-o")  # checked before any work is done
    text, warnings = build()
    with open_output(target) as out:
        out.write(text)
    for warning in warnings:
        print(printable(f"warning: {warning}"), file=sys.stderr)
    if args.output not in (None, STDOUT):
        print(printable(f"wrote {target.destination}; {next_step}"), file=sys.stderr)
    return 0
