"""Byte and bandwidth units used across the planner, so no module spells 2**30 or 1e9 by hand.

vLLM and nvidia-smi speak binary units (GiB, MiB); link and HBM datasheets speak decimal
(GB/s, Gb/s). Keeping both named stops the classic 7 % error between them.
"""

from __future__ import annotations

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
GB = 1_000_000_000  # decimal, as in "GB/s" on a datasheet
GBIT = 1_000_000_000 // 8  # bytes in one decimal gigabit


def gib(n_bytes: float) -> float:
    """Bytes as GiB (the unit vLLM prints in its startup log)."""
    return n_bytes / GIB
