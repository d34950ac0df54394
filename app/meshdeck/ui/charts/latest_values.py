"""The newest value of a few GPU series per host, with no history: what a view shows of series no chart draws.

The fleet view shows each GPU's volatile ECC counts; no chart draws them, and a ring of history per series
(`LiveMetrics`) costs ~67 KB a series: two counts of 2,224 GPUs would add ~300 MB to a 278-host console
for numbers that rarely change. Here a host keeps only its newest sample's values of
`metrics`, a few floats per GPU, and a version that moves when they change, so a reader re-reads a host
only then.

"Newest" is the newest sample's, as the live rings' newest column is: a series that sample did not report
(NVML stopped answering) is no data, not the last value it had.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from meshdeck.core.samples import Device, SampleBatch, SeriesKey


class LatestValues:
    """Per host, the newest reported value of each GPU series named in `metrics` (GUI thread only)."""

    def __init__(self, metrics: frozenset[str]) -> None:
        self.metrics = metrics
        self._values: dict[str, dict[SeriesKey, float]] = {}
        self._versions: dict[str, int] = {}
        # per host: the last batch layout seen, and its wanted columns with their keys
        self._layouts: dict[str, tuple[tuple[SeriesKey, ...], np.ndarray, tuple[SeriesKey, ...]]] = {}

    def wants(self, key: SeriesKey) -> bool:
        """Whether a series is kept here (the bridge lets it through to the GUI thread)."""
        return key[1] in self.metrics and key[0].kind == "gpu"

    def ingest(self, host: str, batch: SampleBatch) -> None:
        """Take `host`'s newest sample of `batch` (seq ascending): its values of the wanted series."""
        if not batch.times:
            return
        columns, keys = self._columns(host, batch.series)
        newest: dict[SeriesKey, float] = {}
        if keys:
            width = batch.width
            row = np.frombuffer(batch.values, dtype=np.float64)[(len(batch.times) - 1) * width :][columns]
            newest = {key: value for key, value in zip(keys, row.tolist(), strict=True) if value == value}
        if newest != self._values.get(host, {}):
            self._values[host] = newest
            self._versions[host] = self._versions.get(host, 0) + 1

    def _columns(self, host: str, series: tuple[SeriesKey, ...]) -> tuple[np.ndarray, tuple[SeriesKey, ...]]:
        """The wanted columns of a batch layout, worked out once per layout (a host's batches share one)."""
        known = self._layouts.get(host)
        if known is not None and (known[0] is series or known[0] == series):
            return known[1], known[2]
        wanted = [(column, key) for column, key in enumerate(series) if self.wants(key)]
        columns = np.array([column for column, _ in wanted], dtype=np.intp)
        keys = tuple(key for _, key in wanted)
        self._layouts[host] = (series, columns, keys)
        return columns, keys

    def host_version(self, host: str) -> int:
        """Moves each time `host`'s newest values change (0: none yet)."""
        return self._versions.get(host, 0)

    def gpu_values(self, host: str, metric: str, gpus: Sequence[int]) -> np.ndarray:
        """`metric` of each GPU index in `gpus` (float32; NaN where the newest sample had none)."""
        values = self._values.get(host, {})
        return np.array([values.get((Device.gpu(gpu), metric), np.nan) for gpu in gpus], dtype=np.float32)
