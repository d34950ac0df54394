"""Units of the charts: how a raw wire value is scaled for the axis and written in a readout.

Which unit a series has is the metric registry's to say (meshdeck.services.metrics); `chart_unit` turns
the registry's unit into how a chart draws it. Memory is binary (GiB, as nvidia-smi and vLLM's startup
log print it); link throughput is decimal (GB/s, as NVIDIA quotes NVLink and InfiniBand rates). Mixing
the two is the classic 7 % lie.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from meshdeck.services import metrics

_DECIMAL_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_BINARY_PREFIXES = ((2**40, "Ti"), (2**30, "Gi"), (2**20, "Mi"), (2**10, "Ki"))


@dataclass(frozen=True)
class Unit:
    """`scale` turns a wire value into axis units; `axis_label` is what the axis says.

    `si_prefix`: the axis picks k/M/G/T itself (pyqtgraph's SI prefix) — decimal rates only.
    `axis_floor`: the y axis always reaches at least this (axis units), e.g. 100 for percentages."""

    name: str
    scale: float
    axis_label: str
    decimals: int = 1
    axis_floor: float = 0.0
    si_prefix: bool = False

    def format(self, raw: float) -> str:
        """A readout string for one raw wire value, e.g. `112.4 GiB`, `23.1 GB/s`, `71 %`."""
        if raw is None or not math.isfinite(raw):
            return "—"
        return FORMATTERS[self.name](raw, self.decimals)


def _decimal(value: float, suffix: str, decimals: int) -> str:
    magnitude = abs(value)
    for factor, prefix in _DECIMAL_PREFIXES:
        if magnitude >= factor:
            return f"{value / factor:.{decimals}f} {prefix}{suffix}"
    return f"{value:.0f} {suffix}"


def _binary(value: float, suffix: str, decimals: int) -> str:
    magnitude = abs(value)
    for factor, prefix in _BINARY_PREFIXES:
        if magnitude >= factor:
            return f"{value / factor:.{decimals}f} {prefix}{suffix}"
    return f"{value:.0f} {suffix}"


FORMATTERS = {
    "bytes": lambda v, d: _binary(v, "B", d),
    "bytes_per_s": lambda v, d: _decimal(v, "B/s", d),
    "percent": lambda v, d: f"{v:.{d}f} %",
    "fraction": lambda v, d: f"{100 * v:.{d}f} %",
    "watts": lambda v, d: f"{v:.0f} W",
    "celsius": lambda v, d: f"{v:.0f} °C",
    "count": lambda v, d: f"{v:.0f}",
    "tokens_per_s": lambda v, d: _decimal(v, "tok/s", d),
    "megahertz": lambda v, d: f"{v:.0f} MHz",
    "seconds": lambda v, d: _seconds(v, d),
    "tokens": lambda v, d: _decimal(v, "tok", d),
    "per_second": lambda v, d: f"{v:.{d}f} /s",
}

GIB = Unit("bytes", 1 / 2**30, "GiB", 1, axis_floor=1.0)
BYTES_PER_S = Unit("bytes_per_s", 1.0, "B/s", 2, axis_floor=1e6, si_prefix=True)
PERCENT = Unit("percent", 1.0, "%", 0, axis_floor=100.0)
FRACTION_AS_PERCENT = Unit("fraction", 100.0, "%", 1, axis_floor=100.0)
WATTS = Unit("watts", 1.0, "W", 0, axis_floor=100.0)
CELSIUS = Unit("celsius", 1.0, "°C", 0, axis_floor=50.0)
COUNT = Unit("count", 1.0, "", 0, axis_floor=1.0)
TOKENS_PER_S = Unit("tokens_per_s", 1.0, "tok/s", 1, axis_floor=1.0, si_prefix=True)
MEGAHERTZ = Unit("megahertz", 1.0, "MHz", 0, axis_floor=100.0)
SECONDS = Unit("seconds", 1.0, "s", 1, axis_floor=0.1, si_prefix=True)
TOKENS = Unit("tokens", 1.0, "tok", 1, axis_floor=1.0, si_prefix=True)
PER_SECOND = Unit("per_second", 1.0, "/s", 2, axis_floor=1.0)

# The registry's unit -> how a chart draws it.
CHART_UNITS: dict[str, Unit] = {
    metrics.BYTES: GIB,
    metrics.BYTES_PER_S: BYTES_PER_S,
    metrics.PERCENT: PERCENT,
    metrics.RATIO: FRACTION_AS_PERCENT,
    metrics.WATTS: WATTS,
    metrics.CELSIUS: CELSIUS,
    metrics.MHZ: MEGAHERTZ,
    metrics.SECONDS: SECONDS,
    metrics.TOKENS: TOKENS,
    metrics.TOKENS_PER_S: TOKENS_PER_S,
    metrics.REQUESTS: COUNT,
    metrics.PREEMPTIONS: COUNT,
    metrics.PREEMPTIONS_PER_S: PER_SECOND,
    metrics.ENGINES: COUNT,
    metrics.ERRORS: COUNT,
    metrics.UNITLESS: COUNT,
}


def chart_unit(scope: str, metric: str) -> Unit:
    """How a chart draws metric `metric` of a device of kind `scope`: by its unit in the registry (a
    metric the registry does not know is a plain count)."""
    return CHART_UNITS.get(metrics.unit_of(scope, metric), COUNT)


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 × 10^k that is >= value (1.0 for zero or less)."""
    if not math.isfinite(value) or value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        candidate = step * 10.0**exponent
        if candidate >= value * (1 - 1e-12):
            return candidate
    return 10.0 ** (exponent + 1)


def _seconds(value: float, decimals: int) -> str:
    if abs(value) < 1.0:
        return f"{value * 1000:.{decimals}f} ms"
    return f"{value:.{decimals}f} s"


def format_bytes(raw: float, decimals: int = 1) -> str:
    return _binary(raw, "B", decimals)


def format_duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.0f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
