"""One request to a Prometheus server: one deadline from connect to last byte, basic auth from the URL's
userinfo with the password never shown, redirects refused (credentials never go elsewhere)."""

from __future__ import annotations

import base64
import logging

import pytest
from fake_prometheus import fake_prometheus, recorded  # tests/fakes is on sys.path (tests/conftest.py)
from meshdeck import cli
from meshdeck.core.errors import InputError
from meshdeck.remote.prometheus import PrometheusClient, PrometheusError, parse_base_url
from meshdeck.services.prometheus_history import PrometheusSource

PASSWORD = "s3cr%40t-pw"  # percent-encoded in the URL: the password is "s3cr@t-pw"
SECRET = "s3cr"  # no form of the password may appear in a message


def _power(_path: str, _params: dict[str, list[str]]) -> tuple[int, bytes]:
    return 200, recorded("query_range_power_gpu_a.json")


def _with_credentials(url: str) -> str:
    return url.replace("http://", f"http://alice:{PASSWORD}@")


def test_a_server_that_drips_its_reply_is_cut_off_at_the_requests_deadline():
    """Each byte comes well within the 1 s timeout, so a per-read timeout never fires; the whole reply would
    take ~100 s. The request ends at its deadline, with part of the reply still unsent."""
    with fake_prometheus(_power) as fake:
        fake.drip_s = 0.1
        with pytest.raises(PrometheusError) as raised:
            PrometheusClient(fake.url, timeout_s=1.0).query_range("up", 0, 10, 1)
        whole = len(recorded("query_range_power_gpu_a.json"))
        assert 0 < fake.sent < whole  # it was answering, slowly, when the client gave up
    assert raised.value.reply_field == "deadline" and raised.value.url == fake.url + "/api/v1/query_range"
    assert "no complete reply to query_range 'up' within 1 s" in str(raised.value)


def test_the_urls_userinfo_is_sent_as_basic_auth():
    with fake_prometheus(_power) as fake:
        series = PrometheusClient(_with_credentials(fake.url)).query_range("up", 0, 10, 1)
    assert len(series) == 2
    (headers,) = fake.headers
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"alice:s3cr@t-pw").decode()
    plain = PrometheusClient("http://127.0.0.1:9").server.authorization()
    assert plain is None  # no userinfo, no header


def test_the_password_is_never_shown_in_errors_reprs_or_logs(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG)
    refused = (401, b'{"status":"error","errorType":"unauthorized","error":"bad credentials"}')
    with fake_prometheus(lambda _p, _q: refused) as fake:
        url = _with_credentials(fake.url)
        source = PrometheusSource(url)
        with pytest.raises(PrometheusError) as raised:
            source.client.series(["up"], 0, 10)
    shown = fake.url.replace("http://", "http://alice:***@")
    assert str(raised.value).startswith(f"Prometheus at {shown}/api/v1/series: HTTP 401: unauthorized: bad")
    assert source.url == shown
    with pytest.raises(InputError) as bad_port:
        parse_base_url(f"http://alice:{PASSWORD}@host:99999", field="--prometheus-url")
    with pytest.raises(InputError) as bad_query:
        parse_base_url(f"http://alice:{PASSWORD}@host:9090/?x=1", field="--prometheus-url")
    texts = [str(raised.value), repr(source), repr(source.client), repr(source.client.server)]
    texts += [str(bad_port.value), str(bad_query.value), caplog.text]
    assert all(SECRET not in text for text in texts), texts


def test_the_cli_never_prints_the_password(capsys: pytest.CaptureFixture[str]):
    with fake_prometheus(_power) as fake:
        url = _with_credentials(fake.url)
    # nothing listens there any more: a connection error, naming the URL
    assert cli.main(["history", "hosts", "--source", "prometheus", "--prometheus-url", url]) == 2
    printed = capsys.readouterr()
    assert "alice:***@" in printed.err and SECRET not in printed.err + printed.out


def test_a_redirect_is_refused_and_not_followed_so_credentials_stay_with_the_server_named():
    with fake_prometheus(_power) as elsewhere:
        target = _with_credentials(elsewhere.url) + "/api/v1/query_range"
        redirecting = fake_prometheus(lambda _p, _q: (302, b"", {"Location": target}))
        with redirecting as fake, pytest.raises(PrometheusError) as raised:
            PrometheusClient(_with_credentials(fake.url)).query_range("up", 0, 10, 1)
    assert elsewhere.requests == []
    assert raised.value.reply_field == "HTTP 302"
    assert f"redirected to {elsewhere.url.replace('http://', 'http://alice:***@')}" in str(raised.value)
    assert SECRET not in str(raised.value)


def test_a_reply_announcing_more_than_the_bound_is_refused_before_it_is_read():
    with fake_prometheus(_power) as fake:
        fake.drip_s = 0.01  # the body would take 10 s more: only its announced length is read
        with pytest.raises(PrometheusError, match=r"response: longer than 100 bytes .*for query_range 'up'"):
            PrometheusClient(fake.url, max_response_bytes=100, timeout_s=60).query_range("up", 0, 10, 1)
        assert fake.sent < len(recorded("query_range_power_gpu_a.json"))
