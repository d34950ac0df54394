"""Metric history read from the operator's Prometheus instead of this console's SQLite: charts and exports.

A fleet larger than one desktop is watched through Prometheus: it scrapes every agent's exporter
(`meshdeck-agent serve --prometheus HOST:PORT`), and the history view and `meshdeck history export
--source prometheus` read the same series back through its HTTP API (`query_range`). The exporter's
names and labels (meshdeck_agent.exporter) map back to meshdeck's own: `meshdeck_gpu_power_w{gpu="3"}`
is metric `power_w` of device `gpu3`, `meshdeck_gpu_nvlink_link_tx_bytes_per_s{gpu="3",link="7"}`
is `nvlink_tx_bytes_per_s` of `gpu3/nvlink7`, `{nic="mlx5_0/1"}` is `nic:mlx5_0/1`,
`{worker="w1",engine="0"}` is `worker:w1/engine:0`, no device label is `host` (prometheus_names.py).
The host is the value of one label the scrape config sets (`host` by default: `static_configs: [{targets: [...], labels:
{host: gpu-a}}]`; `instance` works too, then hosts are named `address:port`).

Charts get one point per step (at most `max_points`, never Prometheus' 11,000): below a minute the
value Prometheus holds at each step (tier "raw"); from a minute up, min / mean / max / count over
each step (`*_over_time`, tier "range"), drawn as the same min-max envelope as the store's rollups.
Exports write the rows `export_history` writes for SQLite: raw is the value at each `step_s`
(default 1 s, the agents' sample interval), 1m / 1h are min, mean, max and count per bucket.
"""

from __future__ import annotations

import logging
import math
import re
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, NoReturn

from meshdeck.core.errors import InputError
from meshdeck.core.samples import Device
from meshdeck.core.text import printable
from meshdeck.remote.prometheus import (
    DEFAULT_TIMEOUT_S as DEFAULT_TIMEOUT_S,  # the CLI shows it
)
from meshdeck.remote.prometheus import (
    MAX_RANGE_POINTS,
    PrometheusClient,
    PrometheusSeries,
    choose_step,
    parse_base_url,
)
from meshdeck.services.history import check_export_format, export_writer, iso_time
from meshdeck.services.metrics import series_unit
from meshdeck.services.prometheus_names import (
    AGENT_INFO,
    ALL_METRICS,
    device_labels,
    device_of,
    meshdeck_metric,
    prometheus_names,
    promql_string,
)
from meshdeck.store.query import Series, SeriesRange, tier_by_name

log = logging.getLogger(__name__)

SOURCES = ("sqlite", "prometheus")
DEFAULT_HOST_LABEL = "host"
MIN_CHART_STEP_S = 1.0  # the agents' default sample interval: a finer step repeats the same scrape
ENVELOPE_FROM_S = 60.0  # steps this long or longer are drawn as min-max envelopes, as the 1-minute rollups are
POINTS_PER_REQUEST = 200_000  # points (all series together) one export request asks for
# An export reads at most this many series of a host, of this many metrics: an agent exports ~600 series
# of ~60 metrics. Past them a (hostile or mislabelled) server would fan one export out into a request per
# step (raw) or per metric (buckets); the user narrows it with --metric / --device instead.
MAX_EXPORT_SERIES = 10_000
MAX_EXPORT_METRICS = 500
SHOWN_NAME_CHARS = 80  # a host or label value quoted in a message
SHOWN_HOSTS = 20
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


@dataclass(frozen=True)
class PrometheusSource:
    """Where history comes from when it is not this console's database: a Prometheus server's base URL,
    the label that names the host in its scrape config, and how long one request may take (connect to
    last byte).

    `url` is given as `http://[user:password@]host:9090[/prefix]`; once parsed it holds the URL as messages
    show it (the password replaced by ***), and only the client keeps the credentials."""

    url: str
    host_label: str = DEFAULT_HOST_LABEL
    timeout_s: float = DEFAULT_TIMEOUT_S
    client: PrometheusClient = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        server = parse_base_url(self.url, field="--prometheus-url")
        object.__setattr__(self, "url", server.shown)
        if not _LABEL_NAME.match(self.host_label):
            shown = printable(self.host_label, SHOWN_NAME_CHARS)
            raise InputError("--prometheus-host-label", f"'{shown}' is not a Prometheus label name")
        if not (math.isfinite(self.timeout_s) and 0 < self.timeout_s <= 600):
            raise InputError("--prometheus-timeout", f"{self.timeout_s!r} must be between 0 and 600 seconds")
        object.__setattr__(self, "client", PrometheusClient(server, timeout_s=self.timeout_s))

    def selector(self, *, host: str, names: Sequence[str] | None = None, device: Device | None = None) -> str:
        """`{__name__=~"a|b", host="gpu-a", gpu="3"}`: the series of `host` (of `names`, of `device`)."""
        pattern = "|".join(names) if names else ALL_METRICS
        matchers = [f"__name__=~{promql_string(pattern)}", f"{self.host_label}={promql_string(host)}"]
        if device is not None:
            matchers += [f"{name}={promql_string(value)}" for name, value in device_labels(device)]
        return "{" + ",".join(matchers) + "}"

    def host_of(self, labels: Mapping[str, str]) -> str | None:
        return labels.get(self.host_label) or None


def _parse_device(text: str | None) -> Device | None:
    if text is None:
        return None
    try:
        return Device.from_text(text)
    except ValueError as exc:
        raise InputError("--device", str(exc)) from None


# -- hosts --------------------------------------------------------------------------------------------


def prometheus_hosts(source: PrometheusSource, *, since: float | None = None, until: float | None = None) -> list[str]:
    """The hosts whose agents Prometheus scraped in [since, until] (default: the last 7 days), by name."""
    end = time.time() if until is None else until
    start = end - 7 * 86400 if since is None else since
    label_sets = source.client.series([AGENT_INFO], start, end)
    hosts = sorted({host for labels in label_sets if (host := source.host_of(labels)) is not None})
    if label_sets and not hosts:
        raise InputError(
            "--prometheus-host-label",
            f"Prometheus at {source.url} scrapes meshdeck agents, but none of their series has a "
            f"{source.host_label!r} label: set one per target in the scrape config (labels: {{host: NAME}}) "
            f"or choose the label that names hosts (e.g. instance)",
        )
    return hosts


# -- reading ------------------------------------------------------------------------------------------


@dataclass
class _Points:
    """One series' points as they arrive (several requests fill one)."""

    ts: list[float] = field(default_factory=list)
    mean: list[float] = field(default_factory=list)
    minimum: list[float] = field(default_factory=list)
    maximum: list[float] = field(default_factory=list)
    count: list[int] = field(default_factory=list)


def _keyed(
    source: PrometheusSource, host: str, metric: str | None, found: Sequence[PrometheusSeries]
) -> Iterator[tuple[tuple[str, str], PrometheusSeries]]:
    """(device text, metric) for each series of `host`; a series meshdeck cannot name is logged and skipped,
    and a second series with the same key (two jobs scraping one agent) is left out with a warning."""
    seen: dict[tuple[str, str], Mapping[str, str]] = {}
    for series in found:
        name = series.labels.get("__name__")
        known = metric if name is None else meshdeck_metric(name)
        device = device_of(series.labels)
        if known is None or device is None or source.host_of(series.labels) != host:
            log.debug("Prometheus series %s is not one meshdeck's exporter writes; skipped", _shown(series.labels))
            continue
        key = (device.text, known)
        if key in seen:
            log.warning(
                "Prometheus has two series for %s %s %s (%s and %s): the first is used",
                *(printable(text, SHOWN_NAME_CHARS) for text in (host, *key)),
                _shown(seen[key]),
                _shown(series.labels),
            )
            continue
        seen[key] = series.labels
        yield key, series


def _shown(labels: Mapping[str, str]) -> str:
    """A series' labels as a log line may show them: the server's text escaped and cut short."""
    return printable(str(dict(labels)), 300)


def _read_raw(
    source: PrometheusSource, selector: str, host: str, metric: str | None, start: float, end: float, step: float
) -> dict[tuple[str, str], _Points]:
    points: dict[tuple[str, str], _Points] = {}
    for key, series in _keyed(source, host, metric, source.client.query_range(selector, start, end, step)):
        kept = points.setdefault(key, _Points())
        kept.ts += series.ts
        kept.mean += series.values
        kept.minimum += series.values
        kept.maximum += series.values
        kept.count += [1] * len(series.ts)
    return points


def _read_buckets(
    source: PrometheusSource, selector: str, host: str, metric: str, start: float, end: float, step: float
) -> dict[tuple[str, str], _Points]:
    """min / mean / max / count over each step; Prometheus evaluates (t - step, t], stamped here t - step
    (the bucket's start, as the store's rollups are)."""
    window = f"[{_duration(step)}]"
    answers = {
        function: {
            key: dict(zip(series.ts, series.values, strict=True))
            for key, series in _keyed(
                source, host, metric, source.client.query_range(f"{function}({selector}{window})", start, end, step)
            )
        }
        for function in ("count_over_time", "min_over_time", "max_over_time", "avg_over_time")
    }
    points: dict[tuple[str, str], _Points] = {}
    for key, counts in answers["count_over_time"].items():
        kept = points.setdefault(key, _Points())
        for ts, count in counts.items():
            values = [answers[f].get(key, {}).get(ts) for f in ("avg_over_time", "min_over_time", "max_over_time")]
            if count < 1 or any(v is None for v in values):
                continue  # a sample arrived between the four evaluations: the next read has it whole
            mean, low, high = (float(v) for v in values if v is not None)
            kept.ts.append(ts - step)
            kept.mean.append(mean)
            kept.minimum.append(low)
            kept.maximum.append(high)
            kept.count.append(int(count))
    return points


def _duration(seconds: float) -> str:
    """A PromQL duration: whole milliseconds (`1500ms`, `60000ms`)."""
    return f"{max(1, round(seconds * 1000))}ms"


def chart(
    source: PrometheusSource,
    *,
    host: str,
    metric: str,
    since: float,
    until: float,
    device: str | None = None,
    max_points: int = 1000,
) -> list[SeriesRange]:
    """One chart's worth of `metric` for every device of `host` (or `device`), at most `max_points` points."""
    if not (math.isfinite(since) and math.isfinite(until)) or until <= since:
        raise InputError("range", f"until ({until}) must be after since ({since})")
    names = prometheus_names(metric)
    if not names:
        return []
    step = max(MIN_CHART_STEP_S, choose_step(since, until, max(2, max_points)))
    selector = source.selector(host=host, names=names, device=_parse_device(device))
    if step < ENVELOPE_FROM_S:
        tier, points = "raw", _read_raw(source, selector, host, metric, since, until, step)
    else:
        first = math.floor(since / step) * step + step  # the end of the first aligned bucket
        last = math.ceil(until / step) * step
        tier, points = "range", _read_buckets(source, selector, host, metric, first, last, step)
    return [_series_range(host, index, key, points[key], tier, step) for index, key in enumerate(sorted(points))]


def _series_range(host: str, index: int, key: tuple[str, str], points: _Points, tier: str, step: float) -> SeriesRange:
    """`Series.id` numbers the series of one answer (Prometheus has no ids); nothing stores it."""
    device, metric = key
    return SeriesRange(
        series=Series(index, host, device, metric),
        tier=tier,
        step_s=step,
        ts=tuple(points.ts),
        mean=tuple(points.mean),
        minimum=tuple(points.minimum),
        maximum=tuple(points.maximum),
        count=tuple(points.count),
    )


# -- export -------------------------------------------------------------------------------------------


def export_history(
    source: PrometheusSource,
    out: IO[str],
    *,
    host: str,
    metric: str | None = None,
    device: str | None = None,
    since: float | None = None,
    until: float | None = None,
    fmt: str = "csv",
    tier: str = "raw",
    step_s: float = 1.0,
) -> int:
    """Write the matching series of `host` in [since, until) as `history.export_history` writes SQLite's
    (same columns, same formats); returns the number of points. Without `since`, the last 24 hours.

    Raw rows come per time chunk (as many steps as one bounded request holds for every series listed: one
    query selects all the metrics, `__name__=~"a|b|..."`), then per series; bucketed rows per metric (the
    `*_over_time` functions drop the name), then per chunk, then per series. Each row names its host,
    device and metric; a device or metric name from the server is written escaped (core.text.printable:
    no control character reaches a terminal, no newline starts a row of its own).
    An export reads at most MAX_EXPORT_SERIES series of MAX_EXPORT_METRICS metrics (an InputError beyond).
    """
    check_export_format(fmt)
    chosen = tier_by_name(tier)
    if not (math.isfinite(step_s) and 0.001 <= step_s <= 86400):
        raise InputError("--step", f"{step_s!r} must be between 0.001 and 86400 seconds")
    end = time.time() if until is None else until
    start = end - 86400 if since is None else since
    if end <= start:
        raise InputError("--until", f"must be after --since ({iso_time(start)})")
    wanted = _parse_device(device)
    names = prometheus_names(metric) if metric is not None else None
    if metric is not None and not names:
        raise InputError("--metric", f"{metric!r} is not a metric name")
    selector = source.selector(host=host, names=names, device=wanted)
    listing = source.client.series([selector], start, end)
    metrics = _listed_metrics(source, host, listing)
    if not metrics:
        _refuse_empty(source, host, metric, device, start, end)
    bucket_s = chosen.bucket_ms / 1000
    step = bucket_s or step_s
    reads: list[tuple[str | None, str, int]]  # (the metric of a bucketed read, its selector, its series)
    if bucket_s:  # per metric: the functions drop the name, so two metrics' series would be one
        reads = [
            (name, source.selector(host=host, names=prometheus_names(name), device=wanted), len(metrics[name]))
            for name in sorted(metrics)
        ]
    else:  # every metric in one query per chunk, sized by every series listed (named or not)
        reads = [(None, selector, len(listing))]
    writer = export_writer(out, fmt, raw=not bucket_s)
    count = 0
    for name, query, series in reads:
        for chunk_start, chunk_end in _chunks(start, end, step, series, aligned=bool(bucket_s)):
            if name is not None:
                points = _read_buckets(source, query, host, name, chunk_start, chunk_end, step)
            else:
                points = _read_raw(source, query, host, None, chunk_start, chunk_end, step)
            for (device_text, metric_name), kept in sorted(points.items()):
                unit = series_unit(device_text, metric_name)
                prefix = [printable(host), printable(device_text), printable(metric_name), unit]
                for i, ts in enumerate(kept.ts):
                    if not start <= ts < end:
                        continue
                    if bucket_s:
                        row = [kept.minimum[i], kept.mean[i], kept.maximum[i], kept.count[i]]
                    else:
                        row = [kept.mean[i]]
                    writer.write([iso_time(ts), ts, *prefix, *row])
                    count += 1
    writer.close()
    return count


def _listed_metrics(source: PrometheusSource, host: str, listing: Sequence[Mapping[str, str]]) -> dict[str, set[str]]:
    """metric -> the devices the listing has it for; an InputError past the export's bounds."""
    if len(listing) > MAX_EXPORT_SERIES:
        raise InputError(
            "--metric",
            f"Prometheus at {source.url} lists {len(listing)} series of host '{printable(host, SHOWN_NAME_CHARS)}'; "
            f"one export reads at most {MAX_EXPORT_SERIES}: choose one --metric or --device",
        )
    metrics: dict[str, set[str]] = {}
    for labels in listing:
        known = meshdeck_metric(labels.get("__name__", ""))
        found = device_of(labels)
        if known is not None and found is not None:
            metrics.setdefault(known, set()).add(found.text)
    if len(metrics) > MAX_EXPORT_METRICS:
        raise InputError(
            "--metric",
            f"Prometheus at {source.url} lists {len(metrics)} metrics of host '{printable(host, SHOWN_NAME_CHARS)}'; "
            f"one export reads at most {MAX_EXPORT_METRICS}: choose one --metric",
        )
    return metrics


def _refuse_empty(
    source: PrometheusSource, host: str, metric: str | None, device: str | None, start: float, end: float
) -> NoReturn:
    """The InputError for an export that matched nothing: an unknown host (naming some the server has) or a
    metric / device the host lacks."""
    hosts = prometheus_hosts(source, since=start, until=end)
    if host not in hosts:
        shown = ", ".join(printable(name, SHOWN_NAME_CHARS) for name in hosts[:SHOWN_HOSTS])
        if len(hosts) > SHOWN_HOSTS:
            shown += f" and {len(hosts) - SHOWN_HOSTS} more"
        raise InputError(
            "--host",
            f"Prometheus at {source.url} has no series of host {host!r} between {iso_time(start)} and "
            f"{iso_time(end)} (hosts it has: {shown or 'none'})",
        )
    raise InputError("--metric", f"host {host!r} has no series matching metric={metric!r} device={device!r}")


def _chunks(start: float, end: float, step: float, series: int, *, aligned: bool) -> Iterator[tuple[float, float]]:
    """[first, last] evaluation times of consecutive query_range requests covering [start, end): each asks
    at most MAX_RANGE_POINTS steps and about POINTS_PER_REQUEST points over all `series`. Bucketed
    reads evaluate at bucket ends (aligned to the epoch), raw ones at start + k * step."""
    steps_per_request = max(1, min(MAX_RANGE_POINTS - 1, POINTS_PER_REQUEST // max(1, series)))
    if aligned:
        first = math.floor(start / step) * step + step
        last = math.ceil(end / step) * step
    else:
        first = start
        last = start + math.ceil((end - start) / step - 1e-9) * step - step
        last = max(first, last)
    while first <= last:
        stop = min(last, first + (steps_per_request - 1) * step)
        yield first, stop
        first = stop + step


SHOWN_HOST_CHARACTERS = 200


def shown_host(name: str) -> str:
    """A host name a Prometheus label gave, as a view shows it: control characters escaped, cut short."""
    text = printable(name)
    return text if len(text) <= SHOWN_HOST_CHARACTERS else text[: SHOWN_HOST_CHARACTERS - 1] + "…"


def url_without_password(url: str) -> str:
    """The URL as settings may keep it: a `user:password@` loses its password (the user types it again)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        if parts.password is None:
            return url
    except ValueError:
        return ""  # not a URL: nothing worth keeping, nothing leaked
    host = parts.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username or ''}@{host}"))
