"""The dashboard at fleet scale: a chart that would draw more than `AGGREGATE_ABOVE` curves draws, instead,
per group a median curve with a min–max band, and the `OUTLIERS` series furthest from their group's median
as curves of their own, each named in the chart's legend ("node-00 median of 8 GPUs (band: min–max)",
"node-03 gpu5 (outlier)") and in the readout under the cursor.

Groups: one per host while a chart shows at most `HOST_GROUPS_MAX` hosts; beyond that one per running
deployment (the hosts its workers run on) and one of the hosts in none; with no deployment, one of all
hosts. The bucketed data behind every aggregated chart is one `FleetAggregate`, so each host's ring is
read once per refresh whatever the number of aggregated charts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from meshdeck.core.plural import counted
from meshdeck.core.samples import Device, SeriesKey
from meshdeck.ui import theme
from meshdeck.ui.charts.aggregate import AggregateSeries, FleetAggregate
from meshdeck.ui.charts.time_chart import CurveSpec, TimeChart
from meshdeck.ui.views.dashboard.charts import KV_USAGE_METRICS, ChartDefinition, Pick

AGGREGATE_ABOVE = 32  # curves in one chart; above this it draws aggregates
HOST_GROUPS_MAX = 8  # hosts shown up to which each host is a group (its GPUs' median and band)
OUTLIERS = 3
NOT_DEPLOYED = "not in a running deployment"
_AGGREGATE_HOST = "\x00aggregate"  # the pseudo host of a chart's aggregate curves in its data source
_MEDIAN, _OUTLIER = "median", "outlier"
_MEMBERS = {"gpu": ("GPU", "GPUs"), "worker": ("engine", "engines"), "nic": ("port", "ports")}  # what a group has

# (host, series, since) -> (times, values) from `since` to the window's end
Reader = Callable[[str, list[SeriesKey], float], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class _Slot:
    group: str
    pick: Pick
    color: str
    members: int


@dataclass(frozen=True)
class _ChartPlan:
    definition: ChartDefinition
    first_slot: int
    slots: tuple[_Slot, ...]
    rows: np.ndarray  # the aggregate's rows of this chart's series
    labels: tuple[str, ...]  # each row's curve label (host and device, what it counts), for its outlier curve
    grouped_by: str  # "host", "deployment", "fleet"
    series: int


def _pick_of(definition: ChartDefinition, metric: str) -> int:
    for index, pick in enumerate(definition.picks):
        if metric == pick.metric or (pick.metric == KV_USAGE_METRICS[0] and metric in KV_USAGE_METRICS):
            return index
    raise KeyError(metric)


def group_of_hosts(hosts: Sequence[str], deployment_of_host: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """(what the groups are, host -> its group's label) for the hosts one chart shows."""
    if len(hosts) <= HOST_GROUPS_MAX:
        return "host", {host: host for host in hosts}
    if any(host in deployment_of_host for host in hosts):
        return "deployment", {host: deployment_of_host.get(host, NOT_DEPLOYED) for host in hosts}
    label = f"all {counted(len(hosts), 'host')}"
    return "fleet", {host: label for host in hosts}


class FleetScaleCharts:
    """Which charts draw aggregates, and drawing them."""

    def __init__(self) -> None:
        self.plans: dict[str, _ChartPlan] = {}
        self.aggregate: FleetAggregate | None = None

    def plan(
        self, chosen: Mapping[str, tuple[ChartDefinition, list[CurveSpec]]], deployment_of_host: Mapping[str, str]
    ) -> set[str]:
        """Aggregate every chart of `chosen` (name -> its definition and curves) with more than
        AGGREGATE_ABOVE curves. Returns the names of the charts that draw aggregates."""
        series: list[AggregateSeries] = []
        plans: dict[str, _ChartPlan] = {}
        slot_count = 0
        for name, (definition, specs) in chosen.items():
            if len(specs) <= AGGREGATE_ABOVE:
                continue
            hosts = list(dict.fromkeys(spec.key[0] for spec in specs))
            grouped_by, group_of = group_of_hosts(hosts, deployment_of_host)
            groups = list(dict.fromkeys(group_of[host] for host in hosts))
            slot_index: dict[tuple[str, int], int] = {}
            members: dict[int, int] = {}
            first_row = len(series)
            for spec in specs:
                host, device, metric = spec.key
                slot = slot_index.setdefault(
                    (group_of[host], _pick_of(definition, metric)), slot_count + len(slot_index)
                )
                members[slot] = members.get(slot, 0) + 1
                series.append(AggregateSeries(host, (device, metric), slot))
            slots = tuple(
                _Slot(
                    group,
                    definition.picks[pick],
                    theme.SERIES_COLORS[groups.index(group) % len(theme.SERIES_COLORS)],
                    members[slot],
                )
                for (group, pick), slot in sorted(slot_index.items(), key=lambda item: item[1])
            )
            plans[name] = _ChartPlan(
                definition,
                slot_count,
                slots,
                np.arange(first_row, len(series), dtype=np.intp),
                tuple(spec.label for spec in specs),  # the chart adds TX / RX
                grouped_by,
                len(specs),
            )
            slot_count += len(slots)
        self.plans = plans
        self.aggregate = FleetAggregate(series, slot_count) if plans else None
        return set(plans)

    def update(self, read: Reader, window_s: float, end: float) -> None:
        """Read what is new of every aggregated series (one read per host)."""
        if self.aggregate is not None:
            self.aggregate.update(read, window_s, end)

    def draw(self, name: str, chart: TimeChart, x_start: float, x_end: float) -> int:
        """Hand chart `name` its medians, bands and outliers. Returns the points handed over."""
        plan, aggregate = self.plans[name], self.aggregate
        assert aggregate is not None
        x = aggregate.centers
        stats = aggregate.stats
        definition = plan.definition
        specs, bands = [], []
        groups: list[str] = []
        for offset, slot in enumerate(plan.slots):
            index = plan.first_slot + offset
            mirrored = slot.pick.mirrored
            singular, plural = _MEMBERS.get(definition.device_kind, ("series", "series"))
            key = (_AGGREGATE_HOST, Device("host", index), _MEDIAN)
            label = f"{slot.group} median of {counted(slot.members, singular, plural)}{slot.pick.suffix}"
            specs.append(CurveSpec(key, label, slot.color, mirrored, slot.pick.dashed, note="band: min–max"))
            bands.append((x, stats.low[index], stats.high[index], slot.color, mirrored, key))
            if slot.group not in groups:
                groups.append(slot.group)
        outliers = aggregate.outliers(plan.rows, OUTLIERS)
        outlier_colors = theme.SERIES_COLORS[len(groups) % len(theme.SERIES_COLORS) :] + theme.SERIES_COLORS
        for rank, row in enumerate(outliers):
            slot = plan.slots[int(aggregate.slot_of_row[row]) - plan.first_slot]
            label = plan.labels[row - int(plan.rows[0])]
            color = outlier_colors[rank % len(outlier_colors)]
            specs.append(
                CurveSpec(
                    (_AGGREGATE_HOST, Device("host", row), _OUTLIER),
                    label,
                    color,
                    slot.pick.mirrored,
                    slot.pick.dashed,
                    note="outlier",
                )
            )
        chart.set_curves(specs)

        def source(host: str, keys: list[SeriesKey]) -> tuple[np.ndarray, np.ndarray]:
            assert host == _AGGREGATE_HOST
            rows = [
                stats.median[device.index] if metric == _MEDIAN else aggregate.values[device.index]
                for device, metric in keys
            ]
            return x, np.vstack(rows) if rows else np.empty((0, x.shape[0]), dtype=np.float32)

        points = chart.update_data(source, x_start, x_end)
        chart.set_bands(bands)
        per = {"host": " per host", "deployment": " per deployment", "fleet": ""}[plan.grouped_by]
        chart.set_title_suffix(f" — {plan.series:,} series: median + min–max{per}, {counted(len(outliers), 'outlier')}")
        return points
