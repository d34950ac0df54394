"""The fleet's per-GPU latest-value table: one row per GPU of every host, in numpy, read from the live rings.

A refresh must stay well under 50 ms at 2,224 GPUs on a 2-core desktop, so nothing here walks Python
objects per value. Per host the table looks up once where its series live in the `LiveMetrics` ring
(`rows_of`: every GPU's RAW_METRICS, its NICs, its vLLM engines), and again only when the host gained
series. Each refresh copies the newest values of the hosts that sent a sample into one flat buffer,
one fancy index per host (not `np.take`, which releases the GIL: see `update`), and then derives every column for all GPUs at once with precomputed index
arrays (a gather for the GPU values, a bincount for each host's NIC sum, `fmax.at` for the engines'
KV-cache usage): a few hundred numpy calls per refresh, whatever the number of values. The GPUs of a host are those its inventory lists and those it
reported samples for (a host that never sent a sample still shows its GPUs, as "no data").

The volatile ECC counts (`LATEST_METRICS`) have no ring: they come from the newest-only values
(`LatestValues`), re-read for a host only when its version moved (they rarely change).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from meshdeck.core.samples import Device, SeriesKey
from meshdeck.ui.charts.latest_values import LatestValues
from meshdeck.ui.charts.live_metrics import LiveMetrics
from meshdeck.ui.views.dashboard.charts import KV_USAGE_METRICS
from meshdeck.ui.views.fleet.metrics import LATEST_METRICS, NIC_METRICS, RAW_METRICS, FleetColumns

WIDTH = len(RAW_METRICS)


@dataclass
class _HostReader:
    """Where one host's series live in the live ring, where they go in the table's buffer, and when
    its newest sample was read."""

    gpus: tuple[int, ...] = ()
    series_count: int = -1
    rows: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.intp))  # ring rows (missing: 0)
    missing: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.intp))  # positions not kept
    nic_count: int = 0
    workers: tuple[str, ...] = ()  # the worker id of each KV-cache row (one per engine), after the NIC rows
    offset: int = 0  # where its values start in FleetTable._buffer
    read_time: float = math.nan


class FleetTable:
    """Per-GPU newest values of every host (`columns()`), host of each cell (`cell_host`), GPU index
    (`cell_gpu`). `update()` reads what is new; `structure` bumps when hosts or GPUs come or go."""

    def __init__(self, live: LiveMetrics, latest: LatestValues | None = None) -> None:
        self.live = live
        self.latest = latest if latest is not None else LatestValues(frozenset(LATEST_METRICS))
        self.hosts: list[str] = []
        self._host_index: dict[str, int] = {}
        self.host_first: np.ndarray = np.zeros(1, dtype=np.intp)  # host h owns cells host_first[h]:host_first[h+1]
        self.cell_host = np.empty(0, dtype=np.intp)
        self.cell_gpu = np.empty(0, dtype=np.intp)
        self.raw = np.empty((0, WIDTH), dtype=np.float32)
        self.network = np.empty(0, dtype=np.float32)
        self.kv_cache = np.empty(0, dtype=np.float32)
        self.xid = np.empty(0, dtype=np.float32)
        self.latest_values = np.empty((0, len(LATEST_METRICS)), dtype=np.float32)
        self._latest_read: dict[str, int] = {}  # host -> the LatestValues version in latest_values
        self.host_time = np.empty(0)  # newest sample time per host (NaN: none)
        self.structure = 0
        self._readers: dict[str, _HostReader] = {}
        self._inventory_gpus: dict[str, tuple[int, ...]] = {}
        self._worker_gpus: dict[tuple[str, str], tuple[int, ...]] = {}
        self._xid_counts: dict[tuple[str, int], int] = {}
        self._xid_cells = np.empty(0, dtype=np.float32)
        self._wanted: list[str] = []
        self._dirty = True  # hosts or GPUs changed: new cells
        self._index_dirty = True  # a host's series moved: new index arrays
        self._buffer = np.empty(0, dtype=np.float32)
        self._raw_positions = np.empty((0, WIDTH), dtype=np.intp)
        self._missing = np.empty(0, dtype=np.intp)
        self._nic_positions = np.empty(0, dtype=np.intp)
        self._nic_hosts = np.empty(0, dtype=np.intp)
        self._kv_positions = np.empty(0, dtype=np.intp)
        self._kv_cells = np.empty(0, dtype=np.intp)

    # ------------------------------------------------------------------ inputs

    def set_hosts(self, hosts: Iterable[str], inventory_gpus: Mapping[str, Iterable[int]]) -> None:
        """The hosts to show (besides those with samples) and the GPU indices their inventories list."""
        wanted = sorted(set(hosts))
        gpus = {host: tuple(sorted(set(indices))) for host, indices in inventory_gpus.items()}
        if wanted != self._wanted or gpus != self._inventory_gpus:
            self._wanted, self._inventory_gpus = wanted, gpus
            self._dirty = True

    def set_worker_gpus(self, placement: Mapping[tuple[str, str], Iterable[int]]) -> None:
        """(host, worker id) -> the GPUs its engines run on (from the deployments' plans). A worker not
        named here is taken to use every GPU of its host."""
        placed = {key: tuple(gpus) for key, gpus in placement.items()}
        if placed != self._worker_gpus:
            self._worker_gpus = placed
            self._index_dirty = True

    def record_xid(self, host: str, gpu: int) -> None:
        """The agent of `host` raised an XID alert for GPU `gpu`."""
        self._xid_counts[(host, gpu)] = self._xid_counts.get((host, gpu), 0) + 1
        cell = self.cell_of(host, gpu)
        if cell is not None:
            self._xid_cells[cell] += 1
            if not math.isnan(self.xid[cell]):
                self.xid[cell] += 1

    # ------------------------------------------------------------------ reading

    @property
    def cells(self) -> int:
        return int(self.cell_host.shape[0])

    def columns(self) -> FleetColumns:
        return FleetColumns(self.raw, self.network, self.kv_cache, self.xid, self.latest_values)

    def cell_of(self, host: str, gpu: int) -> int | None:
        h = self._host_index.get(host)
        if h is None:
            return None
        first, last = int(self.host_first[h]), int(self.host_first[h + 1])
        found = np.flatnonzero(self.cell_gpu[first:last] == gpu)
        return first + int(found[0]) if found.size else None

    def update(self) -> bool:
        """Read every host's newest sample that was not read yet. Returns whether the cells changed."""
        live = self.live
        changed = False
        for host in live.hosts:
            reader = self._readers.get(host)
            if reader is None or reader.series_count != live.series_count(host):
                changed |= self._map_host(host)
                self._index_dirty = True
        if self._dirty or changed:
            self._rebuild()
            changed = True
        if self._index_dirty:
            self._reindex()
        buffer, read = self._buffer, False
        for h, host in enumerate(self.hosts):
            reader = self._readers[host]
            newest = live.last_time(host)
            if newest == reader.read_time or newest != newest:  # nothing new, or no sample yet (NaN)
                continue
            column = live.newest_column(host)
            if column is None or not reader.rows.shape[0]:
                continue
            reader.read_time = newest
            self.host_time[h] = newest
            # an index, not np.take: np.take releases the GIL whatever the size, and each re-take costs
            # milliseconds in the console's process of hundreds of busy threads (278 per refresh)
            buffer[reader.offset : reader.offset + reader.rows.shape[0]] = column[reader.rows]
            read = True
        if read:
            self._derive()
        self._read_latest()
        return changed

    # ------------------------------------------------------------------ internals

    def _derive(self) -> None:
        """Every column for every GPU from the buffer, in a handful of vectorised numpy calls."""
        buffer = self._buffer
        buffer[self._missing] = np.nan
        self.raw = buffer[self._raw_positions]
        hosts = len(self.hosts)
        nic = buffer[self._nic_positions]
        reported = nic == nic
        sums = np.bincount(self._nic_hosts, weights=np.where(reported, nic, 0.0), minlength=hosts)
        has = np.bincount(self._nic_hosts, weights=reported, minlength=hosts) > 0
        self.network = np.where(has, sums, np.nan).astype(np.float32)[self.cell_host]
        kv = np.full(self.cells, np.nan, dtype=np.float32)
        np.fmax.at(kv, self._kv_cells, buffer[self._kv_positions])  # two engines on one GPU: the fuller one
        self.kv_cache = kv
        # the agent watches XIDs while it samples: a host that sent samples and no XID has 0, not "no data"
        self.xid = np.where(np.isnan(self.host_time[self.cell_host]), np.nan, self._xid_cells).astype(np.float32)

    def _read_latest(self) -> None:
        """The newest-only values of each host whose version moved since they were read (all, after a rebuild)."""
        latest, versions = self.latest, self._latest_read
        for h, host in enumerate(self.hosts):
            version = latest.host_version(host)
            if versions.get(host) == version:
                continue
            versions[host] = version
            gpus = self._readers[host].gpus
            first = int(self.host_first[h])
            for column, metric in enumerate(LATEST_METRICS):
                self.latest_values[first : first + len(gpus), column] = latest.gpu_values(host, metric, gpus)

    def _map_host(self, host: str) -> bool:
        """Look up where `host`'s series live. Returns whether its GPUs changed (the cells must follow)."""
        live = self.live
        reader = self._readers.setdefault(host, _HostReader())
        reader.series_count = live.series_count(host)
        ids = live.series_ids(host)
        sampled_gpus = {device.index for device, _ in ids if device.kind == "gpu"}
        gpus = tuple(sorted(sampled_gpus | set(self._inventory_gpus.get(host, ()))))
        nics = sorted({device for device, metric in ids if device.kind == "nic" and metric in NIC_METRICS})
        workers = sorted({device for device, _ in ids if device.kind == "worker"})  # each engine, and their sum
        keys: list[SeriesKey] = [(Device.gpu(index), metric) for index in gpus for metric in RAW_METRICS]
        keys += [(nic, metric) for nic in nics for metric in NIC_METRICS]
        available = set(ids)
        for device in workers:
            keys.append(next(((device, m) for m in KV_USAGE_METRICS if (device, m) in available), (device, "")))
        rows = live.rows_of(host, keys)
        reader.missing = np.flatnonzero(rows < 0)
        rows[reader.missing] = 0
        reader.rows = rows
        reader.nic_count = len(nics) * len(NIC_METRICS)
        reader.workers = tuple(device.name for device in workers)
        reader.read_time = math.nan
        changed = gpus != reader.gpus
        reader.gpus = gpus
        return changed

    def _rebuild(self) -> None:
        self._dirty = False
        live_hosts = set(self.live.hosts)
        names = sorted(set(self._wanted) | live_hosts)
        for host in names:
            reader = self._readers.setdefault(host, _HostReader())
            if host not in live_hosts:
                reader.gpus = tuple(self._inventory_gpus.get(host, ()))
            elif set(self._inventory_gpus.get(host, ())) - set(reader.gpus):
                self._map_host(host)  # the inventory names GPUs the samples did not (yet)
        counts = [len(self._readers[host].gpus) for host in names]
        self.hosts = names
        self._host_index = {host: h for h, host in enumerate(names)}
        self.host_first = np.concatenate([[0], np.cumsum(counts, dtype=np.intp)]).astype(np.intp)
        total = int(self.host_first[-1])
        self.cell_host = np.repeat(np.arange(len(names), dtype=np.intp), counts)
        self.cell_gpu = np.fromiter((gpu for host in names for gpu in self._readers[host].gpus), np.intp, total)
        self.raw = np.full((total, WIDTH), np.nan, dtype=np.float32)
        self.network = np.full(total, np.nan, dtype=np.float32)
        self.kv_cache = np.full(total, np.nan, dtype=np.float32)
        self.xid = np.full(total, np.nan, dtype=np.float32)
        self.latest_values = np.full((total, len(LATEST_METRICS)), np.nan, dtype=np.float32)
        self._latest_read = {}
        self._xid_cells = np.asarray(
            [self._xid_counts.get((host, gpu), 0) for host in names for gpu in self._readers[host].gpus],
            dtype=np.float32,
        )
        self.host_time = np.full(len(names), np.nan)
        self._index_dirty = True
        self.structure += 1

    def _reindex(self) -> None:
        """Where every host's values go in the buffer, and the index arrays that derive the columns."""
        self._index_dirty = False
        offset = 0
        raw, missing, nic_positions, nic_hosts, kv_positions, kv_cells = [], [], [], [], [], []
        for h, host in enumerate(self.hosts):
            reader = self._readers[host]
            reader.offset = offset
            reader.read_time = math.nan  # the buffer is new: read every host again
            first, last = int(self.host_first[h]), int(self.host_first[h + 1])
            count = last - first
            if reader.rows.shape[0] < count * WIDTH:  # a host known only from its inventory: nothing to read
                reader.rows = np.empty(0, dtype=np.intp)
            size = reader.rows.shape[0]
            if size:
                raw.append(offset + np.arange(count * WIDTH).reshape(count, WIDTH))
            else:
                raw.append(np.full((count, WIDTH), -1, dtype=np.intp))  # -1: the buffer's last value, NaN
            missing.append(offset + reader.missing)
            nic_start = offset + count * WIDTH
            nic_positions.append(np.arange(nic_start, nic_start + reader.nic_count))
            nic_hosts.append(np.full(reader.nic_count, h, dtype=np.intp))
            kv_start = nic_start + reader.nic_count
            gpus = np.asarray(reader.gpus, dtype=np.intp)
            for engine, worker in enumerate(reader.workers):
                placed = self._worker_gpus.get((host, worker))
                cells = first + (np.flatnonzero(np.isin(gpus, placed)) if placed is not None else np.arange(count))
                kv_cells.append(cells)
                kv_positions.append(np.full(cells.shape[0], kv_start + engine, dtype=np.intp))
            offset += size
        self._buffer = np.full(offset + 1, np.nan, dtype=np.float32)  # the last value stays NaN
        self._raw_positions = np.concatenate(raw) if raw else np.empty((0, WIDTH), dtype=np.intp)
        self._missing = _joined(missing)
        self._nic_positions, self._nic_hosts = _joined(nic_positions), _joined(nic_hosts)
        self._kv_positions, self._kv_cells = _joined(kv_positions), _joined(kv_cells)


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.intp) if parts else np.empty(0, dtype=np.intp)
