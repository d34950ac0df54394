"""A host's GPU load at a glance, as nvitop's header gives it: utilization (mean and max over its GPUs) and
VRAM used / total, from the newest sample.

The values come from the charts' live rings (`LiveMetrics`), the source the fleet view reads: per host the
ring rows of its GPUs' three series are looked up once (again only when the host gained series), and a
read is one numpy gather of the newest column. Nothing is kept per sample here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from meshdeck.core.samples import Device
from meshdeck.ui.charts.live_metrics import LiveMetrics

LOAD_METRICS = ("utilization_pct", "memory_used_bytes", "memory_total_bytes")
GIB = 2**30


@dataclass(frozen=True)
class HostLoad:
    """One host's newest GPU numbers; NaN where no GPU reported that series."""

    gpus: int
    util_mean: float
    util_max: float
    used_bytes: float
    total_bytes: float

    def util_text(self) -> str:
        if math.isnan(self.util_mean):
            return "—"
        return f"{self.util_mean:.0f} % (max {self.util_max:.0f} %)"

    def vram_text(self) -> str:
        if math.isnan(self.used_bytes):
            return "—"
        used = f"{self.used_bytes / GIB:,.0f}"
        if math.isnan(self.total_bytes) or self.total_bytes <= 0:
            return f"{used} GiB used"
        return f"{used} / {self.total_bytes / GIB:,.0f} GiB ({100 * self.used_bytes / self.total_bytes:.0f} %)"


def _combined(values: np.ndarray, how: str) -> float:
    """The mean, max or sum of the values that were reported; NaN when none was."""
    present = values[np.isfinite(values)]
    if not present.size:
        return math.nan
    if how == "mean":
        return float(present.mean())
    return float(present.max() if how == "max" else present.sum())


class HostLoads:
    """Reads `HostLoad`s from the live rings (GUI thread). `reads` counts the hosts read (tests)."""

    def __init__(self, live: LiveMetrics) -> None:
        self.live = live
        self._rows: dict[str, tuple[int, np.ndarray]] = {}  # host -> (series count when mapped, rows 3 × GPUs)
        self.reads = 0

    def forget(self, host: str) -> None:
        self._rows.pop(host, None)

    def load(self, host: str) -> HostLoad | None:
        """`host`'s newest GPU load; None before its first sample or when it reports no GPU."""
        live = self.live
        count = live.series_count(host)
        if not count:
            return None
        self.reads += 1
        mapped = self._rows.get(host)
        if mapped is None or mapped[0] != count:
            gpus = live.gpu_indices(host)
            keys = [(Device.gpu(index), metric) for metric in LOAD_METRICS for index in gpus]
            mapped = (count, live.rows_of(host, keys).reshape(len(LOAD_METRICS), len(gpus)))
            self._rows[host] = mapped
        rows = mapped[1]
        column = live.newest_column(host)
        if column is None or not rows.shape[1]:
            return None
        values = np.where(rows >= 0, column[np.maximum(rows, 0)].astype(np.float64), np.nan)
        util, used, total = values
        return HostLoad(
            gpus=rows.shape[1],
            util_mean=_combined(util, "mean"),
            util_max=_combined(util, "max"),
            used_bytes=_combined(used, "sum"),
            total_bytes=_combined(total, "sum"),
        )
