"""Counts written as a person writes them: "1 host", "8 GPUs", "1 of 2 hosts connected", never "1 hosts" or
"host(s)".

    counted(1, "host")                 -> '1 host'
    counted(2224, "GPU")               -> '2,224 GPUs'
    counted(3, "series", "series")     -> '3 series'
    noun(2, "deployment")              -> 'deployments'

The plural is the noun plus "s" unless given (a few nouns meshdeck counts are the same in both: series).
"""

from __future__ import annotations


def noun(count: float, singular: str, plural: str | None = None) -> str:
    """`singular` for exactly one, else `plural` (default: `singular` + "s")."""
    return singular if count == 1 else (plural if plural is not None else f"{singular}s")


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """`count` with thousands separators and the noun that agrees with it."""
    return f"{count:,} {noun(count, singular, plural)}"
