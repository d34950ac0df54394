"""History read from Prometheus: the exporter's names and labels map back to meshdeck's host / device /
metric, charts and exports get what recorded Prometheus 2.42 replies hold, in the store's own shapes."""

from __future__ import annotations

import io
import itertools
import json
import re

import pytest
from fake_prometheus import fake_prometheus, recorded  # tests/fakes is on sys.path (tests/conftest.py)
from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck.core.errors import InputError
from meshdeck.core.samples import Device
from meshdeck.services import prometheus_history
from meshdeck.services.prometheus_history import PrometheusSource, chart, export_history, prometheus_hosts
from meshdeck.services.prometheus_names import (
    EXPOSED_NAMES,
    device_labels,
    device_of,
    meshdeck_metric,
    prometheus_names,
)
from meshdeck_agent.metric_registry import COUNTER, METRICS


def test_every_registered_metric_maps_back_from_the_name_the_exporter_gives_it():
    assert len(EXPOSED_NAMES) == len({(m.scope, m.name) for m in METRICS})
    for metric in METRICS:
        names = prometheus_names(metric.name)
        assert names and all(meshdeck_metric(name) == metric.name for name in names)
        if metric.kind == COUNTER:
            assert all(name.endswith("_total") for name in names)  # prometheus_client exposes counters so
    assert meshdeck_metric("meshdeck_gpu_power_w") == "power_w"
    assert set(prometheus_names("nvlink_tx_bytes_per_s")) == {
        "meshdeck_gpu_nvlink_tx_bytes_per_s",
        "meshdeck_gpu_nvlink_link_tx_bytes_per_s",
    }
    assert meshdeck_metric("meshdeck_worker_spec_decode_acceptance") == "spec_decode_acceptance"  # a newer agent's
    assert meshdeck_metric("node_cpu_seconds_total") is None and meshdeck_metric("meshdeck_sample_seq") is None


@pytest.mark.parametrize(
    ("labels", "device"),
    [
        ({"gpu": "3", "uuid": "GPU-x"}, Device.gpu(3)),
        ({"gpu": "3", "link": "17"}, Device.nvlink(3, 17)),
        ({"nic": "mlx5_0/1", "kind": "ib"}, Device.nic("mlx5_0/1")),
        ({"worker": "w1", "engine": "0"}, Device.worker("w1", "0")),
        ({"worker": "w1", "engine": ""}, Device.worker("w1")),
        ({"instance": "10.0.0.5:9400", "job": "meshdeck"}, Device("host")),
        ({"gpu": "GPU-7f"}, None),  # another exporter's gpu label
        ({"gpu": "3", "link": "x"}, None),
        ({"gpu": "3", "link": "1000"}, None),  # beyond what a stored device name holds
    ],
)
def test_the_device_comes_from_the_exporters_labels(labels: dict[str, str], device: Device | None):
    assert device_of(labels) == device


def _routed(routes: dict[str, str]):
    """Answer each request with the recording whose route (a regex) matches its query, else an empty matrix."""

    def answer(path: str, params: dict[str, list[str]]) -> tuple[int, bytes]:
        asked = params.get("query", params.get("match[]", [""]))[0]
        for pattern, name in routes.items():
            if re.search(pattern, f"{path} {asked}"):
                return 200, recorded(name)
        if path.endswith("/series"):
            return 200, b'{"status":"success","data":[]}'
        return 200, b'{"status":"success","data":{"resultType":"matrix","result":[]}}'

    return answer


def test_a_chart_maps_each_prometheus_series_to_the_hosts_device_and_metric():
    with fake_prometheus(_routed({"query_range .*meshdeck_gpu_power_w": "query_range_power_gpu_a.json"})) as fake:
        ranges = chart(PrometheusSource(fake.url), host="gpu-a", metric="power_w", since=1000.0, until=1900.0)
    assert [(r.series.host, r.series.device, r.series.metric) for r in ranges] == [
        ("gpu-a", "gpu0", "power_w"),
        ("gpu-a", "gpu1", "power_w"),
    ]
    gpu0 = ranges[0]
    assert gpu0.tier == "raw" and gpu0.step_s == 1.0 and len(gpu0) == 6
    assert gpu0.mean[0] == gpu0.minimum[0] == gpu0.maximum[0] == 75.66 and set(gpu0.count) == {1}
    ((_, params),) = fake.requests
    assert params["query"] == ['{__name__=~"meshdeck_gpu_power_w",host="gpu-a"}']
    assert params["step"] == ["1.000"]


def test_a_gpus_nvlink_sum_and_its_links_are_one_metric_on_two_devices():
    routes = {"nvlink": "query_range_nvlink_gpu_b.json"}
    with fake_prometheus(_routed(routes)) as fake:
        source = PrometheusSource(fake.url)
        ranges = chart(source, host="gpu-b", metric="nvlink_tx_bytes_per_s", since=0.0, until=600.0, device="gpu1")
    assert [(r.series.device, r.series.metric) for r in ranges] == [
        ("gpu1", "nvlink_tx_bytes_per_s"),
        ("gpu1/nvlink3", "nvlink_tx_bytes_per_s"),
    ]
    assert ranges[1].mean == (16.0, 200.0, 24.0, 356.0)
    query = fake.requests[0][1]["query"][0]
    assert 'host="gpu-b",gpu="1"' in query and "meshdeck_gpu_nvlink_link_tx_bytes_per_s" in query


def test_every_series_an_agent_exports_gets_a_meshdeck_name():
    with fake_prometheus(_routed({"query_range": "query_range_all_gpu_a.json"})) as fake:
        source = PrometheusSource(fake.url)
        series = source.client.query_range("x", 0, 1, 1)
        keyed = dict(prometheus_history._keyed(source, "gpu-a", None, series))
    assert len(keyed) == len(series) > 40
    devices = {Device.from_text(device).kind for device, _ in keyed}
    assert devices == {"host", "gpu", "nvlink", "nic"}
    assert ("host", "cpu_pct") in keyed and ("gpu0", "memory_total_bytes") in keyed


def test_a_wide_range_is_read_as_min_mean_max_and_count_per_bucket_stamped_at_the_buckets_start():
    routes = {"count_over_time": "query_range_count_over_time_cpu.json"}

    def answer(path: str, params: dict[str, list[str]]) -> tuple[int, bytes]:
        query = params["query"][0]
        if query.startswith(("min_over_time", "max_over_time", "avg_over_time")):
            # the same buckets as the recorded count: Prometheus drops the name the same way for all four
            body = json.loads(recorded(routes["count_over_time"]))
            scale = {"min": 0.5, "max": 2.0, "avg": 1.0}[query[:3]]
            for series in body["data"]["result"]:
                series["values"] = [[t, str(float(v) * scale)] for t, v in series["values"]]
            return 200, json.dumps(body).encode()
        return _routed(routes)(path, params)

    with fake_prometheus(answer) as fake:
        (cpu,) = chart(PrometheusSource(fake.url), host="gpu-a", metric="cpu_pct", since=0.0, until=60_000.0)
    assert cpu.tier == "range" and cpu.step_s == 61.0  # 60,000 s / 999 -> whole seconds
    assert (cpu.series.device, cpu.series.metric) == ("host", "cpu_pct")
    assert cpu.ts == (1796156233.0 - 61, 1796156293.0 - 61)
    assert cpu.count == (12, 60) and cpu.minimum == (6.0, 30.0) and cpu.maximum == (24.0, 120.0)
    windows = {params["query"][0].split("(")[0]: params["query"][0] for _path, params in fake.requests}
    assert set(windows) == {"count_over_time", "min_over_time", "max_over_time", "avg_over_time"}
    assert all(query.endswith("[61000ms])") for query in windows.values())


def test_hosts_are_the_values_of_the_host_label_of_the_agents_series():
    with fake_prometheus(_routed({"series meshdeck_agent_info": "series_agent_info.json"})) as fake:
        assert prometheus_hosts(PrometheusSource(fake.url)) == ["gpu-a", "gpu-b"]
        assert prometheus_hosts(PrometheusSource(fake.url, host_label="instance")) == [
            "127.0.0.1:19401",
            "127.0.0.1:19402",
        ]
        with pytest.raises(InputError, match=r"^--prometheus-host-label: .* none of their series has a 'rack' label"):
            prometheus_hosts(PrometheusSource(fake.url, host_label="rack"))


def test_a_host_name_is_quoted_as_a_promql_string():
    source = PrometheusSource("http://localhost:9090")
    selector = source.selector(host='a"b\\c}', names=["meshdeck_host_cpu_pct"])
    assert selector == '{__name__=~"meshdeck_host_cpu_pct",host="a\\"b\\\\c}"}'
    assert source.selector(host="h", device=Device("host")).endswith(',gpu="",nic="",worker=""}')


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"host_label": "host-name"}, "--prometheus-host-label"),
        ({"timeout_s": 0.0}, "--prometheus-timeout"),
        ({"timeout_s": float("nan")}, "--prometheus-timeout"),
    ],
)
def test_a_bad_source_setting_is_refused_naming_the_option(options: dict[str, object], field: str):
    with pytest.raises(InputError, match=f"^{field}: "):
        PrometheusSource("http://localhost:9090", **options)  # type: ignore[arg-type]


def test_an_export_writes_the_columns_the_sqlite_export_writes_one_row_per_step():
    routes = {
        "series .*meshdeck_gpu_power_w": "series_power_listing",
        "query_range .*meshdeck_gpu_power_w": "query_range_power_gpu_a.json",
    }
    listing = json.dumps(
        {
            "status": "success",
            "data": [s["metric"] for s in json.loads(recorded("query_range_power_gpu_a.json"))["data"]["result"]],
        }
    ).encode()

    def answer(path: str, params: dict[str, list[str]]) -> tuple[int, bytes]:
        if path.endswith("/series"):
            return 200, listing
        return _routed(routes)(path, params)

    out = io.StringIO()
    with fake_prometheus(answer) as fake:
        source = PrometheusSource(fake.url)
        count = export_history(
            source, out, host="gpu-a", metric="power_w", since=1796156288.0, until=1796156294.0, fmt="csv"
        )
    lines = out.getvalue().splitlines()
    assert lines[0] == "time,ts,host,device,metric,unit,value"
    assert count == 12 and len(lines) == 13
    assert lines[1] == "2026-12-01T20:18:08.000Z,1796156288.0,gpu-a,gpu0,power_w,W,75.66"
    assert {line.split(",")[3] for line in lines[1:]} == {"gpu0", "gpu1"}


def test_an_export_for_a_host_prometheus_lacks_names_the_hosts_it_has():
    refused = pytest.raises(InputError, match=r"^--host: .*no series of host 'gpu-z'.*hosts it has: gpu-a, gpu-b\)")
    with fake_prometheus(_routed({"series meshdeck_agent_info": "series_agent_info.json"})) as fake, refused:
        export_history(PrometheusSource(fake.url), io.StringIO(), host="gpu-z", since=0.0, until=10.0)


def test_export_chunks_never_ask_more_than_prometheus_answers_and_cover_the_range_once():
    steps = list(prometheus_history._chunks(0.0, 100_000.0, 1.0, 1, aligned=False))
    assert all((last - first) / 1.0 + 1 <= 11_000 for first, last in steps)
    assert steps[0][0] == 0.0 and steps[-1][1] == 99_999.0
    assert all(b[0] == a[1] + 1.0 for a, b in itertools.pairwise(steps))
    wide = list(prometheus_history._chunks(0.0, 3600.0, 1.0, 400, aligned=False))
    assert all((last - first + 1) * 400 <= prometheus_history.POINTS_PER_REQUEST for first, last in wide)


_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-./:", min_size=1, max_size=24)
_DEVICES = st.one_of(
    st.just(Device("host")),
    st.integers(0, 9999).map(Device.gpu),
    st.builds(Device.nvlink, st.integers(0, 9999), st.integers(0, 999)),
    _NAMES.map(Device.nic),
    st.builds(Device.worker, _NAMES, st.one_of(st.just(""), st.integers(0, 4095).map(str))),
)


@settings(deadline=None, max_examples=400)
@given(device=_DEVICES)
def test_the_labels_a_device_is_selected_by_map_back_to_that_device(device: Device):
    # Prometheus drops a label whose value is empty: what a series of this device carries
    labels = {name: value for name, value in device_labels(device) if value}
    assert device_of(labels) == device
    assert Device.from_text(device.text) == device


def _worker_listing(metrics: int, series_each: int = 1) -> list[dict[str, str]]:
    return [
        {"__name__": f"meshdeck_worker_custom_{m}", "host": "gpu-a", "worker": f"w{s}"}
        for m in range(metrics)
        for s in range(series_each)
    ]


def _serving(listing: list[dict[str, str]]):
    body = json.dumps({"status": "success", "data": listing}).encode()

    def answer(path: str, _params: dict[str, list[str]]) -> tuple[int, bytes]:
        if path.endswith("/series"):
            return 200, body
        return 200, b'{"status":"success","data":{"resultType":"matrix","result":[]}}'

    return answer


def test_a_raw_export_asks_for_every_metric_in_one_request_per_chunk():
    """300 metrics of one series each over 60 s: one request (18,000 points), not one per metric."""
    with fake_prometheus(_serving(_worker_listing(300))) as fake:
        export_history(PrometheusSource(fake.url), io.StringIO(), host="gpu-a", since=0.0, until=60.0)
    queries = [params["query"][0] for path, params in fake.requests if path.endswith("/query_range")]
    assert queries == ['{__name__=~"meshdeck_(gpu|host|nic|worker)_.+",host="gpu-a"}']


@pytest.mark.parametrize(
    ("listing", "bound"),
    [
        (_worker_listing(1, prometheus_history.MAX_EXPORT_SERIES + 1), "reads at most 10000: choose one --metric"),
        (_worker_listing(prometheus_history.MAX_EXPORT_METRICS + 1), "reads at most 500: choose one --metric"),
    ],
)
def test_an_export_past_the_series_or_metric_bound_is_refused_before_reading_any_point(
    listing: list[dict[str, str]], bound: str
):
    with fake_prometheus(_serving(listing)) as fake, pytest.raises(InputError) as raised:
        export_history(PrometheusSource(fake.url), io.StringIO(), host="gpu-a", since=0.0, until=86_400.0, tier="1m")
    assert str(raised.value).startswith(f"--metric: Prometheus at {fake.url} lists ") and bound in str(raised.value)
    assert [path for path, _params in fake.requests] == ["/api/v1/series"]


def test_an_unknown_host_lists_at_most_twenty_hosts_each_escaped_and_cut_short():
    names = ["evil\x1b[2J" + "x" * 500] + [f"h{i:02d}" for i in range(30)]
    agents = json.dumps({"status": "success", "data": [{"host": name} for name in names]}).encode()

    def answer(path: str, params: dict[str, list[str]]) -> tuple[int, bytes]:
        if params.get("match[]") == ["meshdeck_agent_info"]:
            return 200, agents
        return 200, b'{"status":"success","data":[]}'

    with fake_prometheus(answer) as fake, pytest.raises(InputError) as raised:
        export_history(PrometheusSource(fake.url), io.StringIO(), host="gpu-z", since=0.0, until=10.0)
    message = str(raised.value)
    assert "\x1b" not in message and "evil\\x1b[2J" in message and "x" * 100 not in message
    assert message.endswith(", h18 and 11 more)")
