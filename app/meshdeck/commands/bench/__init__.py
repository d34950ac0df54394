"""`meshdeck bench <what>`: measurements a user can run (ingest, collectives, tiny-model).

Each module in this package has `register(subparsers)` for one `bench` subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil

from meshdeck.commands import Subparsers


def register(subparsers: Subparsers) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("bench", help="measure meshdeck and your cluster")
    bench_subparsers = parser.add_subparsers(dest="bench_command", metavar="WHAT", required=True)
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if callable(getattr(module, "register", None)):
            module.register(bench_subparsers)
