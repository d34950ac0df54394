"""`meshdeck history hosts|export --source prometheus`: the options reach the Prometheus source, and what
is missing or wrong is one line naming the option (exit 2)."""

from __future__ import annotations

import json

import pytest
from fake_prometheus import fake_prometheus, recorded  # tests/fakes is on sys.path (tests/conftest.py)
from meshdeck import cli


def _agents(_path: str, _params: dict[str, list[str]]) -> tuple[int, bytes]:
    return 200, recorded("series_agent_info.json")


def test_history_hosts_lists_the_hosts_prometheus_scrapes(capsys: pytest.CaptureFixture[str]):
    with fake_prometheus(_agents) as fake:
        assert cli.main(["history", "hosts", "--source", "prometheus", "--prometheus-url", fake.url, "--json"]) == 0
        assert cli.main(["history", "hosts", "--source", "prometheus", "--prometheus-url", fake.url]) == 0
    printed = capsys.readouterr().out
    listed, plain = printed[: printed.rindex("]") + 1], printed[printed.rindex("]") + 1 :]
    assert json.loads(listed) == [{"host": "gpu-a"}, {"host": "gpu-b"}]
    assert plain.split() == ["gpu-a", "gpu-b"]
    ((path, params),) = fake.requests[:1]
    assert path == "/api/v1/series" and params["match[]"] == ["meshdeck_agent_info"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["history", "hosts", "--source", "prometheus"], "--prometheus-url: required with --source prometheus"),
        (["history", "export", "--host", "a", "--source", "prometheus", "--prometheus-url", "x"], "--prometheus-url: "),
        (
            [
                "history",
                "hosts",
                "--source",
                "prometheus",
                "--prometheus-url",
                "http://h",
                "--prometheus-host-label",
                "a b",
            ],
            "--prometheus-host-label: 'a b' is not a Prometheus label name",
        ),
        (
            ["history", "hosts", "--source", "prometheus", "--prometheus-url", "http://h", "--prometheus-timeout", "0"],
            "--prometheus-timeout: 0.0 must be between 0 and 600 seconds",
        ),
    ],
)
def test_a_missing_or_bad_prometheus_option_is_one_line_naming_it(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
):
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.startswith(f"meshdeck: error: {message}")


def test_an_unreachable_prometheus_is_one_line_naming_its_url(capsys: pytest.CaptureFixture[str]):
    with fake_prometheus(_agents) as fake:
        url = fake.url
    assert cli.main(["history", "hosts", "--source", "prometheus", "--prometheus-url", url]) == 2
    assert capsys.readouterr().err.startswith(f"meshdeck: error: Prometheus at {url}/api/v1/series: connection: ")
