"""`meshdeck history hosts|export --source prometheus`: the options reach the Prometheus source, and what
is missing or wrong is one line naming the option (exit 2)."""

from __future__ import annotations

import csv
import io
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


HOSTILE = "gpu-\x1b[2J\x1b]0;pwned\x07\nforged-line"


def _hostile_agents(_path: str, _params: dict[str, list[str]]) -> tuple[int, bytes]:
    names = [HOSTILE, "v" * 100_000, "gpu-a"]
    return 200, json.dumps({"status": "success", "data": [{"host": name} for name in names]}).encode()


def test_history_hosts_escapes_what_prometheus_names_and_cuts_long_names_short(capsys: pytest.CaptureFixture[str]):
    with fake_prometheus(_hostile_agents) as fake:
        assert cli.main(["history", "hosts", "--source", "prometheus", "--prometheus-url", fake.url]) == 0
        assert cli.main(["history", "hosts", "--source", "prometheus", "--prometheus-url", fake.url, "--json"]) == 0
    printed = capsys.readouterr().out
    plain, listed = printed.split("\n[\n", 1)
    listed = "[\n" + listed
    assert "\x1b" not in printed and "\x07" not in printed
    lines = plain.splitlines()
    assert lines == ["gpu-\\x1b[2J\\x1b]0;pwned\\x07\\nforged-line", "gpu-a", "v" * 200 + "… (100000 characters)"]
    assert [entry["host"] for entry in json.loads(listed)] == sorted([HOSTILE, "v" * 100_000, "gpu-a"])  # JSON: as is


def test_history_export_to_stdout_escapes_a_nic_label_and_no_label_forges_a_row(capsys: pytest.CaptureFixture[str]):
    nic = 'mlx5_0\x1b[1A\r\nforged,row,"x"'
    labels = {"__name__": "meshdeck_nic_rx_bytes_per_s", "host": "gpu-a", "nic": nic}
    listing = json.dumps({"status": "success", "data": [labels]}).encode()
    matrix = {"resultType": "matrix", "result": [{"metric": labels, "values": [[100, "1.5"], [101, "2.5"]]}]}
    reply = json.dumps({"status": "success", "data": matrix}).encode()

    def answer(path: str, _params: dict[str, list[str]]) -> tuple[int, bytes]:
        return 200, listing if path.endswith("/series") else reply

    argv = ["history", "export", "--host", "gpu-a", "--since", "100", "--until", "102"]
    with fake_prometheus(answer) as fake:
        assert cli.main([*argv, "--source", "prometheus", "--prometheus-url", fake.url]) == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "\r" not in printed
    rows = list(csv.reader(io.StringIO(printed)))
    assert len(rows) == 3 and all(len(row) == 7 for row in rows)  # the header and two points: no forged row
    assert {row[3] for row in rows[1:]} == {'nic:mlx5_0\\x1b[1A\\r\\nforged,row,"x"'}
