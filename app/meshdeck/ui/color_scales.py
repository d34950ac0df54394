"""Colour scales for numbers shown as colours: thresholds for load, memory and temperature, viridis for the rest.

Operators read load the way nvitop and Grafana's threshold panels colour it: green is light, yellow is
moderate, red is heavy. A perceptual scale (viridis) hides that reading — 90 % of a GPU's memory comes out
green-yellow — so the quantities that have a "too much" use a threshold scale, and the quantities that do not
(power, link throughput) keep viridis, whose even steps show differences without calling any of them bad.

The thresholds (raw units of the metric; a value at a threshold takes the upper colour):

| scale        | yellow from | red from | where the numbers come from                                            |
|--------------|-------------|----------|------------------------------------------------------------------------|
| utilization  | 10 %        | 75 %     | nvitop's GPU_UTILIZATION_THRESHOLDS (10, 75)                           |
| memory       | 10 %        | 80 %     | nvitop's MEMORY_UTILIZATION_THRESHOLDS (10, 80): a vLLM GPU is red     |
| KV cache     | 70 %        | 90 %     | vLLM preempts requests as its KV blocks run out: red is close to that  |
| temperature  | 75 °C       | 85 °C    | data-centre GPUs slow down in the high 80s (nvidia-smi -q: "GPU Slowdown Temp") |
| alerts       | —           | 1        | any XID event or uncorrected ECC error needs a hand                    |

Each band has an equal share of the bins (the legend bar shows the bands side by side, the thresholds
written at their edges) and within a band the colour darkens a little towards its end, so 20 % and 70 % are
told apart while both read "moderate". Green, yellow and red are not safe for red-green colour blindness: every
place that colours by a threshold also writes the number (the fleet's hover, the legend's end values).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PySide6.QtGui import QColor

# viridis (CC0) at nine even stops: perceptually even, colour-blind safe, readable on light and dark.
# Written out rather than read from pyqtgraph's colour-map files, which the packaged app does not carry.
VIRIDIS_STOPS = ("#440154", "#482878", "#3E4989", "#31688E", "#26828E", "#1F9E89", "#35B779", "#6DCD59", "#FDE725")
# Each band of a threshold scale: (its lightest colour, at the band's start; its full colour, at its end).
GREEN = ("#81C784", "#2E7D32")
YELLOW = ("#FFE082", "#F9A825")
RED = ("#E57373", "#B71C1C")
_BANDS = (GREEN, YELLOW, RED)


@dataclass(frozen=True)
class ColorScale:
    """`thresholds`: raw values where yellow and red start (one value: green then red); empty: viridis.
    `source`: where the thresholds come from, said after them in the legend."""

    name: str
    thresholds: tuple[float, ...] = ()
    source: str = ""

    @property
    def bands(self) -> tuple[tuple[str, str], ...]:
        """The colour pair of each band, lowest first."""
        return (GREEN, RED) if len(self.thresholds) == 1 else _BANDS[: len(self.thresholds) + 1]


VIRIDIS = ColorScale("viridis")
UTILIZATION = ColorScale("utilization", (10.0, 75.0), "nvitop's GPU thresholds")
MEMORY = ColorScale("memory", (10.0, 80.0), "nvitop's memory thresholds")
KV_CACHE = ColorScale("kv_cache", (0.7, 0.9), "vLLM preempts as the KV cache fills")
TEMPERATURE = ColorScale("temperature", (75.0, 85.0), "GPUs slow down in the high 80s °C")
ALERTS = ColorScale("alerts", (1.0,), "any alert needs a hand")


def _rgb(color: str) -> np.ndarray:
    q = QColor(color)
    return np.array([q.red(), q.green(), q.blue()], dtype=np.float64)


def _mix(pair: tuple[str, str], at: float) -> QColor:
    """The colour `at` (0..1) of the way from the pair's light to its full colour."""
    light, full = _rgb(pair[0]), _rgb(pair[1])
    r, g, b = np.rint(light + (full - light) * min(max(at, 0.0), 1.0)).astype(int).tolist()
    return QColor(r, g, b)


def _viridis(at: np.ndarray) -> list[QColor]:
    stops = np.array([_rgb(stop) for stop in VIRIDIS_STOPS])
    where = np.clip(at, 0.0, 1.0) * (len(stops) - 1)
    rgb = np.column_stack([np.interp(where, np.arange(len(stops)), stops[:, channel]) for channel in range(3)])
    return [QColor(r, g, b) for r, g, b in np.rint(rgb).astype(int).tolist()]


def _band_starts(scale: ColorScale, bins: int) -> list[int]:
    """The first bin of each band of a threshold scale and, last, `bins`: the bands share the bins evenly."""
    bands = len(scale.thresholds) + 1
    return [band * bins // bands for band in range(bands)] + [bins]


def value_bins(scale: ColorScale, values: np.ndarray, low: float, high: float, bins: int) -> np.ndarray:
    """The colour bin of each raw value; -1 where there is none (NaN).

    viridis: bins spread evenly over [low, high] (clipped). A threshold scale: each band has its share of the
    bins, so a value's band is exact at the threshold (80 % is red, 79.9 % yellow), and within its band the
    bin says how far it is towards the band's end (the first band starts at `low`, the last ends at `high`)."""
    out = np.full(values.shape[0], -1, dtype=np.intp)
    finite = np.isfinite(values)
    if not scale.thresholds:
        span = high - low if high > low else 1.0
        scaled = np.clip((values[finite] - low) / span, 0.0, 1.0) * (bins - 1)
        out[finite] = np.rint(scaled).astype(np.intp)
        return out
    edges = np.asarray(scale.thresholds, dtype=np.float64)
    starts = np.asarray(_band_starts(scale, bins))
    shown = values[finite].astype(np.float64)
    band = np.searchsorted(edges, shown, side="right")
    lower = np.concatenate(([min(low, edges[0])], edges))[band]
    upper = np.concatenate((edges, [max(high, edges[-1])]))[band]
    with np.errstate(divide="ignore", invalid="ignore"):
        at = np.where(upper > lower, (shown - lower) / (upper - lower), 1.0)
    width = starts[band + 1] - starts[band]
    out[finite] = starts[band] + np.minimum(np.floor(np.clip(at, 0.0, 1.0) * width), width - 1).astype(np.intp)
    return out


def bin_colors(scale: ColorScale, bins: int) -> list[QColor]:
    """The colour of each bin `value_bins` gives: viridis from low to high, or each band's light-to-full ramp."""
    if not scale.thresholds:
        return _viridis(np.linspace(0.0, 1.0, bins))
    starts = _band_starts(scale, bins)
    colors: list[QColor] = []
    for band, pair in enumerate(scale.bands):
        width = starts[band + 1] - starts[band]
        colors += [_mix(pair, i / max(width - 1, 1)) for i in range(width)]
    return colors


def color_of(scale: ColorScale, value: float, low: float = 0.0, high: float = 1.0, bins: int = 64) -> QColor | None:
    """The colour of one raw value as a `bins`-colour scale from `low` to `high` shows it; None for NaN."""
    index = int(value_bins(scale, np.array([value], dtype=np.float64), low, high, bins)[0])
    return bin_colors(scale, bins)[index] if index >= 0 else None


def band_edges(scale: ColorScale) -> list[tuple[float, float]]:
    """Where each threshold sits on a legend bar of `bin_colors` (fractions 0..1) and its raw value."""
    bins = 1000
    return [(start / bins, t) for start, t in zip(_band_starts(scale, bins)[1:-1], scale.thresholds, strict=True)]


def describe(scale: ColorScale, fmt: Callable[[float], str]) -> str:
    """What the colours mean, in the metric's unit: "green < 10 %, yellow 10–75 %, red ≥ 75 % (source)"."""
    if not scale.thresholds:
        return ""
    names = ("green", "yellow", "red") if len(scale.thresholds) == 2 else ("green", "red")
    edges = [fmt(t) for t in scale.thresholds]
    parts = [f"{names[0]} < {edges[0]}"]
    if len(edges) == 2:
        parts.append(f"{names[1]} {edges[0]}–{edges[1]}")
    parts.append(f"{names[-1]} ≥ {edges[-1]}")
    return ", ".join(parts) + (f" ({scale.source})" if scale.source else "")
