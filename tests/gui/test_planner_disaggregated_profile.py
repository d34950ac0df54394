"""The planner's prefill/decode pools tab saves the chosen plan as one profile with both pools."""

from __future__ import annotations

from dataclasses import replace

import pytest
from gui_helpers import connect_hosts
from meshdeck.launch.profile import load_profile
from meshdeck.ui.views.planner.save import ProfileDialog
from meshdeck.ui.views.planner.view import PlannerView
from PySide6.QtWidgets import QDialog, QLabel


@pytest.fixture(autouse=True)
def warnings_shown(monkeypatch) -> list[str]:
    """The saver's "Profile not saved" messages, recorded instead of shown (a modal box would block the test)."""
    shown: list[str] = []
    monkeypatch.setattr("meshdeck.ui.views.planner.save.QMessageBox.warning", lambda _p, _t, text: shown.append(text))
    return shown


def _planner(qtbot, context, inventory) -> PlannerView:
    connect_hosts(qtbot, context, {"demo-a": inventory, "demo-b": inventory})
    view = PlannerView(context)
    qtbot.addWidget(view)
    view.resize(1400, 900)
    view.show()
    qtbot.waitUntil(lambda: view.form.gpu.count() > 0, timeout=30000)  # catalog loaded by a job
    # the kernel tables' warm-up (pandas' import) outlives a roofline plan: let it end inside the test
    qtbot.waitUntil(lambda: context.jobs.running("load kernel tables") is None, timeout=60000)
    view.form.disaggregated.setChecked(True)
    view.form.speed.setCurrentIndex(view.form.speed.findData("roofline"))
    with qtbot.waitSignal(view.planned, timeout=30000):
        view.form.plan_button.click()
    assert view.result is not None and view.result.disaggregated
    return view


@pytest.fixture
def planner(qtbot, console_context, simulated_inventory) -> PlannerView:
    return _planner(qtbot, console_context, simulated_inventory)


@pytest.fixture
def saving_planner(qtbot, console_context, simulated_inventory, tmp_path):
    """The planner with a database, so "Save as profile…" stores profiles."""
    from meshdeck.store.database import open_database

    console_context.db = open_database(tmp_path / "profiles.db")
    yield _planner(qtbot, console_context, simulated_inventory)
    console_context.db.close()


def _whole_node_plan(view: PlannerView) -> int:
    assert view.result is not None
    return next(i for i, option in enumerate(view.result.disaggregated) if option.prefill.gpus % 8 == 0)


def _accept(monkeypatch, seen: list[ProfileDialog], name: str = "") -> None:
    def exec_(dialog: ProfileDialog) -> int:
        seen.append(dialog)
        if name:
            dialog.name.setText(name)
        return QDialog.DialogCode.Accepted

    monkeypatch.setattr(ProfileDialog, "exec", exec_)


def test_export_writes_the_chosen_plan_as_one_profile_of_both_pools_on_the_detected_hosts(
    qtbot, planner, tmp_path, monkeypatch
) -> None:
    row = _whole_node_plan(planner)
    planner.details.setCurrentWidget(planner.disaggregated)
    planner.disaggregated.select(row)
    option = planner.result.disaggregated[row]
    tab = planner.disaggregated
    assert tab.export_button.isEnabled() and not tab.save_button.isVisible()  # no database: export only
    target = tmp_path / "pd.yaml"
    seen: list[ProfileDialog] = []
    _accept(monkeypatch, seen)
    monkeypatch.setattr("meshdeck.ui.views.planner.save.QFileDialog.getSaveFileName", lambda *a, **k: (str(target), ""))
    with qtbot.waitSignal(planner.saver.saved, timeout=30000) as saved:
        tab.export_button.click()
    (dialog,) = seen
    assert dialog.windowTitle() == "Save prefill/decode plan as profile"
    assert dialog.name.text().startswith("deepseek-v3.2-pd-") and dialog.model.text() == "deepseek-ai/DeepSeek-V3.2"
    notice = dialog.findChild(QLabel, "saveNotice").text()
    assert notice.startswith("One profile, one deployment: prefill pool: ") and "on demo-a" in notice
    assert notice.endswith("vllm-router serves it at demo-a port 8000.")
    text = target.read_text(encoding="utf-8")
    profile = load_profile(text, source=str(target))
    assert saved.args == [[profile.name]] and profile.name == dialog.name.text()
    pools = profile.disaggregated
    assert pools is not None and profile.hosts == ["demo-a", "demo-b"]
    assert (pools.prefill.hosts, pools.decode.hosts) == (["demo-a"], ["demo-b"])
    assert (pools.prefill.workers, pools.decode.workers) == (option.prefill.workers, option.decode.workers)
    assert pools.decode.layout.data_parallel == option.decode.shape.data_parallel
    assert text.startswith(f"# saved from the console's planner: prefill/decode plan {row + 1}, {option.label()}")
    assert planner.save_status.text().startswith(f"Exported: {profile.name} → {target}")


def test_save_stores_the_plan_as_a_profile_in_the_database(qtbot, saving_planner, monkeypatch) -> None:
    from meshdeck.services import profiles as profile_service

    planner = saving_planner
    row = _whole_node_plan(planner)
    planner.details.setCurrentWidget(planner.disaggregated)
    planner.disaggregated.select(row)
    _accept(monkeypatch, [], name="ds32-pd")
    assert planner.disaggregated.save_button.isVisible()
    with qtbot.waitSignal(planner.saver.saved, timeout=30000) as saved:
        planner.disaggregated.save_button.click()
    assert saved.args == [["ds32-pd"]]
    stored = profile_service.get_profile(planner.context.db, "ds32-pd")
    assert stored.profile.disaggregated is not None and stored.profile.hosts == ["demo-a", "demo-b"]
    assert "prefill/decode plan" in stored.version.note
    assert planner.save_status.text().startswith("Saved profile ds32-pd (demo-a port 8000)")


def test_a_plan_whose_pools_share_a_node_is_refused_before_the_dialog_saying_why(
    qtbot, planner, monkeypatch, warnings_shown
) -> None:
    from meshdeck.core.gpu_spec import resolve_gpu
    from meshdeck.core.planner import PlanRequest, plan
    from meshdeck.services.catalog import load_gpu_catalog, load_model
    from unit.core.core_planner_inputs import make_cluster  # tests/ is on sys.path (tests/conftest.py)

    cluster = make_cluster(resolve_gpu("H200-SXM-141GB", load_gpu_catalog()), 1, 8)
    request = PlanRequest(load_model("deepseek-v3.2"), cluster, weights_dtype="int4", max_model_len=8192)
    result = plan(replace(request, disaggregated=True))  # one node: the pools' workers share it
    shared = next(option for option in result.disaggregated if option.prefill.gpus % 8)
    seen: list[ProfileDialog] = []
    _accept(monkeypatch, seen)
    with qtbot.waitSignal(planner.saver.failed, timeout=30000) as failed:
        planner.saver.save_disaggregated(shared, result, ["demo-a"], "deepseek-v3.2", to_file=True)
    assert seen == [] and failed.args[0].startswith("disaggregated.prefill: ")
    assert "a profile gives each pool whole hosts of its own" in failed.args[0]
    assert warnings_shown == [failed.args[0]]
