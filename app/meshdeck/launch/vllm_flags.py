"""Checks a `vllm serve` argv against the flags real vLLM accepts (see vllm_known_flags.py).

vLLM's parser (`FlexibleArgumentParser`) also accepts `--foo_bar` for `--foo-bar` and `--flag=value`;
both are normalised here before the lookup, and short aliases (`-tp`) map to their long flag.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from meshdeck.launch.vllm_known_flags import VLLM_FLAG_ALIASES, VLLM_FLAG_CHOICES, VLLM_SERVE_FLAGS, VLLM_VERSION

_NUMBER = re.compile(r"^-\d+(\.\d+)?([eE][-+]?\d+)?$")


def canonical_flag(token: str) -> str | None:
    """`--max_model_len=4096` -> `--max-model-len`; `-tp` -> `--tensor-parallel-size`; a value -> None."""
    if not token.startswith("-") or token == "-" or _NUMBER.match(token):
        return None
    name = token.split("=", 1)[0]
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return VLLM_FLAG_ALIASES.get(name, name)


def flag_as_vllm_reads(token: str) -> str | None:
    """The flag vLLM's parser takes `token` for, or None for a value: `canonical_flag`, then the part before
    a dot (`--speculative-config.method` sets `--speculative-config`), then argparse's abbreviations
    (vLLM leaves `allow_abbrev` on: `--tensor-parallel 4` is `--tensor-parallel-size 4`)."""
    flag = canonical_flag(token)
    if flag is None or flag in VLLM_SERVE_FLAGS:
        return flag
    if flag.startswith("--") and "." in flag:
        return flag.split(".", 1)[0]
    if flag.startswith("--"):
        matches = [known for known in VLLM_SERVE_FLAGS if known.startswith(flag)]
        if len(matches) == 1:
            return matches[0]
    return flag


def flags_in(argv: Iterable[str]) -> list[str]:
    """The canonical flags an argv passes (after `vllm serve MODEL`)."""
    return [flag for token in argv if (flag := canonical_flag(token)) is not None]


def unknown_flags(argv: Iterable[str]) -> list[str]:
    """Flags vLLM (the checked-in release) would reject with 'unrecognized arguments'."""
    return [flag for flag in flags_in(argv) if flag not in VLLM_SERVE_FLAGS]


def flag_values(argv: list[str]) -> dict[str, str | None]:
    """canonical flag -> its value (None for a bare switch); the last occurrence wins, as in argparse."""
    values: dict[str, str | None] = {}
    index = 0
    while index < len(argv):
        token = argv[index]
        flag = canonical_flag(token)
        if flag is None:
            index += 1
            continue
        if "=" in token and token.startswith("--"):
            values[flag] = token.split("=", 1)[1]
            index += 1
        elif index + 1 < len(argv) and canonical_flag(argv[index + 1]) is None:
            values[flag] = argv[index + 1]
            index += 2
        else:
            values[flag] = None
            index += 1
    return values


def bad_choices(argv: list[str]) -> list[str]:
    """`--flag value` pairs whose value is not one vLLM lists for that flag (where it lists them)."""
    problems = []
    for flag, value in flag_values(argv).items():
        allowed = VLLM_FLAG_CHOICES.get(flag)
        if allowed is not None and value is not None and value not in allowed:
            problems.append(f"{flag} {value} (vLLM {VLLM_VERSION} knows: {', '.join(allowed)})")
    return problems
