"""Which charts the dashboard (and history) shows, and which series each one draws.

A chart definition turns the series a host has ((Device, metric): GPU 3 / `memory_used_bytes`,
worker w1 engine 0 / `kv_cache_usage_perc`, NIC mlx5_0/1 / `tx_bytes_per_s`) into curves,
honouring the host and GPU filters. Live and history views share these definitions, so a chart
means the same thing in both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from meshdeck.core.errors import InputError
from meshdeck.core.samples import Device, SeriesKey
from meshdeck.ui import theme
from meshdeck.ui.charts.time_chart import CurveSpec
from meshdeck.ui.charts.units import Unit, chart_unit

SeriesId = SeriesKey  # (device, metric)
KV_USAGE_METRICS = ("kv_cache_usage_perc", "gpu_cache_usage_perc")  # vLLM >= 0.10, and older


@dataclass(frozen=True)
class Selection:
    """The hosts shown (None: all) and the GPU indices shown (None: all)."""

    hosts: frozenset[str] | None = None
    gpus: frozenset[int] | None = None

    def shows_host(self, host: str) -> bool:
        return self.hosts is None or host in self.hosts

    def shows_gpu(self, index: int) -> bool:
        return self.gpus is None or index in self.gpus


def parse_gpu_filter(text: str) -> frozenset[int] | None:
    """`""`/`all` -> None; `0-3,6` -> {0, 1, 2, 3, 6}. Raises InputError naming the bad part."""
    text = text.strip().lower()
    if text in ("", "all", "*"):
        return None
    chosen: set[int] = set()
    for part in text.replace(" ", "").split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise InputError("GPU filter", f"{part!r} is not a GPU index or range like 0-3 (use e.g. 0-3,6)")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise InputError("GPU filter", f"range {part!r} runs backwards")
        if last - first > 4096:
            raise InputError("GPU filter", f"range {part!r} is larger than any node")
        chosen.update(range(first, last + 1))
    return frozenset(chosen)


def format_gpu_filter(gpus: frozenset[int] | None) -> str:
    """The text `parse_gpu_filter` reads back: None -> ""; {0, 1, 2, 3, 6} -> `0-3,6`."""
    if gpus is None:
        return ""
    parts: list[str] = []
    ordered = sorted(gpus)
    start = previous = ordered[0] if ordered else 0
    for index in [*ordered[1:], None]:
        if index is not None and index == previous + 1:
            previous = index
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if index is not None:
            start = previous = index
    return ",".join(parts) if ordered else ""


@dataclass(frozen=True)
class Pick:
    """Series of one device drawn as one or two curves (two: a TX/RX or solid/dashed pair)."""

    metric: str
    mirrored: bool = False
    dashed: bool = False
    suffix: str = ""


@dataclass(frozen=True)
class ChartDefinition:
    """One chart: the metrics it draws of each device of one kind. Its unit is the registry's unit of
    those metrics (meshdeck.services.metrics); every pick of a chart has the same one."""

    name: str  # stable id (settings, screenshots, tests)
    title: str
    device_kind: str  # "gpu", "worker", "nic"
    picks: tuple[Pick, ...]
    mirrored: bool = False

    @property
    def unit(self) -> Unit:
        return chart_unit(self.device_kind, self.picks[0].metric)

    def curves(
        self, series: Callable[[str], Iterable[SeriesId]], hosts: Sequence[str], selection: Selection
    ) -> list[CurveSpec]:
        """Curves for every selected host's devices of this chart's kind that report one of its metrics."""
        specs: list[CurveSpec] = []
        shown_devices = 0
        for host in hosts:
            if not selection.shows_host(host):
                continue
            available = set(series(host))
            devices = sorted({device for device, _ in available if device.kind == self.device_kind})
            for device in devices:
                if device.kind == "gpu" and not selection.shows_gpu(device.index):
                    continue
                color = theme.SERIES_COLORS[shown_devices % len(theme.SERIES_COLORS)]
                shown_devices += 1
                label = f"{host} {_short(device)}"  # the legend names host and device, however many hosts
                for pick in self.picks:
                    metric = _first_present(pick.metric, device, available)
                    if metric is None:
                        continue
                    specs.append(
                        CurveSpec(
                            key=(host, device, metric),
                            label=f"{label}{pick.suffix}",
                            color=color,
                            mirrored=pick.mirrored,
                            dashed=pick.dashed,
                        )
                    )
        return specs


def _first_present(metric: str, device: Device, available: set[SeriesId]) -> str | None:
    candidates = KV_USAGE_METRICS if metric == KV_USAGE_METRICS[0] else (metric,)
    for candidate in candidates:
        if (device, candidate) in available:
            return candidate
    return None


def _short(device: Device) -> str:
    """GPU 3 -> `gpu3`; worker w1 engine 0 -> `w1 engine 0`; NIC mlx5_0/1 -> `mlx5_0/1`."""
    if device.kind == "worker":
        return f"{device.name} engine {device.engine}" if device.engine else device.name
    if device.kind == "nic":
        return device.name
    return device.text


def _transmit_receive(name: str, title: str, device_kind: str, prefix: str) -> ChartDefinition:
    """A mirrored chart: `<prefix>tx_bytes_per_s` above zero, `<prefix>rx_bytes_per_s` below."""
    picks = (Pick(f"{prefix}tx_bytes_per_s"), Pick(f"{prefix}rx_bytes_per_s", mirrored=True))
    return ChartDefinition(name, title, device_kind, picks, mirrored=True)


DASHBOARD_CHARTS: tuple[ChartDefinition, ...] = (
    ChartDefinition("vram", "VRAM used per GPU", "gpu", (Pick("memory_used_bytes"),)),
    ChartDefinition("kv_cache", "KV-cache usage per vLLM engine", "worker", (Pick("kv_cache_usage_perc"),)),
    _transmit_receive("nvlink", "NVLink throughput per GPU", "gpu", "nvlink_"),
    _transmit_receive("pcie", "PCIe throughput per GPU", "gpu", "pcie_"),
    _transmit_receive("network", "InfiniBand / Ethernet per port", "nic", ""),
    ChartDefinition("utilization", "GPU utilization", "gpu", (Pick("utilization_pct"),)),
    ChartDefinition("power", "GPU power", "gpu", (Pick("power_w"),)),
    ChartDefinition("temperature", "GPU temperature", "gpu", (Pick("temperature_c"),)),
    ChartDefinition(
        "requests",
        "Requests running (solid) / waiting (dashed)",
        "worker",
        (Pick("num_requests_running", suffix=" running"), Pick("num_requests_waiting", dashed=True, suffix=" waiting")),
    ),
    ChartDefinition(
        "tokens",
        "Tokens/s: generated (solid) / prompt (dashed)",
        "worker",
        (
            Pick("generation_tokens_per_s", suffix=" generated"),
            Pick("prompt_tokens_per_s", dashed=True, suffix=" prompt"),
        ),
    ),
    # prefill/decode-disaggregated deployments: each engine's part names its pool (prefill0-…, decode0-…)
    ChartDefinition(
        "latency",
        "TTFT p50 (solid) / TPOT p50 (dashed) per vLLM engine",
        "worker",
        (Pick("ttft_p50_s", suffix=" TTFT"), Pick("itl_p50_s", dashed=True, suffix=" TPOT")),
    ),
    ChartDefinition(
        "kv_transfer",
        "KV transfer per engine (NixlConnector; prefill/decode pools)",
        "worker",
        (Pick("kv_transfer_bytes_per_s"),),
    ),
)


def dashboard_metrics(definitions: Sequence[ChartDefinition] = DASHBOARD_CHARTS) -> frozenset[str]:
    """Every metric name the charts draw: what `LiveMetrics(keep_metrics=...)` needs to keep."""
    names = {pick.metric for definition in definitions for pick in definition.picks}
    return frozenset(names | set(KV_USAGE_METRICS) | {"memory_total_bytes"})  # the VRAM chart's scale
