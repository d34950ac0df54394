"""History: a range query from the store drawn with the dashboard's charts, and CSV export.
Profiles: list, validate while editing, versions, import / export YAML, duplicate, delete, save from the planner."""

from __future__ import annotations

import csv
import sqlite3
import time

import numpy as np
import pytest
from gui_helpers import connect_hosts
from meshdeck.core.samples import Device
from meshdeck.services import profiles as profile_service
from meshdeck.store.database import open_database
from meshdeck.store.writer import SampleWriter
from meshdeck.ui.views.history.view import HistoryView
from meshdeck.ui.views.planner.save import ProfileAnswer, ProfileSaver
from meshdeck.ui.views.planner.view import PlannerView
from meshdeck.ui.views.profiles import ProfilesView
from wire_samples import GIB, wire_batch

GPU0 = Device.gpu(0)
GPU1 = Device.gpu(1)

PROFILE = """\
name: ds32-h200
model: deepseek-ai/DeepSeek-V3.2
engine: vllm
hosts: [demo-a]
gpus_per_node: 8
layout: {tensor_parallel: 8, pipeline_parallel: 1, data_parallel: 1, expert_parallel: false}
vllm: {max_model_len: 32768, gpu_memory_utilization: 0.9}
"""


@pytest.fixture
def db_context(console_context, tmp_path):
    console_context.db = open_database(tmp_path / "console.sqlite")
    console_context.on_shutdown.append(console_context.db.close)
    return console_context


def _store_samples(db, host: str, count: int, start: float) -> None:
    writer = SampleWriter(db).start()
    try:
        writer.submit_samples(host, wire_batch(count, start, gpus=2, memory_used_bytes=90 * GIB))
        assert writer.flush(60)
    finally:
        writer.stop()


def test_history_range_query_draws_stored_samples_with_the_same_charts(qtbot, db_context, tmp_path) -> None:
    start = time.time() - 1200
    _store_samples(db_context.db, "demo-a", 600, start)
    view = HistoryView(db_context)
    qtbot.addWidget(view)
    view.show()
    qtbot.waitUntil(lambda: view.host.count() == 1, timeout=30000)
    assert view.host.currentText() == "demo-a"
    view.range.setCurrentIndex(view.range.findText("last hour"))
    with qtbot.waitSignal(view.loaded, timeout=30000) as loaded:
        view.query_button.click()
    frame = loaded.args[0]
    assert (GPU1, "memory_used_bytes") in frame.series
    specs = view.charts["vram"].curve_specs
    assert [s.key for s in specs] == [("demo-a", GPU0, "memory_used_bytes"), ("demo-a", GPU1, "memory_used_bytes")]
    x, y = view.charts["vram"].curve_data(specs[0].key)
    assert x.min() >= start - 60 and x.max() <= start + 660
    assert float(max(y[y == y])) == pytest.approx(90, rel=0.01)  # GiB, through the rollup tier or raw
    assert frame.tier in view.status.text()

    target = tmp_path / "export.csv"
    since, until = view.time_range()
    view.export_to(str(target), "demo-a", since, until, "raw")
    qtbot.waitUntil(lambda: view.status.text().startswith("exported"), timeout=30000)
    with target.open() as stream:
        rows = list(csv.DictReader(stream))
    assert rows and set(rows[0]) == {"time", "ts", "host", "device", "metric", "unit", "value"}
    assert {r["unit"] for r in rows if r["metric"] == "memory_used_bytes"} == {"bytes"}
    assert {r["device"] for r in rows} >= {"gpu0", "gpu1"}
    assert sum(1 for r in rows if r["device"] == "gpu0" and r["metric"] == "memory_used_bytes") == 600


def test_history_with_a_far_future_row_still_lists_queries_exports_and_reads_out(qtbot, db_context, tmp_path) -> None:
    """A stored time no calendar can show (ts = 1e12, stored before the store refused it) never breaks the view."""
    start = time.time() - 1200
    _store_samples(db_context.db, "demo-a", 60, start)
    connection = sqlite3.connect(db_context.db.path)
    with connection:
        connection.execute("INSERT INTO samples (series_id, ts, value) SELECT id, ?, 1.0 FROM series", (10**15,))
        connection.execute("UPDATE ingest_state SET last_ts = ?", (10**15,))
    connection.close()
    view = HistoryView(db_context)
    qtbot.addWidget(view)
    view.show()
    qtbot.waitUntil(lambda: view.host.count() == 1, timeout=30000)
    view.range.setCurrentIndex(view.range.findText("last hour"))
    with qtbot.waitSignal(view.loaded, timeout=30000) as loaded:
        view.query_button.click()
    assert (GPU0, "memory_used_bytes") in loaded.args[0].series
    target = tmp_path / "everything.csv"
    view.export_to(str(target), "demo-a", 0.0, 1e13, "raw")
    qtbot.waitUntil(lambda: view.status.text().startswith(("exported", "export failed")), timeout=30000)
    assert view.status.text().startswith("exported"), view.status.text()
    with target.open() as stream:
        far = [row for row in csv.DictReader(stream) if row["ts"] == "1000000000000.0"]
    assert far and {row["time"] for row in far} == {"out of range (ts 1e+12)"}
    chart = view.charts["vram"]  # its cursor readout at a point of that row
    chart.update_data(lambda _host, ids: (np.array([start, 1e12]), np.full((len(ids), 2), GIB)), start, start + 3600)
    assert chart.readout_at(1e12, 1.0).startswith("out of range (ts 1e+12)")


def test_a_damaged_database_page_is_one_line_in_the_history_view(qtbot, db_context) -> None:
    start = time.time() - 1200
    _store_samples(db_context.db, "demo-a", 600, start)
    path = db_context.db.path
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every sample in the main file
    size = connection.execute("PRAGMA page_size").fetchone()[0]
    try:
        leaves = [row[0] for row in connection.execute("SELECT pageno FROM dbstat WHERE name = 'samples' ORDER BY 1")]
    except sqlite3.OperationalError:  # SQLite without the dbstat table: the file is mostly samples
        leaves = [connection.execute("PRAGMA page_count").fetchone()[0] // 2]
    connection.close()
    with path.open("r+b") as out:  # a page in every tenth of the table: whatever the query reads, it meets one
        for page in leaves[len(leaves) // 20 :: max(1, len(leaves) // 10)]:
            out.seek((page - 1) * size)
            out.write(b"\xa5" * size)
    view = HistoryView(db_context)
    qtbot.addWidget(view)
    qtbot.waitUntil(lambda: view.host.count() == 1, timeout=30000)
    view.range.setCurrentIndex(view.range.findText("last hour"))
    view.query_button.click()
    qtbot.waitUntil(lambda: view.status.text().startswith("query failed"), timeout=30000)
    text = view.status.text()
    assert text.startswith(f"query failed: database {path}: is damaged (database disk image is malformed)"), text
    assert "\n" not in text and "untouched" in text


def test_history_without_a_host_says_what_to_do(qtbot, db_context) -> None:
    view = HistoryView(db_context)
    qtbot.addWidget(view)
    qtbot.waitUntil(lambda: "No history yet" in view.status.text(), timeout=30000)
    view.query()
    assert "Choose a host" in view.status.text()


def _history(qtbot, db_context) -> HistoryView:
    view = HistoryView(db_context)
    qtbot.addWidget(view)
    view.resize(1400, 900)
    view.show()
    qtbot.waitUntil(lambda: view.host.count() == 1, timeout=30000)
    return view


def test_show_writes_the_range_it_read_in_the_from_and_to_fields(qtbot, db_context, monkeypatch) -> None:
    """A preset read later than it was chosen: the fields say the times read, not those of the choice."""
    from types import SimpleNamespace

    import meshdeck.ui.views.history.view as history_view

    _store_samples(db_context.db, "demo-a", 60, time.time() - 600)
    view = _history(qtbot, db_context)
    view.range.setCurrentIndex(view.range.findText("last hour"))
    later = time.time() + 7200.0  # Show pressed two hours after the range was chosen
    monkeypatch.setattr(history_view, "time", SimpleNamespace(time=lambda: later, strftime=time.strftime))
    with qtbot.waitSignal(view.loaded, timeout=30000):
        view.query_button.click()
    assert view.until.dateTime().toSecsSinceEpoch() == int(later)
    assert view.since.dateTime().toSecsSinceEpoch() == int(later - 3600)
    assert view.shown == (later - 3600, later)
    chart = view.charts["vram"]
    assert chart.plot_item.getViewBox().viewRange()[0] == pytest.approx([later - 3600, later])


def test_time_keys_zoom_and_shift_the_history_and_home_goes_back_to_the_range_asked_for(qtbot, db_context) -> None:
    from gui_helpers import press
    from PySide6.QtCore import Qt

    _store_samples(db_context.db, "demo-a", 600, time.time() - 1200)
    view = _history(qtbot, db_context)
    view.range.setCurrentIndex(view.range.findText("last hour"))
    with qtbot.waitSignal(view.loaded, timeout=30000):
        view.query_button.click()
    since, until = view.shown
    view.setFocus()
    with qtbot.waitSignal(view.loaded, timeout=30000):
        press(view, Qt.Key.Key_Plus)
    assert view.shown == pytest.approx((since + 900, until - 900))
    assert view.range.currentText() == "custom" and view.since.isEnabled()
    assert view.since.dateTime().toSecsSinceEpoch() == int(since + 900)
    with qtbot.waitSignal(view.loaded, timeout=30000):
        press(view, Qt.Key.Key_Left)
    assert view.shown == pytest.approx((since, until - 1800))
    with qtbot.waitSignal(view.loaded, timeout=30000):
        press(view, Qt.Key.Key_Home)
    assert view.range.currentText() == "last hour" and view.shown[1] - view.shown[0] == pytest.approx(3600)


def test_history_charts_mark_the_deployments_that_started_and_ended_on_the_host(qtbot, db_context) -> None:
    from meshdeck.store.deployments import DeploymentNode, record_deployment_finished, record_deployment_started

    now = time.time()
    _store_samples(db_context.db, "demo-a", 600, now - 1200)
    node = DeploymentNode("demo-a", "vllm-node0", "vllm", 0, ("vllm", "serve"), ())
    elsewhere = DeploymentNode("demo-b", "vllm-node0", "vllm", 0, ("vllm", "serve"), ())
    record_deployment_started(db_context.db, key="d-1", name="ds32", engine="vllm", nodes=[node], started_at=now - 900)
    record_deployment_finished(db_context.db, "d-1", state="stopped", finished_at=now - 300)
    record_deployment_started(
        db_context.db, key="d-2", name="other", engine="vllm", nodes=[elsewhere], started_at=now - 600
    )
    record_deployment_started(db_context.db, key="d-3", name="old", engine="vllm", nodes=[node], started_at=now - 7200)
    view = _history(qtbot, db_context)
    view.range.setCurrentIndex(view.range.findText("last hour"))
    with qtbot.waitSignal(view.loaded, timeout=30000):
        view.query_button.click()
    for chart in view.charts.values():
        assert [(m.label, m.ts) for m in chart.markers] == [("▶ ds32", now - 900), ("■ ds32 stopped", now - 300)]


@pytest.fixture
def profiles_view(qtbot, db_context):
    view = ProfilesView(db_context)
    qtbot.addWidget(view)
    view.show()
    return view


def _wait_listed(qtbot, view: ProfilesView, name: str) -> None:
    qtbot.waitUntil(lambda: name in [s.name for s in view.summaries], timeout=30000)


def test_import_edit_with_validation_and_versions(qtbot, profiles_view, tmp_path) -> None:
    source = tmp_path / "ds32.yaml"
    source.write_text(PROFILE)
    profiles_view.import_file(source)
    _wait_listed(qtbot, profiles_view, "ds32-h200")
    qtbot.waitUntil(lambda: profiles_view.editor.toPlainText() == PROFILE, timeout=30000)
    assert profiles_view.table.item(0, 4).text() == "TP8"  # as the planner writes it (degrees above one, TP always)

    profiles_view.editor.setPlainText(PROFILE.replace("engine: vllm", "engine: vllm\nreplicas: 2"))
    profiles_view.validate()
    assert profiles_view.problem.text().startswith("profile: replicas: unknown key")
    assert not profiles_view.save_button.isEnabled()
    profiles_view.editor.setPlainText(PROFILE.replace("tensor_parallel: 8", "tensor_parallel: 4"))
    profiles_view.validate()
    assert "layout" in profiles_view.problem.text()  # TP4 x PP1 x DP1 does not match 1 host x 8 GPUs

    profiles_view.editor.setPlainText(PROFILE.replace("max_model_len: 32768", "max_model_len: 65536"))
    assert profiles_view.validate() is not None and profiles_view.save_button.isEnabled()
    profiles_view.save_button.click()
    qtbot.waitUntil(lambda: profiles_view.versions.count() == 2, timeout=30000)
    assert profiles_view.versions.item(0).text().startswith("v2")
    profiles_view.versions.setCurrentRow(1)
    assert "max_model_len: 32768" in profiles_view.editor.toPlainText()  # the old version is still there


def test_export_duplicate_and_delete(qtbot, profiles_view, db_context, tmp_path) -> None:
    source = tmp_path / "ds32.yaml"
    source.write_text(PROFILE)
    profiles_view.import_file(source)
    _wait_listed(qtbot, profiles_view, "ds32-h200")
    target = tmp_path / "out.yaml"
    profiles_view.export_file("ds32-h200", target)
    qtbot.waitUntil(lambda: profiles_view.message.text().startswith("exported"), timeout=30000)
    assert target.read_text() == PROFILE  # byte for byte what was imported
    profiles_view.duplicate_as("ds32-h200", "ds32-copy")
    _wait_listed(qtbot, profiles_view, "ds32-copy")
    profiles_view.delete_named("ds32-h200")
    qtbot.waitUntil(lambda: [s.name for s in profiles_view.summaries] == ["ds32-copy"], timeout=30000)


def test_a_bad_import_names_the_field_and_stores_nothing(
    qtbot, profiles_view, db_context, tmp_path, monkeypatch
) -> None:
    told = []
    monkeypatch.setattr(ProfilesView, "_tell", lambda self, text, error=False: told.append(text))
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a: &a [x, x]\nb: &b [*a, *a]\n")
    profiles_view.import_file(bomb)
    qtbot.waitUntil(lambda: bool(told), timeout=30000)
    assert "anchors" in told[0] or "aliases" in told[0]
    assert profile_service.list_profiles(db_context.db) == []


def test_save_as_profile_from_the_planner_stores_it(qtbot, db_context, simulated_inventory, monkeypatch) -> None:
    connect_hosts(qtbot, db_context, {"demo-a": simulated_inventory, "demo-b": simulated_inventory})
    planner = PlannerView(db_context)
    qtbot.addWidget(planner)
    qtbot.waitUntil(lambda: planner.form.gpu.count() > 0, timeout=30000)
    with qtbot.waitSignal(planner.planned, timeout=30000):
        planner.plan()
    row = next(i for i, lp in enumerate(planner.result.layouts) if lp.instances == 1 and lp.fits and lp.nodes == 2)
    planner.table.selectRow(row)
    assert planner.save_button.isVisibleTo(planner) and planner.save_button.isEnabled()
    monkeypatch.setattr(ProfileSaver, "ask", lambda self, *a: ProfileAnswer("demo-plan", "deepseek-ai/DeepSeek-V3.2"))
    with qtbot.waitSignal(planner.profiles_saved, timeout=30000) as saved:
        planner.save_button.click()
    assert saved.args == [["demo-plan"]]
    stored = profile_service.get_profile(db_context.db, "demo-plan")
    assert stored.profile.hosts == ["demo-a", "demo-b"]
    layout = planner.result.layouts[row]
    assert stored.version.note.startswith(f"saved from the console's planner: rank {row + 1}, {layout.label()} on ")


def test_a_secret_stays_out_of_the_editor_and_the_database_and_export_writes_it(
    qtbot, profiles_view, db_context, tmp_path, memory_keyring
) -> None:
    secret = "hf_Zq8ExampleSecretValue0123"
    source = tmp_path / "ds32.yaml"
    source.write_text(PROFILE + f"env: {{HF_TOKEN: {secret}}}\n")
    profiles_view.import_file(source)
    _wait_listed(qtbot, profiles_view, "ds32-h200")
    qtbot.waitUntil(lambda: "HF_TOKEN: keyring:" in profiles_view.editor.toPlainText(), timeout=30000)
    assert secret not in profiles_view.editor.toPlainText()
    valid = profiles_view.validate()  # the reference is a valid profile: editing and saving keep it
    assert valid is not None and (valid.name, valid.hosts) == ("ds32-h200", ["demo-a"])
    assert valid.env["HF_TOKEN"].startswith("keyring:") and secret not in valid.env["HF_TOKEN"]
    target = tmp_path / "out.yaml"
    profiles_view.export_file("ds32-h200", target)
    qtbot.waitUntil(lambda: profiles_view.message.text().startswith("exported"), timeout=30000)
    assert target.read_text() == source.read_text() and "OS keyring" in profiles_view.message.text()
