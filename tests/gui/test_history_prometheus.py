"""The history view reading from a Prometheus server: the source is chosen in the view and kept in QSettings,
hosts come from the server's scrape labels, charts and the CSV export from its query_range replies
(recorded from Prometheus 2.42, served by tests/fakes/fake_prometheus.py)."""

from __future__ import annotations

import csv
import json

from fake_prometheus import fake_prometheus, recorded
from meshdeck.core.samples import Device
from meshdeck.ui.views.history.view import HistoryView

POWER = json.loads(recorded("query_range_power_gpu_a.json"))
LISTING = json.dumps({"status": "success", "data": [s["metric"] for s in POWER["data"]["result"]]}).encode()
EMPTY = b'{"status":"success","data":{"resultType":"matrix","result":[]}}'


def _answer(path: str, params: dict[str, list[str]]) -> tuple[int, bytes]:
    asked = params.get("query", params.get("match[]", [""]))[0]
    wanted = "meshdeck_gpu_power_w" in asked or "meshdeck_(gpu|host|nic|worker)_.+" in asked  # power, or all
    if path.endswith("/series"):
        if asked == "meshdeck_agent_info":
            return 200, recorded("series_agent_info.json")
        return 200, LISTING if wanted else b'{"status":"success","data":[]}'
    return 200, recorded("query_range_power_gpu_a.json") if wanted else EMPTY  # a raw export asks for all at once


def _choose_prometheus(view: HistoryView, url: str) -> None:
    view.prometheus_url.setText(url)
    view.source.setCurrentIndex(view.source.findData("prometheus"))


def test_the_history_view_charts_and_exports_what_prometheus_holds(qtbot, console_context, tmp_path) -> None:
    with fake_prometheus(_answer) as fake:
        view = HistoryView(console_context)
        qtbot.addWidget(view)
        view.show()
        _choose_prometheus(view, fake.url)
        qtbot.waitUntil(lambda: view.host.count() == 2, timeout=30000)
        assert [view.host.itemText(i) for i in range(2)] == ["gpu-a", "gpu-b"]
        view.host.setCurrentText("gpu-a")
        view.range.setCurrentIndex(view.range.findText("last hour"))
        with qtbot.waitSignal(view.loaded, timeout=30000) as loaded:
            view.query_button.click()
        frame = loaded.args[0]
        assert set(frame.series) == {(Device.gpu(0), "power_w"), (Device.gpu(1), "power_w")}
        specs = view.charts["power"].curve_specs
        assert [s.key for s in specs] == [("gpu-a", Device.gpu(0), "power_w"), ("gpu-a", Device.gpu(1), "power_w")]
        x, y = view.charts["power"].curve_data(specs[0].key)
        assert list(y[y == y]) == [75.66, 76.06, 76.28, 75.44, 76.64, 76.17]
        assert list(x[y == y]) == [1796156288.0 + i for i in range(6)]  # the recorded steps, one per second
        queries = [params["query"][0] for path, params in fake.requests if path.endswith("/query_range")]
        assert all('host="gpu-a"' in query for query in queries)

        target = tmp_path / "prometheus.csv"
        view.export_to(str(target), "gpu-a", 1796156288.0, 1796156294.0, "raw")
        qtbot.waitUntil(lambda: view.status.text().startswith("exported"), timeout=30000)
    with target.open() as stream:
        rows = list(csv.DictReader(stream))
    assert len(rows) == 12 and {(r["host"], r["metric"], r["unit"]) for r in rows} == {("gpu-a", "power_w", "W")}


def test_the_chosen_source_is_kept_in_the_settings(qtbot, console_context) -> None:
    view = HistoryView(console_context)
    qtbot.addWidget(view)
    view.prometheus_host_label.setText("instance")
    _choose_prometheus(view, "http://127.0.0.1:1")  # nothing there: listing hosts fails, one line
    qtbot.waitUntil(lambda: view.status.text().startswith("listing hosts failed: "), timeout=30000)
    assert "http://127.0.0.1:1/api/v1/series: connection" in view.status.text()
    view.save_settings(console_context.settings)

    again = HistoryView(console_context)
    qtbot.addWidget(again)
    assert again.source.currentData() == "sqlite"
    again.restore_settings(console_context.settings)
    assert again.source.currentData() == "prometheus"
    assert again.prometheus_url.text() == "http://127.0.0.1:1" and again.prometheus_host_label.text() == "instance"


def test_a_url_that_is_no_prometheus_url_is_said_in_the_status(qtbot, console_context) -> None:
    view = HistoryView(console_context)
    qtbot.addWidget(view)
    _choose_prometheus(view, "localhost:9090")
    assert view.status.text().startswith("--prometheus-url: 'localhost:9090' is not an http(s) URL")


def test_a_basic_auth_password_never_reaches_the_settings_file_and_hosts_show_escaped(
    qtbot, console_context, tmp_path
) -> None:
    from meshdeck.services.prometheus_history import url_without_password
    from PySide6.QtCore import QSettings

    assert url_without_password("http://ops:s3cret@prom:9090/p") == "http://ops@prom:9090/p"
    assert url_without_password("http://prom:9090") == "http://prom:9090"
    view = HistoryView(console_context)
    qtbot.addWidget(view)
    view.prometheus_url.setText("http://ops:s3cret@prom:9090")
    settings = QSettings(str(tmp_path / "console.ini"), QSettings.Format.IniFormat)
    view.save_settings(settings)
    settings.sync()
    assert "s3cret" not in (tmp_path / "console.ini").read_text()
    hostile = "gpu\x1b[2J\x1b]0;owned\x07" + "x" * 5000  # a label value a server sent
    view._hosts_loaded([hostile, "gpu-a"])
    assert "\x1b" not in view.host.itemText(0) and len(view.host.itemText(0)) <= 200
    view.host.setCurrentIndex(0)
    assert view.selected_host() == hostile  # queried as the server spells it
