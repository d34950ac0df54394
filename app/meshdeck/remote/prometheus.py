"""A Prometheus server's HTTP API, read-only: `query_range` and `series`, validated where the JSON arrives.

Fleets larger than one desktop keep their history in the operator's Prometheus, which scrapes every
agent's exporter (`meshdeck-agent serve --prometheus HOST:PORT`). This module is the boundary to that
server, which meshdeck does not control: each request has one deadline from connecting to the reply's
last byte, a reply is read up to a byte bound and decoded up to a bound on points and series, redirects
are refused, and `user:password@` in the URL is sent as basic auth and never shown (prometheus_http.py).
The reply's shape (`status`, `data.resultType`, each series' `metric` labels and `[time, "value"]` pairs)
is checked before anything past it sees a value. Every error names the URL asked (its password hidden),
the field that was wrong and, for a bound, the query and the bound.

    client = PrometheusClient("http://prometheus:9090")
    step = choose_step(since, until, max_points=1000)
    for series in client.query_range('meshdeck_gpu_power_w{host="gpu-a"}', since, until, step):
        series.labels["gpu"], series.ts, series.values

Prometheus refuses a `query_range` whose (end - start) / step exceeds 11,000 points per series;
`choose_step` never asks for more (and `MAX_RANGE_POINTS` is what `query_range` checks before asking).
Label values are the server's text, kept as sent: escape them (core.text.printable) before showing them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from meshdeck.core.text import printable
from meshdeck.remote.prometheus_http import PrometheusError as PrometheusError
from meshdeck.remote.prometheus_http import ServerURL, parse_server_url, post_form, said

MAX_RANGE_POINTS = 11_000  # Prometheus' own limit on points per series in one query_range
DEFAULT_TIMEOUT_S = 15.0  # one request, connect to last byte
# One reply's bounds. meshdeck asks for at most 200,000 points per export request (~30 bytes each as
# Prometheus writes them) and ~1,000 per series for a chart; an agent listing is a label set per host.
# A reply past them is refused before it takes more memory (decoded JSON takes ~10-30x its bytes).
DEFAULT_MAX_RESPONSE_BYTES = 32 << 20
DEFAULT_MAX_POINTS = 500_000
DEFAULT_MAX_SERIES = 50_000
MIN_STEP_S = 0.001  # Prometheus' resolution is the millisecond
SHOWN_QUERY_CHARS = 160


@dataclass(frozen=True)
class ReplyLimits:
    """What one reply may hold: points (all its series together) and series (or label sets)."""

    max_points: int = DEFAULT_MAX_POINTS
    max_series: int = DEFAULT_MAX_SERIES

    @property
    def max_containers(self) -> int:
        """JSON arrays and objects a reply within the bounds holds at most: a point is an array, a series an
        object with a label object and an array of points (a label set: one object), plus the envelope."""
        return self.max_points + 3 * self.max_series + 8


DEFAULT_LIMITS = ReplyLimits()


@dataclass(frozen=True)
class PrometheusSeries:
    """One series of a matrix reply: its labels (`__name__` included when the query kept it) and its
    points in time order (Unix seconds; values finite, the points Prometheus gave as NaN or ±Inf left out)."""

    labels: Mapping[str, str]
    ts: tuple[float, ...]
    values: tuple[float, ...]


def parse_base_url(text: str, *, field: str = "prometheus_url") -> ServerURL:
    """The server a `http://[user:password@]host:9090[/prefix]` URL names (no query, no fragment), or an
    InputError naming `field` (the password never in it)."""
    return parse_server_url(text, field=field)


def choose_step(since: float, until: float, max_points: int) -> float:
    """The step (seconds) for a query_range over [since, until] that returns at most `max_points` points
    per series and never more than Prometheus' 11,000: whole seconds from 1 s up, the millisecond below."""
    if not (math.isfinite(since) and math.isfinite(until)) or until <= since:
        raise ValueError(f"until ({until}) must be after since ({since})")
    if max_points < 2:
        raise ValueError(f"max_points must be at least 2, got {max_points}")
    points = min(max_points, MAX_RANGE_POINTS)
    step = (until - since) / (points - 1)  # both ends are evaluated: n steps give n + 1 points
    step = math.ceil(step) if step >= 1 else math.ceil(step * 1000) / 1000
    return max(MIN_STEP_S, float(step))


def range_points(since: float, until: float, step: float) -> int:
    """How many points per series a query_range over [since, until] at `step` returns."""
    return math.floor((until - since) / step) + 1


class PrometheusClient:
    """Read-only calls to one Prometheus server; thread-safe (no state besides the settings).

    `base_url` is what messages name (the password hidden); the credentials stay in `server`."""

    def __init__(
        self,
        base_url: str | ServerURL,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        limits: ReplyLimits = DEFAULT_LIMITS,
    ) -> None:
        self.server = base_url if isinstance(base_url, ServerURL) else parse_base_url(base_url)
        self.base_url = self.server.shown
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self.limits = limits

    def __repr__(self) -> str:
        return f"PrometheusClient({self.base_url!r}, timeout_s={self.timeout_s!r})"

    def query_range(self, query: str, start: float, end: float, step: float) -> list[PrometheusSeries]:
        """`/api/v1/query_range`: the matrix `query` gives at every step from start to end (inclusive)."""
        path = "/api/v1/query_range"
        url = self.base_url + path
        if not (math.isfinite(start) and math.isfinite(end) and math.isfinite(step)) or end < start or step <= 0:
            raise PrometheusError(url, "range", f"start {start}, end {end}, step {step}: need start <= end, step > 0")
        if range_points(start, end, step) > MAX_RANGE_POINTS:
            raise PrometheusError(
                url,
                "step",
                f"{step:g} s over {end - start:g} s is {range_points(start, end, step)} points per series; "
                f"Prometheus answers at most {MAX_RANGE_POINTS}",
            )
        # Prometheus reads times to the millisecond: round inwards, so no point falls outside [start, end]
        first, last = math.ceil(start * 1000) / 1000, math.floor(end * 1000) / 1000
        params = [
            ("query", query),
            ("start", _stamp(first)),
            ("end", _stamp(max(first, last))),
            ("step", f"{step:.3f}"),
        ]
        what = f"query_range '{printable(query, SHOWN_QUERY_CHARS)}'"
        return decode_matrix(self._post(path, params, what), url, self.limits, what)

    def series(self, matchers: Iterable[str], start: float, end: float) -> list[dict[str, str]]:
        """`/api/v1/series`: the label sets of the series that match any of `matchers` in [start, end]."""
        path = "/api/v1/series"
        asked = list(matchers)
        params = [("match[]", m) for m in asked] + [("start", _stamp(start)), ("end", _stamp(end))]
        what = f"series '{printable(' '.join(asked), SHOWN_QUERY_CHARS)}'"
        return decode_label_sets(self._post(path, params, what), self.base_url + path, self.limits, what)

    def _post(self, path: str, params: list[tuple[str, str]], what: str) -> bytes:
        """The body of a successful reply (POST form, as Prometheus accepts for long queries)."""
        return post_form(
            self.server, path, params, timeout_s=self.timeout_s, max_bytes=self.max_response_bytes, what=what
        )


def decode_matrix(
    raw: bytes, url: str, limits: ReplyLimits = DEFAULT_LIMITS, what: str = "the request"
) -> list[PrometheusSeries]:
    """A query_range reply's bytes as typed series, or a PrometheusError (never another exception, whatever
    the bytes: tests/unit/remote/test_prometheus_reply_properties.py)."""
    return parse_matrix(parse_reply(raw, url, limits, what), url, limits, what)


def decode_label_sets(
    raw: bytes, url: str, limits: ReplyLimits = DEFAULT_LIMITS, what: str = "the request"
) -> list[dict[str, str]]:
    """A series reply's bytes as label sets, or a PrometheusError (never another exception)."""
    return parse_label_sets(parse_reply(raw, url, limits, what), url, limits, what)


def _stamp(seconds: float) -> str:
    return f"{seconds:.3f}"


def _brief(value: Any) -> str:
    """A JSON value as an error message may quote it: containers by kind only (one may be nested past the
    recursion limit, or megabytes long), scalars escaped and cut short."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return f"'{printable(value, 40)}'"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        return "a number too large to be a time or value"
    return printable(json.dumps(value), 40)


def _too_many(url: str, field: str, what: str, count: str, bound: str) -> PrometheusError:
    return PrometheusError(
        url,
        field,
        f"the reply to {what} holds {count}, over the bound of {bound} per reply: ask for a shorter range, "
        "a larger step or fewer series",
    )


def parse_reply(raw: bytes, url: str, limits: ReplyLimits = DEFAULT_LIMITS, what: str = "the request") -> Any:
    """The `data` field of a Prometheus API reply `{"status": "success", "data": ...}`.

    Before decoding, the reply's arrays and objects are counted (bytes.count: no decoding): a reply with
    more than the points and series `limits` allow could hold is refused before it takes memory."""
    containers = raw.count(b"[") + raw.count(b"{")  # brackets inside strings count too: an upper bound
    if containers > limits.max_containers:
        raise _too_many(
            url,
            "response",
            what,
            f"{containers} arrays and objects",
            f"{limits.max_points} points in {limits.max_series} series",
        )
    try:
        payload = json.loads(raw)
    except RecursionError:
        raise PrometheusError(url, "body", "JSON nested deeper than Python decodes (no Prometheus reply is)") from None
    except ValueError as exc:
        raise PrometheusError(url, "body", f"not JSON ({printable(str(exc), 200)})") from None
    if not isinstance(payload, dict):
        raise PrometheusError(url, "body", f"expected a JSON object, got {_brief(payload)}")
    status = payload.get("status")
    if status != "success":
        detail = said(payload) or f"status {_brief(status)}"
        raise PrometheusError(url, "status", detail)
    if "data" not in payload:
        raise PrometheusError(url, "data", "missing")
    return payload["data"]


def _labels(value: Any, url: str, field: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise PrometheusError(url, field, "expected an object of string labels")
    return value


def parse_label_sets(
    data: Any, url: str, limits: ReplyLimits = DEFAULT_LIMITS, what: str = "the request"
) -> list[dict[str, str]]:
    """`/api/v1/series`' data: a list of label objects (at most `limits.max_series`)."""
    if not isinstance(data, list):
        raise PrometheusError(url, "data", f"expected a list of label sets, got {_brief(data)}")
    if len(data) > limits.max_series:
        raise _too_many(url, "data", what, f"{len(data)} series", f"{limits.max_series} series")
    return [_labels(item, url, f"data[{i}]") for i, item in enumerate(data)]


def parse_matrix(
    data: Any, url: str, limits: ReplyLimits = DEFAULT_LIMITS, what: str = "the request"
) -> list[PrometheusSeries]:
    """A query_range's data: `{"resultType": "matrix", "result": [{"metric": {...}, "values": [[t, "v"], ...]}]}`
    (at most `limits.max_series` series and `limits.max_points` points in all)."""
    if not isinstance(data, dict):
        raise PrometheusError(url, "data", f"expected an object, got {_brief(data)}")
    if data.get("resultType") != "matrix":
        raise PrometheusError(url, "data.resultType", f"expected 'matrix', got {_brief(data.get('resultType'))}")
    result = data.get("result")
    if not isinstance(result, list):
        raise PrometheusError(url, "data.result", "expected a list of series")
    if len(result) > limits.max_series:
        raise _too_many(url, "data.result", what, f"{len(result)} series", f"{limits.max_series} series")
    points = sum(
        len(item["values"]) for item in result if isinstance(item, dict) and isinstance(item.get("values"), list)
    )
    if points > limits.max_points:
        raise _too_many(url, "data.result", what, f"{points} points", f"{limits.max_points} points")
    return [_series(item, url, f"data.result[{i}]") for i, item in enumerate(result)]


def _time(stamp: Any) -> float | None:
    """A point's time as a finite float, or None."""
    if isinstance(stamp, bool) or not isinstance(stamp, int | float):
        return None
    try:
        value = float(stamp)
    except OverflowError:  # an integer past the float range
        return None
    return value if math.isfinite(value) else None


def _series(item: Any, url: str, field: str) -> PrometheusSeries:
    if not isinstance(item, dict):
        raise PrometheusError(url, field, "expected an object with 'metric' and 'values'")
    labels = _labels(item.get("metric"), url, f"{field}.metric")
    points = item.get("values")
    if not isinstance(points, list):
        raise PrometheusError(url, f"{field}.values", "expected a list of [time, value] pairs")
    ts: list[float] = []
    values: list[float] = []
    previous: float | None = None
    for j, point in enumerate(points):
        where = f"{field}.values[{j}]"
        if not (isinstance(point, list) and len(point) == 2):
            raise PrometheusError(url, where, 'expected a [time, "value"] pair')
        stamp, text = point
        when = _time(stamp)
        if when is None:
            raise PrometheusError(url, f"{where}[0]", f"expected a time in Unix seconds, got {_brief(stamp)}")
        if not isinstance(text, str):
            raise PrometheusError(url, f"{where}[1]", f"expected the value as a string, got {_brief(text)}")
        try:
            value = float(text)
        except ValueError:
            raise PrometheusError(url, f"{where}[1]", f"{_brief(text)} is not a number") from None
        if previous is not None and when <= previous:
            raise PrometheusError(url, f"{where}[0]", f"time {when!r} is not after the previous point's {previous!r}")
        previous = when
        if math.isfinite(value):
            ts.append(when)
            values.append(value)
    return PrometheusSeries(labels=labels, ts=tuple(ts), values=tuple(values))
