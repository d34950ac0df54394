"""What a fleet cell can be coloured by, and how each of those numbers comes out of a GPU's raw readings.

The fleet table keeps, per GPU, the newest value of the few series a cell can show (`RAW_METRICS`, in
that column order, from the charts' live rings; `LATEST_METRICS`, the volatile ECC counts no chart draws,
from the newest-only values) plus three numbers that are not a GPU's own series: the host's NIC
throughput (InfiniBand / RoCE / Ethernet are per host, so every GPU of a host shows its host's), the
KV-cache usage of the vLLM engine placed on the GPU, and the XID alerts the agent raised for it. Each
`FleetMetric` turns those columns into one number per GPU in numpy, for all 2,224 GPUs at once; NaN means
no data (the GPU never reported it), which a cell shows as "no data", never as 0.

"XID / ECC alerts" is one colour for both kinds of trouble, because an operator of thousands of GPUs
looks for the few that need a hand: the XID events since the console connected plus the GPU's
uncorrected ECC errors since its last reset. Its scale is fixed at 0..1, so any alert is the top colour:
on a scale from the data, one GPU with hundreds of application XIDs would make a GPU with one
uncorrected ECC error look as healthy as the rest. The hover gives the counts (and the corrected ECC
errors, which need no hand).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from meshdeck.ui import color_scales
from meshdeck.ui.charts import units
from meshdeck.ui.charts.units import Unit
from meshdeck.ui.color_scales import ColorScale

# Columns of the raw table, in order: the GPU series a fleet cell reads.
RAW_METRICS: tuple[str, ...] = (
    "memory_used_bytes",
    "memory_total_bytes",
    "utilization_pct",
    "power_w",
    "temperature_c",
    "nvlink_tx_bytes_per_s",
    "nvlink_rx_bytes_per_s",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
)
COLUMN = {name: i for i, name in enumerate(RAW_METRICS)}
# Columns of the newest-only table (ui.charts.latest_values): GPU series no chart draws.
LATEST_METRICS: tuple[str, ...] = ("ecc_uncorrected_volatile", "ecc_corrected_volatile")
LATEST_COLUMN = {name: i for i, name in enumerate(LATEST_METRICS)}
NIC_METRICS = ("tx_bytes_per_s", "rx_bytes_per_s")


@dataclass(frozen=True)
class FleetColumns:
    """The per-GPU numbers a metric reads: `raw` (cells × RAW_METRICS), `latest` (cells × LATEST_METRICS),
    `network`, `kv_cache`, `xid` (one per cell; NaN where nothing was reported)."""

    raw: np.ndarray
    network: np.ndarray
    kv_cache: np.ndarray
    xid: np.ndarray
    latest: np.ndarray

    def cell(self, index: int) -> FleetColumns:
        """The columns of one GPU only (a tooltip reads every metric of one cell)."""
        part = slice(index, index + 1)
        return FleetColumns(self.raw[part], self.network[part], self.kv_cache[part], self.xid[part], self.latest[part])

    def ecc(self, metric: str) -> np.ndarray:
        """A volatile ECC count per cell (`ecc_uncorrected_volatile` or `ecc_corrected_volatile`)."""
        return self.latest[:, LATEST_COLUMN[metric]]


def _present_sum(*columns: np.ndarray) -> np.ndarray:
    """The sum of the columns that were reported; NaN only where none was (TX alone is still data)."""
    stacked = np.vstack(columns)
    total: np.ndarray = np.nansum(stacked, axis=0)
    total[np.isnan(stacked).all(axis=0)] = np.nan
    return total


def _vram_pct(c: FleetColumns) -> np.ndarray:
    used, total = c.raw[:, COLUMN["memory_used_bytes"]], c.raw[:, COLUMN["memory_total_bytes"]]
    with np.errstate(divide="ignore", invalid="ignore"):
        share: np.ndarray = 100.0 * used / total
    share[~(total > 0)] = np.nan
    return share


def _alerts(columns: FleetColumns) -> np.ndarray:
    """XID events plus uncorrected ECC errors per GPU; NaN only where neither was reported."""
    return _present_sum(columns.xid, columns.ecc("ecc_uncorrected_volatile"))


@dataclass(frozen=True)
class FleetMetric:
    """One choice of the fleet view's colour: its key (settings, tests), title, unit and colour range
    (`fixed`: always low..high; else 0 up to a round number above the largest value shown)."""

    key: str
    title: str
    unit: Unit
    low: float = 0.0
    high: float | None = None  # None: from the data (nice_ceiling of the largest value)
    note: str = ""  # shown under the legend: where the number comes from
    or_more: bool = False  # the top colour is `high` or more (the legend's end says "≥")
    colors: ColorScale = color_scales.VIRIDIS  # thresholds for load, memory, temperature, alerts (ui/color_scales.py)

    @property
    def legend_note(self) -> str:
        """The note under the legend: where the number comes from and what the threshold colours mean."""
        meaning = color_scales.describe(self.colors, self.unit.format) if self.key != "xid" else ""
        return " · ".join(part for part in (self.note, meaning) if part)

    def values(self, columns: FleetColumns) -> np.ndarray:
        return _READERS[self.key](columns)

    def scale(self, values: np.ndarray) -> tuple[float, float]:
        """(low, high) of the colour scale for `values` (raw wire units)."""
        if self.high is not None:
            return self.low, self.high
        finite = values[np.isfinite(values)]
        top = float(finite.max()) if finite.size else 0.0
        return self.low, units.nice_ceiling(top * self.unit.scale) / self.unit.scale if top > 0 else 1.0


_READERS: dict[str, Callable[[FleetColumns], np.ndarray]] = {
    "vram": _vram_pct,
    "utilization": lambda c: c.raw[:, COLUMN["utilization_pct"]],
    "power": lambda c: c.raw[:, COLUMN["power_w"]],
    "temperature": lambda c: c.raw[:, COLUMN["temperature_c"]],
    "kv_cache": lambda c: c.kv_cache,
    "nvlink": lambda c: _present_sum(
        c.raw[:, COLUMN["nvlink_tx_bytes_per_s"]], c.raw[:, COLUMN["nvlink_rx_bytes_per_s"]]
    ),
    "pcie": lambda c: _present_sum(c.raw[:, COLUMN["pcie_tx_bytes_per_s"]], c.raw[:, COLUMN["pcie_rx_bytes_per_s"]]),
    "network": lambda c: c.network,
    "xid": _alerts,
}

FLEET_METRICS: tuple[FleetMetric, ...] = (
    FleetMetric(
        "vram", "VRAM used", units.PERCENT, 0.0, 100.0, "memory used / memory on the board", colors=color_scales.MEMORY
    ),
    FleetMetric("utilization", "GPU utilization", units.PERCENT, 0.0, 100.0, colors=color_scales.UTILIZATION),
    FleetMetric("power", "Power", units.WATTS),
    FleetMetric("temperature", "Temperature", units.CELSIUS, 20.0, 100.0, colors=color_scales.TEMPERATURE),
    FleetMetric(
        "kv_cache",
        "KV-cache usage (vLLM)",
        units.FRACTION_AS_PERCENT,
        0.0,
        1.0,
        "of the vLLM engine placed on the GPU",
        colors=color_scales.KV_CACHE,
    ),
    FleetMetric("nvlink", "NVLink throughput (TX + RX)", units.BYTES_PER_S),
    FleetMetric("pcie", "PCIe throughput (TX + RX)", units.BYTES_PER_S),
    FleetMetric("network", "InfiniBand / Ethernet (host, TX + RX)", units.BYTES_PER_S, note="per host: all its ports"),
    FleetMetric(
        "xid",  # the key of "XID alerts" before ECC joined it: saved settings still pick it
        "XID / ECC alerts",
        units.COUNT,
        0.0,
        1.0,
        "XID events since the console connected + uncorrected ECC errors since the GPU's last reset;"
        " any alert is the top colour (the hover has the counts)",
        or_more=True,
        colors=color_scales.ALERTS,
    ),
)
METRIC_BY_KEY = {metric.key: metric for metric in FLEET_METRICS}
assert set(METRIC_BY_KEY) == set(_READERS)
