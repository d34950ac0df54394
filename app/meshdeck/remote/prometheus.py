"""A Prometheus server's HTTP API, read-only: `query_range` and `series`, validated where the JSON arrives.

Fleets larger than one desktop keep their history in the operator's Prometheus, which scrapes every
agent's exporter (`meshdeck-agent serve --prometheus HOST:PORT`). This module is the boundary to that
server: it builds the request, bounds what it waits for (a timeout per request) and what it reads (a
byte cap per response), and checks the reply's shape (`status`, `data.resultType`, each series'
`metric` labels and `[time, "value"]` pairs) before anything past it sees a value. Every error names
the URL asked and the field that was wrong.

    client = PrometheusClient("http://prometheus:9090")
    step = choose_step(since, until, max_points=1000)
    for series in client.query_range('meshdeck_gpu_power_w{host="gpu-a"}', since, until, step):
        series.labels["gpu"], series.ts, series.values

Prometheus refuses a `query_range` whose (end - start) / step exceeds 11,000 points per series;
`choose_step` never asks for more (and `MAX_RANGE_POINTS` is what `query_range` checks before asking).
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from meshdeck.core.errors import InputError

MAX_RANGE_POINTS = 11_000  # Prometheus' own limit on points per series in one query_range
DEFAULT_TIMEOUT_S = 15.0
DEFAULT_MAX_RESPONSE_BYTES = 64 << 20  # one reply; a chart or an export chunk stays far below
MIN_STEP_S = 0.001  # Prometheus' resolution is the millisecond


class PrometheusError(InputError):
    """A Prometheus server could not be asked, or answered something this client cannot use: input from
    outside, reported as the CLI and the console report any (one line, exit status 2).

    `str(error)` names the URL asked and the field (or the HTTP step) that was wrong."""

    def __init__(self, url: str, field: str, problem: str) -> None:
        self.url = url
        self.reply_field = field
        super().__init__(f"Prometheus at {url}: {field}", problem)


@dataclass(frozen=True)
class PrometheusSeries:
    """One series of a matrix reply: its labels (`__name__` included when the query kept it) and its
    points in time order (Unix seconds; values finite, the points Prometheus gave as NaN or ±Inf left out)."""

    labels: Mapping[str, str]
    ts: tuple[float, ...]
    values: tuple[float, ...]


def parse_base_url(text: str, *, field: str = "prometheus_url") -> str:
    """`http://host:9090` (a path prefix such as `/prometheus` kept; no query, no fragment) or an InputError-like
    ValueError naming `field`."""
    value = text.strip()
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(field, f"{text!r} is not an http(s) URL of a Prometheus server (e.g. http://localhost:9090)")
    if parts.query or parts.fragment:
        raise InputError(field, f"{text!r}: give the server's base URL, without ?query or #fragment")
    try:
        parts.port  # noqa: B018  # raises for a port out of range
    except ValueError as exc:
        raise InputError(field, f"{text!r}: {exc}") from None
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


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
    """Read-only calls to one Prometheus server; thread-safe (no state besides the settings)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.base_url = parse_base_url(base_url)
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes

    def query_range(self, query: str, start: float, end: float, step: float) -> list[PrometheusSeries]:
        """`/api/v1/query_range`: the matrix `query` gives at every step from start to end (inclusive)."""
        url = self._url("/api/v1/query_range")
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
        data = self._get(url, params)
        return parse_matrix(data, url)

    def series(self, matchers: Iterable[str], start: float, end: float) -> list[dict[str, str]]:
        """`/api/v1/series`: the label sets of the series that match any of `matchers` in [start, end]."""
        url = self._url("/api/v1/series")
        params = [("match[]", m) for m in matchers] + [("start", _stamp(start)), ("end", _stamp(end))]
        return parse_label_sets(self._get(url, params), url)

    def _url(self, path: str) -> str:
        return self.base_url + path

    def _get(self, url: str, params: list[tuple[str, str]]) -> Any:
        """The `data` of a successful reply (POST form, as Prometheus accepts for long queries)."""
        body = urllib.parse.urlencode(params).encode()
        request = urllib.request.Request(
            url, data=body, headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                raw = reply.read(self.max_response_bytes + 1)
        except urllib.error.HTTPError as exc:
            # Prometheus answers 400 / 422 / 503 with its JSON error body: say what it said.
            raw = exc.read(64 << 10)
            raise PrometheusError(url, f"HTTP {exc.code}", _error_text(raw) or str(exc.reason)) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PrometheusError(url, "connection", f"{reason} (after up to {self.timeout_s:g} s)") from None
        if len(raw) > self.max_response_bytes:
            raise PrometheusError(
                url, "response", f"longer than {self.max_response_bytes} bytes: ask for a shorter range or fewer series"
            )
        return parse_reply(raw, url)


def _stamp(seconds: float) -> str:
    return f"{seconds:.3f}"


def _error_text(raw: bytes) -> str:
    try:
        payload = json.loads(raw)
    except ValueError:
        return _printable(raw.decode("utf-8", "replace"))[:300]
    if isinstance(payload, dict) and isinstance(payload.get("error"), str):
        return _printable(f"{payload.get('errorType', 'error')}: {payload['error']}")[:300]
    return ""


def _printable(text: str) -> str:
    """The text with control characters shown as escapes: what a server says reaches a terminal or a widget."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def parse_reply(raw: bytes, url: str) -> Any:
    """The `data` field of a Prometheus API reply `{"status": "success", "data": ...}`."""
    try:
        payload = json.loads(raw)
    except ValueError as exc:
        raise PrometheusError(url, "body", f"not JSON ({exc})") from None
    if not isinstance(payload, dict):
        raise PrometheusError(url, "body", f"expected a JSON object, got {type(payload).__name__}")
    status = payload.get("status")
    if status != "success":
        detail = _error_text(raw) or f"status {status!r}"
        raise PrometheusError(url, "status", detail)
    if "data" not in payload:
        raise PrometheusError(url, "data", "missing")
    return payload["data"]


def _labels(value: Any, url: str, field: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise PrometheusError(url, field, "expected an object of string labels")
    return value


def parse_label_sets(data: Any, url: str) -> list[dict[str, str]]:
    """`/api/v1/series`' data: a list of label objects."""
    if not isinstance(data, list):
        raise PrometheusError(url, "data", f"expected a list of label sets, got {type(data).__name__}")
    return [_labels(item, url, f"data[{i}]") for i, item in enumerate(data)]


def parse_matrix(data: Any, url: str) -> list[PrometheusSeries]:
    """A query_range's data: `{"resultType": "matrix", "result": [{"metric": {...}, "values": [[t, "v"], ...]}]}`."""
    if not isinstance(data, dict):
        raise PrometheusError(url, "data", f"expected an object, got {type(data).__name__}")
    if data.get("resultType") != "matrix":
        raise PrometheusError(url, "data.resultType", f"expected 'matrix', got {data.get('resultType')!r}")
    result = data.get("result")
    if not isinstance(result, list):
        raise PrometheusError(url, "data.result", "expected a list of series")
    return [_series(item, url, f"data.result[{i}]") for i, item in enumerate(result)]


def _series(item: Any, url: str, field: str) -> PrometheusSeries:
    if not isinstance(item, dict):
        raise PrometheusError(url, field, "expected an object with 'metric' and 'values'")
    labels = _labels(item.get("metric"), url, f"{field}.metric")
    points = item.get("values")
    if not isinstance(points, list):
        raise PrometheusError(url, f"{field}.values", "expected a list of [time, value] pairs")
    ts: list[float] = []
    values: list[float] = []
    for j, point in enumerate(points):
        where = f"{field}.values[{j}]"
        if not (isinstance(point, list) and len(point) == 2):
            raise PrometheusError(url, where, 'expected a [time, "value"] pair')
        stamp, text = point
        if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not math.isfinite(stamp):
            raise PrometheusError(url, f"{where}[0]", f"expected a time in Unix seconds, got {stamp!r}")
        if not isinstance(text, str):
            raise PrometheusError(url, f"{where}[1]", f"expected the value as a string, got {text!r}")
        try:
            value = float(text)
        except ValueError:
            raise PrometheusError(url, f"{where}[1]", f"{_printable(text)[:40]!r} is not a number") from None
        if ts and stamp <= ts[-1]:
            raise PrometheusError(url, f"{where}[0]", f"time {stamp} is not after the previous point's {ts[-1]}")
        if math.isfinite(value):
            ts.append(float(stamp))
            values.append(value)
    return PrometheusSeries(labels=labels, ts=tuple(ts), values=tuple(values))
