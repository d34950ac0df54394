"""The planner view plans from the detected hosts, ranks layouts, draws memory and ranks, exports profiles."""

from __future__ import annotations

import threading

import pytest
import yaml
from gui_helpers import connect_hosts
from meshdeck.core.errors import InputError
from meshdeck.launch.profile import load_profile, profile_from_mapping
from meshdeck.services.catalog import detected_gpu, load_gpu_catalog
from meshdeck.services.cluster import cluster_from_inventories
from meshdeck.services.deployments import targets as deploy_targets
from meshdeck.services.plan_profiles import model_id_for, profile_mappings
from meshdeck.ui.views.planner.form import NEWEST, RELEASE_PICKER
from meshdeck.ui.views.planner.save import ProfileAnswer, ProfileDialog, ProfileSaver
from meshdeck.ui.views.planner.view import PlannerView
from meshdeck.ui.widgets.memory_bar import KV_PARTS, kv_part_label, legend_names
from meshdeck.ui.widgets.rank_map import rank_labels
from meshdeck_agent.wire_inventory import Inventory
from PySide6.QtCore import QPointF
from PySide6.QtWidgets import QDialog, QLineEdit


@pytest.fixture
def planner(qtbot, console_context, simulated_inventory):
    connect_hosts(qtbot, console_context, {"demo-a": simulated_inventory, "demo-b": simulated_inventory})
    view = PlannerView(console_context)
    qtbot.addWidget(view)
    view.resize(1400, 900)
    view.show()
    qtbot.waitUntil(lambda: view.form.gpu.count() > 0, timeout=30000)  # catalog loaded by a job
    return view


@pytest.fixture(autouse=True)
def warnings_shown(monkeypatch) -> list[str]:
    """The saver's "Profile not saved" messages, recorded instead of shown: a real modal box would block the
    test forever when saving fails unexpectedly (the test then fails waiting for its signal instead)."""
    shown: list[str] = []
    monkeypatch.setattr("meshdeck.ui.views.planner.save.QMessageBox.warning", lambda _p, _t, text: shown.append(text))
    return shown


def _plan(qtbot, view: PlannerView) -> None:
    with qtbot.waitSignal(view.planned, timeout=30000):
        view.form.plan_button.click()


def test_plans_from_the_detected_hosts_and_shows_the_top_layout(qtbot, planner) -> None:
    assert planner.form.detected.isChecked()  # pre-filled from the connected hosts
    assert planner.form.ticked_hosts() == ["demo-a", "demo-b"]
    _plan(qtbot, planner)
    result = planner.result
    assert result is not None
    cluster = result.request.cluster
    assert (cluster.nodes, cluster.gpus_per_node, cluster.gpu.name) == (2, 8, "H200-SXM-141GB")
    assert cluster.topology is not None  # the agent's GPU x GPU matrix, not a guess
    assert planner.table.rowCount() == len(result.layouts)
    assert planner.table.item(0, 1).text() == result.layouts[0].label()
    assert "demo-a, demo-b (detected)" in planner.summary.text()
    layout = planner.selected_layout()
    assert layout is result.layouts[0]
    bars = planner.memory.bars
    assert len(bars) == layout.pipeline_parallel
    segments = dict(bars[0].segments)
    assert segments["weights"] == layout.stages[0].weights_bytes
    assert sum(segments.values()) == pytest.approx(cluster.gpu.memory_bytes, rel=1e-9)
    placed = planner.rank_map.placements()
    assert len(placed) == layout.gpus
    assert planner.rank_map.node_names == ["demo-a", "demo-b"]


@pytest.mark.parametrize("model", ["deepseek-v4-pro", "deepseek-v4-flash"])
def test_deepseek_v4_plans_on_the_two_h200_hosts_and_draws_its_kv_parts(qtbot, planner, model) -> None:
    planner.form.model.setCurrentText(model)
    planner.form.vllm_release.setCurrentIndex(planner.form.vllm_release.findData(NEWEST))  # the hosts model 0.11
    with qtbot.waitSignal(planner.planned, timeout=60000):
        planner.form.plan_button.click()
        assert planner.context.jobs.running("plan") is not None  # in its worker thread, as for V3
    result = planner.result
    assert result is not None and result.request.model.is_v4
    assert not planner.form.error.isVisible()
    cluster = result.request.cluster
    assert (cluster.nodes, cluster.gpus_per_node, cluster.gpu.name) == (2, 8, "H200-SXM-141GB")
    assert result.fitting and planner.table.rowCount() == len(result.layouts)
    assert planner.table.item(0, 1).text() == result.layouts[0].label()
    assert f"<b>{result.request.model.name}</b>" in planner.summary.text()
    layout = planner.selected_layout()
    assert layout is result.layouts[0] and layout.kv_bytes_per_token_by_part
    bars = planner.memory.bars
    assert len(bars) == layout.pipeline_parallel
    parts = [label for label, _color in KV_PARTS.values()]
    for bar, stage in zip(bars, layout.stages, strict=True):
        kv = {name: size for name, size in bar.segments if name.startswith("KV: ")}
        assert set(kv) == {kv_part_label(part) for part, value in layout.kv_bytes_per_token_by_part if value > 0}
        assert sum(kv.values()) == stage.kv_cache_bytes
        assert sum(size for _name, size in bar.segments) == pytest.approx(cluster.gpu.memory_bytes, rel=1e-9)
    legend = legend_names(bars)
    assert "kv cache" not in legend and set(parts) & set(legend) == set(kv)
    memory = planner.memory  # laid out as tall as its legend needs: nothing cut
    qtbot.waitUntil(lambda: memory.height() >= memory.heightForWidth(memory.width()) > 3 * memory.LEGEND_LINE)
    assert "vllm serve <model>" in planner.flags.toPlainText()


def test_v4_on_hosts_whose_vllm_cannot_serve_it_is_refused_naming_the_forms_release_choice(qtbot, planner) -> None:
    planner.form.model.setCurrentText("deepseek-v4-pro")  # the simulated hosts model vLLM 0.11
    with qtbot.waitSignal(planner.context.jobs.job_ended, timeout=60000):
        planner.form.plan_button.click()
    qtbot.waitUntil(lambda: planner.form.error.isVisible(), timeout=30000)
    assert planner.form.error.text().startswith(f"{RELEASE_PICKER}: 0.11 cannot serve deepseek-v4-pro")
    assert f"pick {RELEASE_PICKER} from the modelled ranges 0.23–0.25" in planner.form.error.text()


def test_v4s_kv_cache_dtypes_read_right_and_bfloat16_is_refused_in_the_planners_words(qtbot, planner) -> None:
    planner.form.vllm_release.setCurrentIndex(planner.form.vllm_release.findData(NEWEST))
    qtbot.waitUntil(lambda: bool(planner.form._v4_models), timeout=30000)  # the model cards are read by a job
    items = planner.form.kv_dtype.model()
    enabled = lambda: {items.item(i).text(): items.item(i).isEnabled() for i in range(items.rowCount())}  # noqa: E731
    assert all(enabled().values())  # V3.2: the planner says what its backend refuses
    planner.form.model.setCurrentText("deepseek-v4-pro")
    assert enabled() == {
        "auto": True,
        "bfloat16": False,
        "fp8": True,
        "fp8_e4m3": True,
        "fp8_ds_mla": True,
        "nvfp4_ds_mla": False,
    }
    bf16 = items.item(planner.form.kv_dtype.findText("bfloat16"))
    assert "stores fp8_ds_mla only" in bf16.toolTip()
    assert "H200-SXM-141GB" in planner.form.kv_dtype.toolTip()
    planner.form.kv_dtype.setCurrentText("bfloat16")  # e.g. kept from a V3 session: kept, and planning says why
    with qtbot.waitSignal(planner.context.jobs.job_ended, timeout=60000):
        planner.form.plan_button.click()
    qtbot.waitUntil(lambda: planner.form.error.isVisible(), timeout=30000)
    assert "'bfloat16'" in planner.form.error.text() and "fp8_ds_mla only" in planner.form.error.text()
    planner.form.model.setCurrentText("deepseek-v3.2")
    assert all(enabled().values())


def test_choosing_another_layout_redraws_its_ranks_and_warnings(qtbot, planner) -> None:
    _plan(qtbot, planner)
    result = planner.result
    row = next(i for i, layout in enumerate(result.layouts) if layout.pipeline_parallel == 2 and layout.valid)
    planner.table.selectRow(row)
    layout = result.layouts[row]
    assert len(planner.memory.bars) == 2
    stages = {rank.pipeline_stage for rank in planner.rank_map.placements().values()}
    assert stages == {0, 1}
    assert planner.warnings.count() >= 1
    assert "vllm serve <model>" in planner.flags.toPlainText()
    assert " ".join(layout.vllm_args) in planner.flags.toPlainText()


def test_a_bad_input_is_shown_under_the_form_naming_the_field(qtbot, planner) -> None:
    planner.form.model.setEditText("/nonexistent/config.json")
    with qtbot.waitSignal(planner.context.jobs.job_ended, timeout=30000):
        planner.form.plan_button.click()
    qtbot.waitUntil(lambda: planner.form.error.isVisible(), timeout=30000)
    assert planner.form.error.text().startswith("--model:")


def test_a_plan_that_takes_long_is_cancelled_at_once_and_plan_clicks_never_wait(qtbot, planner, monkeypatch) -> None:
    """A slow plan (a hostile checkpoint's) neither blocks the GUI thread nor keeps its job: Cancel ends it now,
    a second click supersedes the first without joining its worker, and a late result is never shown."""
    import meshdeck.ui.views.planner.view as planner_view

    release = threading.Event()
    real_plan = planner_view.plan_with_speed

    def slow_plan(request, speed="kernels", progress=None):
        release.wait(30)
        return real_plan(request, speed)

    monkeypatch.setattr(planner_view, "plan_with_speed", slow_plan)
    planned: list[object] = []
    planner.planned.connect(planned.append)
    planner.form.plan_button.click()
    first = planner.context.jobs.running("plan")
    planner.form.plan_button.click()  # supersedes the first: returns without waiting for its worker
    second = planner.context.jobs.running("plan")
    assert first is not None and second is not None and second is not first and first.is_running()
    with qtbot.waitSignal(second.ended, timeout=5000):
        second.cancel()
    assert planner.summary.text() == "Planning cancelled." and planner.context.jobs.running("plan") is None
    release.set()
    assert first.wait(30)
    qtbot.wait(100)
    assert planned == [] and not second.started  # neither the stale result nor the cancelled plan arrives
    monkeypatch.setattr(planner_view, "plan_with_speed", real_plan)
    _plan(qtbot, planner)
    assert planner.result is not None and len(planned) == 1


def test_export_profile_writes_yaml_that_loads_as_the_planned_layout(qtbot, planner, tmp_path, monkeypatch) -> None:
    _plan(qtbot, planner)
    single = next(
        i
        for i, layout in enumerate(planner.result.layouts)
        if layout.instances == 1 and layout.fits and layout.nodes == 2
    )
    planner.table.selectRow(single)
    layout = planner.selected_layout()
    target = tmp_path / "ds32.yaml"
    answer = ProfileAnswer("ds32-demo", "deepseek-ai/DeepSeek-V3.2")
    monkeypatch.setattr(ProfileSaver, "ask", lambda self, *a: answer)
    monkeypatch.setattr("meshdeck.ui.views.planner.save.QFileDialog.getSaveFileName", lambda *a, **k: (str(target), ""))
    with qtbot.waitSignal(planner.saver.saved, timeout=30000) as saved:
        planner.export_button.click()
    assert saved.args == [["ds32-demo"]]
    profile = load_profile(target.read_text(), source=str(target))
    assert profile.hosts == ["demo-a", "demo-b"]
    assert profile.layout.world_size == layout.gpus
    assert (profile.layout.tensor_parallel, profile.layout.pipeline_parallel) == (
        layout.tensor_parallel,
        layout.pipeline_parallel,
    )
    assert profile.vllm.gpu_memory_utilization == pytest.approx(0.9)
    assert yaml.safe_load(target.read_text())["model"] == "deepseek-ai/DeepSeek-V3.2"
    assert not list(tmp_path.glob(".ds32.yaml.*"))  # the temporary file was renamed away


def test_the_launch_prediction_plans_on_the_cluster_the_console_planner_showed(
    qtbot, planner, simulated_inventory, monkeypatch
) -> None:
    """planned-vs-measured compares against the planner's row: the launch's prediction must be computed on
    the very ClusterSpec the console planned on (GPU spec, link matrix, inter-node bandwidth), for the same
    hosts and inventories."""
    _plan(qtbot, planner)
    shown = planner.result
    layout = next(lp for lp in shown.layouts if lp.instances == 1 and lp.fits and lp.nodes == 2)
    mapping = profile_mappings(layout, shown, ["demo-a", "demo-b"], "x", "deepseek-ai/DeepSeek-V3.2")[0]
    predicted_on = []
    plan_layouts = deploy_targets.plan_layouts
    monkeypatch.setattr(deploy_targets, "plan_layouts", lambda r: predicted_on.append(r.cluster) or plan_layouts(r))
    inventories = dict.fromkeys(["demo-a", "demo-b"], Inventory.from_wire(simulated_inventory))

    planned, note = deploy_targets.planned_startup(profile_from_mapping(mapping), inventories)

    assert planned is not None, note
    assert predicted_on == [shown.request.cluster]
    assert shown.request.cluster.topology is not None  # the agents' matrix, on both sides
    assert (planned.weights_bytes, planned.kv_cache_bytes) == (
        layout.weights_bytes_per_gpu,
        layout.kv_cache_bytes_per_gpu,
    )


def _plan_torch_and_pick_one_instance(qtbot, planner: PlannerView):
    planner.form.engine.setCurrentText("torch")
    _plan(qtbot, planner)
    assert planner.result.request.engine == "torch"
    single = next(
        i for i, lay in enumerate(planner.result.layouts) if lay.instances == 1 and lay.fits and lay.nodes == 2
    )
    planner.table.selectRow(single)
    return planner.selected_layout()


def _answer_the_dialog(monkeypatch, script: str, seen: list[ProfileDialog]) -> None:
    """Stands in for the operator: types `script` into the real dialog's script field and presses OK."""

    def exec_(dialog: ProfileDialog) -> int:
        seen.append(dialog)
        field = dialog.findChild(QLineEdit, "profileScript")
        assert field is not None and field.isVisibleTo(dialog)
        field.setText(script)
        return QDialog.DialogCode.Accepted

    monkeypatch.setattr(ProfileDialog, "exec", exec_)


def test_a_torch_layout_is_exported_with_the_script_typed_in_the_dialog(qtbot, planner, tmp_path, monkeypatch) -> None:
    layout = _plan_torch_and_pick_one_instance(qtbot, planner)
    seen: list[ProfileDialog] = []
    _answer_the_dialog(monkeypatch, "  /opt/jobs/train_ds32.py ", seen)
    target = tmp_path / "ds32-torch.yaml"
    monkeypatch.setattr("meshdeck.ui.views.planner.save.QFileDialog.getSaveFileName", lambda *a, **k: (str(target), ""))
    with qtbot.waitSignal(planner.saver.saved, timeout=30000):
        planner.export_button.click()
    assert "tiny-deepseek" in seen[0].findChild(QLineEdit, "profileScript").placeholderText()
    profile = load_profile(target.read_text(), source=str(target))
    assert (profile.engine, profile.model) == ("torch", "deepseek-ai/DeepSeek-V3.2")
    assert profile.torch.script == "/opt/jobs/train_ds32.py"  # what the operator typed, not the tiny test model
    assert profile.layout.world_size == layout.gpus and profile.hosts == ["demo-a", "demo-b"]


def test_a_torch_layout_with_no_script_is_refused_with_the_reason(qtbot, planner, monkeypatch, warnings_shown) -> None:
    _plan_torch_and_pick_one_instance(qtbot, planner)
    _answer_the_dialog(monkeypatch, "   ", [])
    asked_for_file: list[object] = []
    monkeypatch.setattr(
        "meshdeck.ui.views.planner.save.QFileDialog.getSaveFileName",
        lambda *a, **k: asked_for_file.append(a) or ("", ""),  # then cancelled
    )
    with qtbot.waitSignal(planner.saver.failed, timeout=30000) as failed:
        planner.export_button.click()
    assert failed.args[0].startswith("script: a torch layout needs the script each rank runs")
    assert "tiny-deepseek" in failed.args[0] and "collectives" in failed.args[0]
    assert warnings_shown == failed.args and asked_for_file == []  # refused before any file is chosen


def test_the_script_field_is_shown_only_for_a_torch_layout(qtbot) -> None:
    vllm = ProfileDialog("n", "m", 1, engine="vllm")
    torch = ProfileDialog("n", "m", 1, engine="torch")
    qtbot.addWidget(vllm)
    qtbot.addWidget(torch)
    assert vllm.findChild(QLineEdit, "profileScript") is None and vllm.answer().script is None
    torch.findChild(QLineEdit, "profileScript").setText("collectives")
    assert torch.answer() == ProfileAnswer("n", "m", "collectives")


def test_catalog_match_uses_the_reported_model_and_memory() -> None:
    catalog = load_gpu_catalog()
    assert detected_gpu("NVIDIA H200", 150_754_820_096, catalog).name == "H200-SXM-141GB"
    assert detected_gpu("NVIDIA H100 80GB HBM3", 85_520_809_984, catalog).name == "H100-SXM5-80GB"
    nvl = detected_gpu("NVIDIA H100 NVL", 100_485_038_080, catalog)  # 94 GB: not the 80 GB catalog card
    assert nvl.assumed and nvl.name == "NVIDIA H100 NVL"
    unknown = detected_gpu("Mystery X1", 48 * 2**30, catalog)
    assert unknown.assumed and unknown.memory_bytes == 48 * 2**30
    with pytest.raises(InputError, match="hosts"):
        detected_gpu(None, None, catalog, field="hosts")


def test_detected_cluster_refuses_hosts_of_different_kinds(simulated_inventory) -> None:
    smaller = {**simulated_inventory, "gpus": simulated_inventory["gpus"][:4]}
    smaller["topology"] = {"matrix": [row[:4] for row in simulated_inventory["topology"]["matrix"][:4]]}
    inventories = {"a": Inventory.from_wire(simulated_inventory), "b": Inventory.from_wire(smaller)}
    with pytest.raises(InputError, match="different GPU counts"):
        cluster_from_inventories(inventories, ["a", "b"], load_gpu_catalog())
    with pytest.raises(InputError, match="at least one"):
        cluster_from_inventories({}, [], load_gpu_catalog())


def test_bundled_models_are_named_by_their_hugging_face_id() -> None:
    assert model_id_for("deepseek-v3.2") == "deepseek-ai/DeepSeek-V3.2"
    assert model_id_for("/models/my-v3") == "/models/my-v3"


def test_rank_labels_name_tp_pp_dp_and_ep(qtbot, planner) -> None:
    _plan(qtbot, planner)
    layout = next(layout for layout in planner.result.layouts if layout.expert_parallel and layout.data_parallel > 1)
    rank = layout.rank_map[-1]
    text = " ".join(rank_labels(rank, layout))
    assert f"TP {rank.tensor_rank}" in text and f"DP {rank.data_parallel_rank}" in text
    assert f"EP {rank.data_parallel_rank * layout.tensor_parallel + rank.tensor_rank}" in text


def test_plan_settings_are_kept_between_sessions(qtbot, planner, console_context) -> None:
    planner.form.max_model_len.setValue(32768)
    planner.form.goal.setCurrentText("latency")
    planner.save_settings(console_context.settings)
    again = PlannerView(console_context)
    qtbot.addWidget(again)
    assert again.form.max_model_len.value() == 32768
    assert again.form.goal.currentText() == "latency"


def test_unreadable_plan_settings_leave_the_defaults(qtbot, console_context) -> None:
    # the settings file is the user's (hand-edited, or from another version): a value that is no number
    # must not stop the planner from opening
    for key, value in (("max_model_len", "not a number"), ("utilization", "nan"), ("nodes", "1e30")):
        console_context.settings.setValue(f"planner/{key}", value)
    view = PlannerView(console_context)
    qtbot.addWidget(view)
    assert (view.form.max_model_len.value(), view.form.utilization.value()) == (0, 0.9)
    assert view.form.nodes.value() == view.form.nodes.maximum()  # a number past the range is brought within it


def test_every_layout_is_a_point_on_the_throughput_interactivity_chart_and_a_click_selects_its_row(
    qtbot, planner
) -> None:
    planner.form.isl.setValue(2048)
    planner.form.osl.setValue(512)
    planner.form.tpot_target.setValue(60.0)
    _plan(qtbot, planner)
    result = planner.result
    assert result.request.workload.input_tokens == 2048 and result.request.workload.tpot_ms == 60.0
    with_serving = [layout for layout in result.fitting if layout.serving is not None]
    assert len(planner.front.points) == len(with_serving) > 3
    # the front: no point beats another on both axes
    for point in planner.front.front:
        assert not any(o.x > point.x and o.y > point.y for o in planner.front.points)
    assert planner.front.sla_line is not None and planner.front.sla_line.value() == pytest.approx(1000 / 60.0)
    # the table names the speed's source on every row and in the summary
    source_column = 14
    sources = {planner.table.item(row, source_column).text() for row in range(len(with_serving))}
    assert sources <= {"measured kernels", "roofline"} and sources
    assert "Speed:" in planner.summary.text()
    # clicking a point selects its layout's row
    target = planner.front.points[-1]
    view = planner.front.plot.getPlotItem().vb
    position = view.mapViewToScene(QPointF(target.x, target.y))
    assert planner.front.nearest(position) is target
    planner.front._click(type("Click", (), {"scenePos": lambda self: position})())
    assert planner.table.selectionModel().selectedRows()[0].row() == target.key[1]
    assert "tok/s per GPU" in planner.front.readout.text()


def test_disaggregated_plans_appear_beside_the_aggregated_best_with_their_pools_flags(qtbot, planner) -> None:
    planner.form.disaggregated.setChecked(True)
    planner.form.speed.setCurrentIndex(planner.form.speed.findData("roofline"))
    _plan(qtbot, planner)
    result = planner.result
    assert result.disaggregated and result.speed_source is not None and not result.speed_source.measured
    assert "ROOFLINE" in planner.summary.text()
    table = planner.disaggregated.table
    assert table.rowCount() == len(result.disaggregated)
    assert "prefill:" in planner.disaggregated.pools.toPlainText()
    assert "--kv-transfer-config" in planner.disaggregated.pools.toPlainText()
    assert any(point.disaggregated for point in planner.front.points)
    planner._point_clicked(("disaggregated", 1))
    assert table.selectionModel().selectedRows()[0].row() == 1


def test_planning_shows_progress_and_cancel_stops_it(qtbot, planner, monkeypatch) -> None:
    import meshdeck.ui.views.planner.view as planner_view

    started, release = threading.Event(), threading.Event()
    real_plan = planner_view.plan_with_speed

    def reporting_plan(request, speed="kernels", progress=None):
        progress(1, 4, "layouts")
        started.set()
        release.wait(30)
        progress(2, 4, "layouts")  # raises JobCancelled once Cancel was pressed
        return real_plan(request, speed)

    monkeypatch.setattr(planner_view, "plan_with_speed", reporting_plan)
    planner.form.plan_button.click()
    job = planner.context.jobs.running("plan")
    assert planner.progress.isVisible() and planner.cancel_button.isVisible()
    qtbot.waitUntil(lambda: planner.progress.value() == 250, timeout=10000)
    assert "estimating layouts" in planner.progress.format()
    planner.cancel_button.click()
    qtbot.waitUntil(lambda: planner.summary.text() == "Planning cancelled.", timeout=5000)
    assert not planner.progress.isVisible() and not planner.cancel_button.isVisible()
    release.set()
    assert job is not None and job.wait(30)  # the worker stopped at its next progress report
    assert planner.result is None


@pytest.fixture
def saving_planner(qtbot, console_context, simulated_inventory, tmp_path):
    """The planner with a database, so "Save as profile…" stores profiles."""
    from meshdeck.store.database import open_database

    console_context.db = open_database(tmp_path / "profiles.db")
    connect_hosts(qtbot, console_context, {"demo-a": simulated_inventory, "demo-b": simulated_inventory})
    view = PlannerView(console_context)
    qtbot.addWidget(view)
    view.resize(1400, 900)
    view.show()
    qtbot.waitUntil(lambda: view.form.gpu.count() > 0, timeout=30000)
    yield view
    console_context.db.close()


def _several_instances_row(planner: PlannerView) -> int:
    return next(i for i, lay in enumerate(planner.result.layouts) if lay.instances > 1 and lay.fits and lay.valid)


def test_a_layout_label_with_n_times_is_explained_in_its_tooltip_and_in_the_layout_header(qtbot, planner) -> None:
    _plan(qtbot, planner)
    row = _several_instances_row(planner)
    layout = planner.result.layouts[row]
    tip = planner.table.item(row, 1).toolTip()
    assert tip.startswith(f"{layout.label()}: {layout.instances} independent instances of {layout.shape_label()}")
    assert f"{layout.instances} deployments with {layout.instances} endpoints" in tip
    assert planner.table.horizontalHeaderItem(1).toolTip().startswith("N×: N independent instances of the layout")
    single = next(i for i, lay in enumerate(planner.result.layouts) if lay.instances == 1)
    assert planner.table.item(single, 1).toolTip() == ""
    points = {point.key: point for point in planner.front.points}  # hovering its point on the chart says it too
    assert planner.front.describe(points[("layout", row)]).endswith(f"<br>{layout.instances_text()}")
    if ("layout", single) in points:
        assert "independent instances" not in planner.front.describe(points[("layout", single)])


def test_saving_several_instances_says_what_it_makes_and_offers_the_one_instance_layout_on_the_same_gpus(
    qtbot, saving_planner, monkeypatch
) -> None:
    from meshdeck.services import profiles as profile_service
    from meshdeck.services.plan_profiles import single_instance_alternative
    from PySide6.QtWidgets import QLabel, QMessageBox, QPushButton

    planner = saving_planner
    _plan(qtbot, planner)
    planner.table.selectRow(_several_instances_row(planner))
    rank, alternative = single_instance_alternative(planner.result, planner.selected_layout())
    seen: list[ProfileDialog] = []

    def exec_(dialog: ProfileDialog) -> int:
        seen.append(dialog)
        if len(seen) == 1:  # the 2× layout: the operator takes the offered single instance instead
            dialog.findChild(QPushButton, "saveAlternative").click()
            return dialog.result()
        return QDialog.DialogCode.Accepted

    monkeypatch.setattr(ProfileDialog, "exec", exec_)
    with qtbot.waitSignal(planner.saver.saved, timeout=30000) as saved:
        planner.save_button.click()
    notice = seen[0].findChild(QLabel, "instancesNotice").text()
    assert "saving it makes 2 profiles (-1, -2), launched as 2 deployments with 2 endpoints" in notice
    assert "meshdeck starts no router or load balancer" in notice
    assert f"save rank {rank}, {alternative.label()}, which spans the same 16 GPUs as one deployment" in notice
    assert len(seen) == 2 and seen[1].findChild(QLabel, "instancesNotice") is None
    assert planner.selected_layout() is alternative  # its row is shown while it is saved
    (name,) = saved.args[0]
    stored = profile_service.get_profile(planner.context.db, name)
    assert (stored.profile.layout.data_parallel, stored.profile.hosts) == (
        alternative.data_parallel,
        ["demo-a", "demo-b"],
    )
    assert f"rank {rank}, {alternative.label()}" in stored.version.note
    assert planner.save_status.text().startswith(f"Saved profile {name} (demo-a port 8000)")
    box = planner.findChild(QMessageBox, "profileSavedMessage")
    assert box is not None and box.isVisible() and box.text() == planner.save_status.text()


def test_the_saved_profile_takes_the_plans_max_num_seqs_mitigation_the_dialog_offers(
    qtbot, saving_planner, monkeypatch
) -> None:
    from meshdeck.services import profiles as profile_service
    from PySide6.QtWidgets import QCheckBox

    planner = saving_planner
    _plan(qtbot, planner)
    row = next(i for i, lay in enumerate(planner.result.layouts) if "mla_combine_large_batch" in lay.warning_codes)
    planner.table.selectRow(row)
    ticks: list[bool] = []

    def exec_(dialog: ProfileDialog) -> int:
        box = dialog.findChild(QCheckBox, "mitigation-mla_combine_large_batch")
        ticks.append(box.isChecked())
        assert box.text() == "Apply max_num_seqs 256 (the plan warns without it)"
        assert box.toolTip().startswith("max_num_seqs 256 instead of vLLM's default 1024")
        return QDialog.DialogCode.Accepted

    monkeypatch.setattr(ProfileDialog, "exec", exec_)
    with qtbot.waitSignal(planner.saver.saved, timeout=30000) as saved:
        planner.save_button.click()
    assert ticks == [True]
    for name in saved.args[0]:
        stored = profile_service.get_profile(planner.context.db, name)
        assert stored.profile.vllm.max_num_seqs == 256 and "max_num_seqs 256" in stored.version.note
    assert planner.save_status.text().startswith("Saved ")


def test_the_vllm_release_is_chosen_in_the_form_and_the_summary_says_which_in_the_clis_words(
    qtbot, planner, capsys
) -> None:
    from meshdeck.cli import main
    from meshdeck.core.vllm_releases import NEWEST_MODELLED, VLLM_ACCOUNTINGS

    combo = planner.form.vllm_release
    labels = [combo.itemText(i) for i in range(combo.count())]
    assert labels == ["from the hosts (0.11)", *(a.label for a in VLLM_ACCOUNTINGS), "newest modelled (0.33)"]
    _plan(qtbot, planner)  # simulated hosts: their agents model 0.11's accounting
    assert planner.result.request.vllm_version == (0, 11)
    summary, notes = planner.summary.text(), planner.notes.text()
    said = "from the hosts: their simulated agents model vLLM 0.11's accounting"
    assert f"<b>vLLM:</b> 0.11 accounting, {said}" in summary
    assert f"memory accounting follows vLLM 0.11, {said} (releases 0.11: " in notes
    assert "the planner's vLLM release picks another)" in notes

    combo.setCurrentIndex(labels.index("0.12–0.13"))
    _plan(qtbot, planner)
    assert planner.result.request.vllm_version == (0, 13)
    assert "<b>vLLM:</b> 0.13 accounting, as chosen in the planner" in planner.summary.text()
    console = next(note for note in planner.result.notes if note.startswith("memory accounting follows"))
    assert console in planner.notes.text()
    assert main(["plan", "--gpu", "H200-SXM-141GB", "--nodes", "2", "--vllm-version", "0.13", "--top", "1"]) == 0
    cli = next(line for line in capsys.readouterr().out.splitlines() if "memory accounting follows" in line)
    assert console.startswith("memory accounting follows vLLM 0.13, as chosen in the planner (releases 0.12–0.13: ")
    assert cli.startswith("note: memory accounting follows vLLM 0.13, as --vllm-version asks (releases 0.12–0.13: ")
    assert (
        console.split(" (releases ")[1].split("; the planner's")[0] == cli.split(" (releases ")[1].split("; --vllm")[0]
    )

    combo.setCurrentIndex(combo.count() - 1)
    _plan(qtbot, planner)
    assert planner.result.request.vllm_version == NEWEST_MODELLED
    assert "<b>vLLM:</b> 0.33 accounting, the newest modelled" in planner.summary.text()


def test_the_vllm_release_choice_is_kept_between_sessions(qtbot, planner, console_context) -> None:
    planner.form.vllm_release.setCurrentIndex(planner.form.vllm_release.count() - 1)
    planner.save_settings(console_context.settings)
    again = PlannerView(console_context)
    qtbot.addWidget(again)
    assert again.form.vllm_release.currentText() == "newest modelled (0.33)"
