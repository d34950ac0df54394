"""CLI subcommands, one module each. A module here exposes `register(subparsers)`.

`meshdeck.cli` discovers them, so adding a command never edits a shared file.
"""

from __future__ import annotations

import argparse
from typing import TypeAlias

# What `register(subparsers)` is handed: argparse's add_subparsers() (a string: argparse's class is not
# subscriptable at run time).
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
