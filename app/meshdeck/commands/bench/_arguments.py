"""Argument types the `bench` subcommands share (argparse `type=` functions naming what was wrong)."""

from __future__ import annotations

import argparse
import math
import sys

from meshdeck.services.vllm_local import VllmNotInstalled, find_vllm_executable


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


MAX_REQUESTS = 100_000
EXIT_NOT_INSTALLED = 2  # a bench that needs vLLM's CPU build, run where it is not installed


def request_count(text: str) -> int:
    """Completions to send (or keep in flight): 1-MAX_REQUESTS."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 1 <= value <= MAX_REQUESTS:
        raise argparse.ArgumentTypeError(f"{value} must be 1-{MAX_REQUESTS}")
    return value


def local_vllm(path: str | None) -> str | None:
    """The `vllm` executable a local bench runs (`--vllm`, else $MESHDECK_VLLM, else .venv-vllm); None, after
    saying on stderr how to install it, when there is none."""
    try:
        return find_vllm_executable(path)
    except VllmNotInstalled as exc:
        print(f"meshdeck: {exc}", file=sys.stderr)
        return None


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number of seconds")
    return value
