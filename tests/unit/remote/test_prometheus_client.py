"""The Prometheus HTTP API boundary: recorded replies of Prometheus 2.42 parsed, malformed ones refused
naming the URL and the field, steps that never exceed Prometheus' 11,000 points, bounded waits and reads."""

from __future__ import annotations

import itertools
import json

import pytest
from fake_prometheus import fake_prometheus, recorded  # tests/fakes is on sys.path (tests/conftest.py)
from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck.core.errors import InputError
from meshdeck.remote.prometheus import (
    MAX_RANGE_POINTS,
    PrometheusClient,
    PrometheusError,
    ReplyLimits,
    choose_step,
    parse_base_url,
    parse_label_sets,
    parse_matrix,
    parse_reply,
    range_points,
)

URL = "http://prometheus.example:9090/api/v1/query_range"


def test_a_recorded_query_range_reply_gives_each_series_its_labels_and_points_in_time_order():
    (first, second) = parse_matrix(parse_reply(recorded("query_range_power_gpu_a.json"), URL), URL)
    assert first.labels["__name__"] == "meshdeck_gpu_power_w" and first.labels["host"] == "gpu-a"
    assert (first.labels["gpu"], second.labels["gpu"]) == ("0", "1")
    assert len(first.ts) == len(first.values) == 6
    assert list(first.ts) == sorted(first.ts) and all(b - a == 1 for a, b in itertools.pairwise(first.ts))
    assert first.values[0] == 75.66 and all(70 < v < 80 for v in first.values + second.values)


def test_a_recorded_series_listing_gives_the_label_sets():
    labels = parse_label_sets(parse_reply(recorded("series_agent_info.json"), URL), URL)
    assert [(s["__name__"], s["host"]) for s in labels] == [
        ("meshdeck_agent_info", "gpu-a"),
        ("meshdeck_agent_info", "gpu-b"),
    ]


def test_an_error_reply_says_what_prometheus_said_and_where():
    with pytest.raises(PrometheusError) as raised:
        parse_reply(recorded("error_bad_query.json"), URL)
    assert str(raised.value) == (f"Prometheus at {URL}: status: bad_data: 1:6: parse error: unclosed left parenthesis")
    assert isinstance(raised.value, InputError)  # the CLI prints it as one line and exits 2


def test_an_instant_vector_is_refused_where_a_range_matrix_is_expected():
    with pytest.raises(PrometheusError, match=r"data.resultType: expected 'matrix', got 'vector'"):
        parse_matrix(parse_reply(recorded("query_vector_up.json"), URL), URL)


def _matrix(*series: object) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": list(series)}}).encode()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"<html>502 Bad Gateway</html>", "body"),
        (b"[1, 2]", "body"),
        (b'{"status": "success"}', "data"),
        (_matrix("not an object"), "data.result[0]"),
        (_matrix({"metric": {"gpu": 0}, "values": []}), "data.result[0].metric"),
        (_matrix({"metric": {}, "values": {"t": 1}}), "data.result[0].values"),
        (_matrix({"metric": {}, "values": [[1.0, "2"], [2.0]]}), "data.result[0].values[1]"),
        (_matrix({"metric": {}, "values": [["1", "2"]]}), "data.result[0].values[0][0]"),
        (_matrix({"metric": {}, "values": [[1.0, 2.0]]}), "data.result[0].values[0][1]"),
        (_matrix({"metric": {}, "values": [[1.0, "lots"]]}), "data.result[0].values[0][1]"),
        (_matrix({"metric": {}, "values": [[2.0, "1"], [1.0, "1"]]}), "data.result[0].values[1][0]"),
    ],
)
def test_a_malformed_reply_is_refused_naming_the_url_and_the_field(body: bytes, field: str):
    with pytest.raises(PrometheusError) as raised:
        parse_matrix(parse_reply(body, URL), URL)
    assert raised.value.url == URL and raised.value.reply_field == field
    assert str(raised.value).startswith(f"Prometheus at {URL}: {field}: ")


def test_points_prometheus_gives_as_nan_or_infinite_are_left_out():
    body = _matrix({"metric": {}, "values": [[1, "1.5"], [2, "NaN"], [3, "+Inf"], [4, "2"]]})
    (series,) = parse_matrix(parse_reply(body, URL), URL)
    assert series.ts == (1.0, 4.0) and series.values == (1.5, 2.0)


def test_control_characters_in_a_server_error_are_escaped():
    body = json.dumps({"status": "error", "errorType": "bad_data", "error": "bad\x1b[31m\nthing"}).encode()
    with pytest.raises(PrometheusError) as raised:
        parse_reply(body, URL)
    assert "\x1b" not in str(raised.value) and "\n" not in str(raised.value) and "\\x1b" in str(raised.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://localhost:9090", "http://localhost:9090"),
        (" https://prom.example/prometheus/ ", "https://prom.example/prometheus"),
    ],
)
def test_a_base_url_is_kept_with_its_path_prefix(text: str, expected: str):
    assert parse_base_url(text).shown == expected


@pytest.mark.parametrize("text", ["localhost:9090", "ftp://host", "http://", "http://h:9090/?x=1", "http://h:99999"])
def test_a_url_that_is_no_prometheus_base_url_is_refused_naming_the_field(text: str):
    with pytest.raises(InputError, match=r"^--prometheus-url: "):
        parse_base_url(text, field="--prometheus-url")


@settings(deadline=None, max_examples=400)
@given(
    since=st.floats(min_value=0, max_value=4e9),
    span=st.floats(min_value=1e-3, max_value=1e9),
    max_points=st.integers(min_value=2, max_value=50_000),
)
def test_the_chosen_step_never_asks_for_more_points_than_wanted_or_than_prometheus_answers(
    since: float, span: float, max_points: int
):
    until = since + span
    if until <= since:
        return
    step = choose_step(since, until, max_points)
    assert step >= 0.001
    assert range_points(since, until, step) <= min(max_points, MAX_RANGE_POINTS)


def test_the_step_is_whole_seconds_from_a_second_up():
    assert choose_step(0, 3600, 1000) == 4.0  # 3600 / 999 = 3.6 s -> 4 s, 901 points
    assert choose_step(0, 999, 1000) == 1.0
    assert choose_step(0, 900, 1000) == 0.901  # below a second: whole milliseconds
    assert choose_step(0, 10, 1000) == pytest.approx(0.011)


def _power(_path: str, _params: dict[str, list[str]]) -> tuple[int, bytes]:
    return 200, recorded("query_range_power_gpu_a.json")


def test_query_range_posts_the_query_range_and_step_prometheus_expects():
    with fake_prometheus(_power) as fake:
        series = PrometheusClient(fake.url).query_range('meshdeck_gpu_power_w{host="gpu-a"}', 100.0, 160.5, 1.5)
    assert len(series) == 2
    ((path, params),) = fake.requests
    assert path == "/api/v1/query_range"
    assert params == {
        "query": ['meshdeck_gpu_power_w{host="gpu-a"}'],
        "start": ["100.000"],
        "end": ["160.500"],
        "step": ["1.500"],
    }


def test_a_range_past_prometheus_point_limit_is_refused_before_asking():
    with fake_prometheus(_power) as fake:
        client = PrometheusClient(fake.url)
        with pytest.raises(PrometheusError, match=r"step: 1 s over 11000 s is 11001 points"):
            client.query_range("up", 0, 11_000, 1)
        client.query_range("up", 0, 10_999, 1)  # 11,000 points: Prometheus' own limit, still asked
    assert len(fake.requests) == 1


def test_prometheus_refusal_over_http_is_reported_with_its_status_and_message():
    answer = (400, recorded("error_too_many_points.json"))
    with fake_prometheus(lambda _p, _q: answer) as fake, pytest.raises(PrometheusError) as raised:
        PrometheusClient(fake.url).query_range("up", 0, 10, 1)
    assert raised.value.reply_field == "HTTP 400" and raised.value.url == fake.url + "/api/v1/query_range"
    assert "exceeded maximum resolution of 11,000 points per timeseries" in str(raised.value)


def test_a_reply_longer_than_the_bound_is_refused_without_reading_it_all():
    too_long = pytest.raises(PrometheusError, match=r"response: longer than 100 bytes")
    with fake_prometheus(_power) as fake, too_long:
        PrometheusClient(fake.url, max_response_bytes=100).query_range("up", 0, 10, 1)


def test_a_server_that_does_not_answer_fails_at_the_deadline_naming_the_url():
    with fake_prometheus(_power) as fake:
        fake.answer = fake.stall
        with pytest.raises(PrometheusError) as raised:
            PrometheusClient(fake.url, timeout_s=0.5).series(["up"], 0, 10)
    assert raised.value.reply_field == "deadline" and raised.value.url == fake.url + "/api/v1/series"
    assert "no complete reply to series 'up' within 0.5 s" in str(raised.value)


def test_a_server_that_is_not_there_is_a_connection_error():
    with fake_prometheus(_power) as fake:
        url = fake.url
    with pytest.raises(PrometheusError, match=r"/api/v1/query_range: connection: "):
        PrometheusClient(url, timeout_s=2).query_range("up", 0, 10, 1)


def test_the_range_is_rounded_inwards_to_prometheus_milliseconds_so_no_point_falls_outside_it():
    """`%.3f` once rounded a start of x.0004 down to x.000, and Prometheus answered a point before it."""
    with fake_prometheus(_power) as fake:
        PrometheusClient(fake.url).query_range("up", 100.0004, 160.9996, 1)
    ((_, params),) = fake.requests
    assert (params["start"], params["end"]) == (["100.001"], ["160.999"])


@settings(deadline=None, max_examples=300)
@given(
    labels=st.dictionaries(
        st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,20}", fullmatch=True), st.text(max_size=30), max_size=6
    ),
    points=st.lists(
        st.tuples(st.floats(0.001, 10.0), st.floats(allow_nan=False, allow_infinity=False)), min_size=0, max_size=40
    ),
)
def test_any_well_formed_matrix_reads_back_exactly(labels: dict[str, str], points: list[tuple[float, float]]):
    ts, values, now = [], [], 1.7e9
    for gap, value in points:
        now += round(gap, 3)
        ts.append(round(now, 3))
        values.append(value)
    body = _matrix({"metric": labels, "values": [[t, repr(v)] for t, v in zip(ts, values, strict=True)]})
    (series,) = parse_matrix(parse_reply(body, URL), URL)
    assert dict(series.labels) == labels and series.ts == tuple(ts) and series.values == tuple(values)


def _dense_matrix(points: int, series: int = 1) -> bytes:
    """A well-formed matrix of `series` series holding `points` points in all (the densest JSON per point)."""
    each = points // series
    values = ",".join(f'[{1_000_000 + t},"1"]' for t in range(each))
    result = ",".join(f'{{"metric":{{"gpu":"{s}"}},"values":[{values}]}}' for s in range(series))
    return f'{{"status":"success","data":{{"resultType":"matrix","result":[{result}]}}}}'.encode()


def test_a_reply_with_more_points_than_the_bound_is_refused_naming_the_query_and_the_bound():
    """600,000 points in 9 MB: under the byte bound, decoded they took ~200 MB (4.4 M points, 1.5 GB)."""
    body = _dense_matrix(600_000, series=4)
    with fake_prometheus(lambda _p, _q: (200, body)) as fake, pytest.raises(PrometheusError) as raised:
        PrometheusClient(fake.url).query_range('meshdeck_gpu_power_w{host="a"}', 0, 10, 1)
    message = str(raised.value)
    assert "the reply to query_range 'meshdeck_gpu_power_w{host=\"a\"}' holds" in message
    assert "over the bound of 500000 points" in message


def test_the_points_and_series_bounds_hold_for_replies_that_pass_the_container_count():
    url = URL
    with pytest.raises(PrometheusError, match=r"holds 12 points, over the bound of 10 points per reply"):
        parse_matrix(parse_reply(recorded("query_range_power_gpu_a.json"), url), url, ReplyLimits(max_points=10))
    with pytest.raises(PrometheusError, match=r"holds 2 series, over the bound of 1 series per reply"):
        parse_label_sets(parse_reply(recorded("series_agent_info.json"), url), url, ReplyLimits(max_series=1))


def test_a_listing_with_more_series_than_the_bound_is_refused():
    body = json.dumps({"status": "success", "data": [{"host": f"h{i}"} for i in range(50_001)]}).encode()
    with fake_prometheus(lambda _p, _q: (200, body)) as fake, pytest.raises(PrometheusError) as raised:
        PrometheusClient(fake.url).series(["meshdeck_agent_info"], 0, 10)
    assert "series 'meshdeck_agent_info'" in str(raised.value) and "bound of 50000 series" in str(raised.value)


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"status":"success","data":{"resultType":"matrix","result":[' + b"[" * 100_000 + b"]" * 100_000 + b"]}}",
    ],
)
def test_json_nested_past_the_recursion_limit_is_a_clear_error(body: bytes):
    with pytest.raises(PrometheusError, match=r"body: JSON nested deeper than Python decodes"):
        parse_matrix(parse_reply(body, URL), URL)


def test_an_error_body_nested_past_the_recursion_limit_is_quoted_not_decoded():
    deep = b"[" * 100_000
    with fake_prometheus(lambda _p, _q: (400, deep)) as fake, pytest.raises(PrometheusError) as raised:
        PrometheusClient(fake.url).query_range("up", 0, 10, 1)
    assert raised.value.reply_field == "HTTP 400" and str(raised.value).endswith("[" * 100 + "… (65536 characters)")


@pytest.mark.parametrize(
    ("stamp", "shown"),
    [(10**400, "a number too large"), (float("inf"), "Infinity"), ([[[[1]]]], "an array"), ({"t": 1}, "an object")],
)
def test_a_time_that_is_no_finite_number_is_refused_without_quoting_it_whole(stamp: object, shown: str):
    body = _matrix({"metric": {}, "values": [[stamp, "1"]]})
    with pytest.raises(PrometheusError) as raised:
        parse_matrix(parse_reply(body, URL), URL)
    assert raised.value.reply_field == "data.result[0].values[0][0]" and shown in str(raised.value)
