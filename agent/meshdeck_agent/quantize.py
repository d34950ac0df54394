"""Rates kept to the precision a chart can show, so 2 h of 16-GPU samples fit the ring's memory bound.

Traffic counters sampled once a second are noisy far above their 4th significant digit, yet the
digits below it make compressed samples several times larger. Every `*_bytes_per_s` value is rounded
to 4 significant digits and each GPU's NVLink links to 3 significant digits of its busiest link before the sample is stored; memory, power,
clocks and counts are left exact.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional


def round_significant(value: Optional[float], digits: int) -> Optional[float]:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if value == 0 or not math.isfinite(value):
        return value
    magnitude = math.floor(math.log10(abs(value)))
    rounded = round(value, digits - 1 - magnitude)
    return int(rounded) if magnitude >= digits - 1 else rounded


def _rates(record: Dict[str, Any], digits: int) -> None:
    for key, value in record.items():
        if key.endswith("_bytes_per_s") and value is not None:
            record[key] = round_significant(value, digits)


def _step(largest: float, digits: int) -> int:
    """The rounding step that keeps `digits` significant digits of `largest` (at least 1)."""
    if largest < 10**digits:
        return 1
    return 10 ** (int(math.log10(largest)) + 1 - digits)


def quantize(gpus: List[Dict[str, Any]], nics: List[Dict[str, Any]]) -> None:
    """Round the rates of one sample's GPUs and NICs in place."""
    for gpu in gpus:
        _rates(gpu, 4)
        links = gpu.get("nvlink_links")
        if links:
            values = [v for pair in links if pair for v in pair if isinstance(v, (int, float))]
            if not values:
                continue
            step = _step(max(values), 3)
            if step > 1:
                gpu["nvlink_links"] = [
                    [None if v is None else round(v / step) * step for v in pair] if pair else pair for pair in links
                ]
    for nic in nics:
        _rates(nic, 4)
