"""Rates kept to the precision a chart can show, so 2 h of 16-GPU samples fit the ring's memory bound.

Traffic counters sampled once a second are noisy far above their 4th significant digit, yet the
digits below it make compressed samples several times larger. Every metric the registry gives in
bytes/s is rounded to 4 significant digits, and each GPU's NVLink links to 3 significant digits of its
busiest link, before the sample is stored; memory, power, clocks and counts are left exact.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional, Sequence, Tuple

from .metric_registry import BYTES_PER_S, GPU_METRICS
from .wire_sample import GpuSample, NicSample

RATE_DIGITS = 4
LINK_DIGITS = 3
_GPU_RATES = frozenset(i for i, metric in enumerate(GPU_METRICS) if metric.unit == BYTES_PER_S)


def round_significant(value: Optional[float], digits: int) -> Optional[float]:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if value == 0 or not math.isfinite(value):
        return value
    magnitude = math.floor(math.log10(abs(value)))
    rounded = round(value, digits - 1 - magnitude)
    return int(rounded) if magnitude >= digits - 1 else rounded


def _step(largest: float, digits: int) -> int:
    """The rounding step that keeps `digits` significant digits of `largest` (at least 1)."""
    if largest < 10**digits:
        return 1
    step: int = 10 ** (int(math.log10(largest)) + 1 - digits)  # a whole power: the exponent is at least 1 here
    return step


def _links(
    links: Tuple[Tuple[Optional[float], Optional[float]], ...],
) -> Tuple[Tuple[Optional[float], Optional[float]], ...]:
    values = [v for pair in links for v in pair if v is not None]
    if not values:
        return links
    step = _step(max(values), LINK_DIGITS)
    if step == 1:
        return links
    return tuple(
        (None if tx is None else round(tx / step) * step, None if rx is None else round(rx / step) * step)
        for tx, rx in links
    )


def quantize_gpu(gpu: GpuSample) -> GpuSample:
    """The GPU's reading with its rates and links rounded."""
    values = tuple(
        round_significant(value, RATE_DIGITS) if i in _GPU_RATES else value for i, value in enumerate(gpu.values)
    )
    return replace(gpu, values=values, nvlink_links=_links(gpu.nvlink_links))


def quantize_nic(nic: NicSample) -> NicSample:
    """The port's reading with its rates rounded (every NIC metric is a rate)."""
    return replace(
        nic,
        tx_bytes_per_s=round_significant(nic.tx_bytes_per_s, RATE_DIGITS),
        rx_bytes_per_s=round_significant(nic.rx_bytes_per_s, RATE_DIGITS),
    )


def quantize(
    gpus: Sequence[GpuSample], nics: Sequence[NicSample]
) -> Tuple[Tuple[GpuSample, ...], Tuple[NicSample, ...]]:
    """One sample's GPUs and NICs with their rates rounded."""
    return tuple(quantize_gpu(gpu) for gpu in gpus), tuple(quantize_nic(nic) for nic in nics)
