"""The planner view: inputs pre-filled from the connected hosts, the ranked layouts, and for the chosen
layout its per-GPU memory, its ranks drawn on the real GPUs, its warnings and `vllm serve` flags.

Every layout carries its serving estimate at the form's workload (TTFT, TPOT, tokens/s per GPU and per user)
from measured kernel tables, or the roofline where those do not reach — said in the summary and marked per
row. The throughput–interactivity chart puts every layout (and every prefill/decode-disaggregated plan) on one
plane with its Pareto front; clicking a point selects its row.

Planning runs as a job (model cards, the GPU catalog and the kernel tables are files) with a progress bar and
a Cancel button; a new plan lets one still running go. "Save as profile" turns the chosen layout into one
profile per instance of it (validated by launch.profile) and stores it; "Export YAML" writes the same profile
to a file (planner/save.py: what an "N×" layout makes, the plan's mitigations); the line beside the buttons
says what was saved. The "Prefill/decode pools" tab saves its chosen plan the same way, as one profile with both
pools (save_disaggregated). A layout label's "N×" is explained in the layout column's header and cell tooltips.
"""

from __future__ import annotations

import html
import logging
import shlex
from collections.abc import Callable

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from meshdeck.core.layout_plan import INSTANCES_LEGEND, LayoutPlan
from meshdeck.core.planner import PlanResult, accounting_why
from meshdeck.core.vllm_releases import release_text
from meshdeck.services.catalog import load_gpu_catalog
from meshdeck.services.cluster import DetectedCluster
from meshdeck.services.planning import plan_with_speed, warm_up_speed_tables
from meshdeck.ui.charts.serving_front import FrontPoint, ServingFrontChart
from meshdeck.ui.charts.units import format_bytes
from meshdeck.ui.context import ConsoleContext
from meshdeck.ui.jobs import Progress
from meshdeck.ui.views.planner.disaggregated import DisaggregatedTable
from meshdeck.ui.views.planner.form import PlannerForm, PlannerInputs, bundled_v4_models
from meshdeck.ui.views.planner.save import ProfileSaver
from meshdeck.ui.widgets.memory_bar import MemoryBarsWidget, memory_bars
from meshdeck.ui.widgets.rank_map import RankMapWidget
from meshdeck.ui.widgets.tables import row_table

log = logging.getLogger(__name__)

COLUMNS = (
    "#",
    "layout",
    "GPUs",
    "nodes",
    "fits",
    "weights GiB/GPU",
    "KV GiB/GPU",
    "KV tokens/replica",
    "max concurrency",
    "in flight",
    "TTFT ms",
    "TPOT ms",
    "tok/s/GPU",
    "tok/s/user",
    "speed from",
    "warnings",
)
TEXT_COLUMNS = (1, 4, 14)  # left-aligned


def _serving_cells(layout: LayoutPlan) -> list[str]:
    serving = layout.serving
    if serving is None:
        return ["—"] * 5 + ["" if not layout.serving_problem else "no estimate"]
    miss = "" if serving.sla is None or serving.sla.meets else " ✗"
    return [
        f"{serving.concurrency:,}",
        f"{serving.ttft_ms:,.0f}",
        f"{serving.tpot_ms:,.1f}{miss}",
        f"{serving.output_tokens_per_s_per_gpu:,.0f}",
        f"{serving.tokens_per_s_per_user:,.1f}",
        "measured kernels" if serving.source.measured else "roofline",
    ]


def _layout_row(rank: int, layout: LayoutPlan) -> list[str]:
    fits = "yes" if layout.fits and layout.valid else ("invalid" if not layout.valid else "no")
    return [
        str(rank),
        layout.label(),
        str(layout.gpus),
        str(layout.nodes),
        fits,
        f"{layout.weights_gib_per_gpu:.1f}",
        f"{layout.kv_cache_gib_per_gpu:.1f}",
        f"{layout.kv_tokens_per_replica:,}",
        f"{layout.max_concurrency:.2f}×",
        *_serving_cells(layout),
        str(len(layout.warnings)),
    ]


class PlannerView(QWidget):
    planned = Signal(object)  # PlanResult
    profiles_saved = Signal(list)  # names

    def __init__(self, context: ConsoleContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("plannerView")
        self.context = context
        self.result: PlanResult | None = None
        self.detected: DetectedCluster | None = None

        self.form = PlannerForm()
        self.form.restore_settings(context.settings)
        self.form.plan_requested.connect(self.plan)
        QShortcut(QKeySequence("Ctrl+Return"), self, self.plan).setWhatsThis("Plan: rank every layout")
        form_scroll = QScrollArea()
        form_scroll.setWidgetResizable(True)
        form_scroll.setWidget(self.form)
        form_scroll.setMinimumWidth(330)

        self.summary = QLabel("Plan to rank every TP / PP / DP / EP layout of this cluster.")
        self.summary.setObjectName("planSummary")
        self.summary.setWordWrap(True)
        self.notes = QLabel()
        self.notes.setObjectName("planNotes")
        self.notes.setWordWrap(True)
        self.table = row_table("layoutTable", COLUMNS)
        header = self.table.horizontalHeaderItem(1)
        assert header is not None  # row_table names every column
        header.setToolTip(INSTANCES_LEGEND)
        self.table.itemSelectionChanged.connect(self._layout_chosen)

        self.memory = MemoryBarsWidget()
        self.rank_map = RankMapWidget()
        layout_page = QWidget()
        page = QVBoxLayout(layout_page)
        page.addWidget(QLabel("Memory per GPU"))
        page.addWidget(self.memory)
        page.addWidget(QLabel("Ranks on the GPUs"))
        page.addWidget(self.rank_map)
        page.addStretch(1)
        layout_scroll = QScrollArea()
        layout_scroll.setWidgetResizable(True)
        layout_scroll.setWidget(layout_page)
        self.warnings = QListWidget()
        self.warnings.setObjectName("layoutWarnings")
        self.warnings.setWordWrap(True)
        self.flags = QPlainTextEdit()
        self.flags.setObjectName("vllmFlags")
        self.flags.setReadOnly(True)
        self.front = ServingFrontChart()
        self.front.point_clicked.connect(self._point_clicked)
        self.disaggregated = DisaggregatedTable()
        self.details = QTabWidget()
        self.details.addTab(layout_scroll, "Memory and ranks")
        self.details.addTab(self.warnings, "Warnings")
        self.details.addTab(self.flags, "vllm serve flags and traffic")
        self.front_tab = self.details.addTab(self.front, "Throughput vs interactivity")
        self.disaggregated_tab = self.details.addTab(self.disaggregated, "Prefill/decode pools")
        self.progress = QProgressBar()
        self.progress.setObjectName("planProgress")
        self.progress.setVisible(False)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setObjectName("cancelPlan")
        self.cancel_button.setVisible(False)
        self.cancel_button.clicked.connect(self.cancel_plan)

        self.saver = ProfileSaver(context, self)
        self.saver.saved.connect(self.profiles_saved.emit)
        self.saver.alternative_requested.connect(self._save_alternative)
        self.save_status = QLabel()
        self.save_status.setObjectName("saveStatus")
        self.save_status.setWordWrap(True)
        self.save_status.setTextFormat(Qt.TextFormat.PlainText)
        self.saver.confirmed.connect(self.save_status.setText)
        self.saver.failed.connect(lambda message: self.save_status.setText(f"Not saved: {message}"))
        self.save_button = QPushButton("Save as profile…")
        self.save_button.setObjectName("saveProfile")
        self.save_button.clicked.connect(self.save_profile)
        self.export_button = QPushButton("Export profile YAML…")
        self.export_button.setObjectName("exportProfile")
        self.export_button.clicked.connect(self.export_profile)
        for button in (self.save_button, self.export_button):
            button.setEnabled(False)
        self.save_button.setVisible(context.db is not None)  # profiles live in the database
        self.disaggregated.save_button.setVisible(context.db is not None)
        self.disaggregated.save_requested.connect(self.save_disaggregated)
        buttons = QHBoxLayout()
        buttons.addWidget(self.save_status, 1)
        buttons.addWidget(self.export_button)
        buttons.addWidget(self.save_button)

        results = QWidget()
        right = QVBoxLayout(results)
        running = QHBoxLayout()
        running.addWidget(self.progress, 1)
        running.addWidget(self.cancel_button)
        right.addLayout(running)
        right.addWidget(self.summary)
        right.addWidget(self.notes)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.table)
        splitter.addWidget(self.details)
        splitter.setSizes([260, 420])
        right.addWidget(splitter, 1)
        right.addLayout(buttons)
        main = QSplitter()
        main.addWidget(form_scroll)
        main.addWidget(results)
        main.setStretchFactor(1, 1)
        main.setSizes([340, 1100])
        outer = QHBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(main)

        self._hosts_timer = QTimer(self)
        self._hosts_timer.setSingleShot(True)
        self._hosts_timer.setInterval(300)
        self._hosts_timer.timeout.connect(self._refresh_hosts)
        assert context.hosts is not None
        context.hosts.changed.connect(lambda _host: self._hosts_timer.start())
        job = context.jobs.start("load GPU catalog", lambda _progress: load_gpu_catalog(), abandon_on_cancel=True)
        job.succeeded.connect(self.form.set_gpu_catalog)
        models = context.jobs.start("load model cards", lambda _progress: bundled_v4_models(), abandon_on_cancel=True)
        models.succeeded.connect(self.form.set_v4_models)  # V4's KV cache dtypes follow its own rules
        # the kernel library's import (pandas, its Rust engine) paid before the first Plan click, not on it
        context.jobs.start("load kernel tables", lambda _progress: warm_up_speed_tables(), abandon_on_cancel=True)
        self._refresh_hosts()

    # ------------------------------------------------------------------ hosts

    def _refresh_hosts(self) -> None:
        assert self.context.hosts is not None
        inventories = dict(sorted(self.context.hosts.connected_inventories().items()))
        if set(inventories) != set(self.form._inventories):
            self.form.set_hosts(inventories)

    # ------------------------------------------------------------------ planning

    def plan(self) -> None:
        inputs = self.form.inputs()
        self.form.show_error(None)
        self.summary.setText("planning…")

        def work(progress: Progress) -> tuple[PlanResult, DetectedCluster | None]:
            request, detected = inputs.to_request()

            def report(done: int, total: int, what: str) -> None:
                progress.check()  # Cancel: JobCancelled stops the plan between layouts
                progress.report(done / total if total else None, f"estimating {what}")

            return plan_with_speed(request, inputs.speed, report), detected

        # planning has no side effects: a cancelled or superseded plan is let go, never waited for
        job = self.context.jobs.start("plan", work, abandon_on_cancel=True)
        job.succeeded.connect(lambda answer, inputs=inputs: self._show(answer, inputs))
        job.failed.connect(self._failed)
        job.cancelled.connect(self._cancelled)
        job.progressed.connect(self._progressed)
        job.ended.connect(self._plan_ended)
        self.progress.setRange(0, 0)
        self.progress.setFormat("planning…")
        self.progress.setVisible(True)
        self.cancel_button.setVisible(True)

    def cancel_plan(self) -> None:
        job = self.context.jobs.running("plan")
        if job is not None:
            job.cancel()

    def _progressed(self, fraction: float, message: str) -> None:
        if fraction < 0:
            self.progress.setRange(0, 0)
        else:
            self.progress.setRange(0, 1000)
            self.progress.setValue(round(fraction * 1000))
        self.progress.setFormat(f"{message} %p%" if fraction >= 0 else message)

    def _plan_ended(self) -> None:
        if self.context.jobs.running("plan") is None:  # no newer plan took its place
            self.progress.setVisible(False)
            self.cancel_button.setVisible(False)

    def _cancelled(self) -> None:
        if self.context.jobs.running("plan") is None:  # not superseded by a newer plan
            self.summary.setText("Planning cancelled.")

    def _failed(self, message: str) -> None:
        self.form.show_error(message)
        self.summary.setText("The plan could not be made: see the message under the form.")

    def _show(self, answer: tuple[PlanResult, DetectedCluster | None], inputs: PlannerInputs) -> None:
        result, detected = answer
        self.result, self.detected, self.inputs = result, detected, inputs
        layouts = result.layouts
        cluster = result.request.cluster
        where = f"{', '.join(detected.hosts)} (detected)" if detected else "typed-in cluster"
        simulated = " — simulated hosts" if detected and detected.simulated else ""
        source = result.speed_source
        speed = (
            ""
            if source is None
            else f"<br><b>Speed:</b> {html.escape(source.text())}"
            if source.measured
            else f"<br><b>Speed: ROOFLINE estimate, not measured</b> — {html.escape(source.reason or 'asked for')}"
        )
        top = layouts[0] if layouts else None
        instances = (
            f" ({top.instances}× = {top.instances} independent instances, one endpoint each: hover a layout)"
            if top is not None and top.instances > 1
            else ""
        )
        request = result.request
        release = f"{release_text(request.vllm_version)} accounting, {accounting_why(request)}"
        self.summary.setText(
            f"<b>{html.escape(result.request.model.name)}</b> on {cluster.nodes}×{cluster.gpus_per_node} "
            f"{html.escape(cluster.gpu.name)}, {html.escape(where)}{simulated}: {len(result.fitting)} of "
            f"{len(layouts)} layouts fit at {html.escape(result.request.workload.text())}."
            f"<br>{html.escape(result.top_reason)}{html.escape(instances)}{speed}"
            f"<br><b>vLLM:</b> {html.escape(release, quote=False)}"  # the notes say it whole, as the CLI does
        )
        self.notes.setText(" · ".join([*(detected.notes if detected else ()), *result.notes]))
        self.table.setRowCount(len(layouts))
        for row, layout in enumerate(layouts):
            for column, text in enumerate(_layout_row(row + 1, layout)):
                item = QTableWidgetItem(text)
                if column == 1 and layout.instances > 1:
                    item.setToolTip(layout.instances_text())
                if column >= 2 and column not in TEXT_COLUMNS:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if not (layout.fits and layout.valid):
                    item.setForeground(self.palette().placeholderText())
                self.table.setItem(row, column, item)
        self._show_front(result)
        self.disaggregated.set_plan(result)
        self.details.setTabText(self.disaggregated_tab, f"Prefill/decode pools ({len(result.disaggregated)})")
        if layouts:
            self.table.selectRow(0)
        self.planned.emit(result)

    def _show_front(self, result: PlanResult) -> None:
        points = [
            FrontPoint(("layout", row), layout.label(), layout.serving, note=layout.instances_text())
            for row, layout in enumerate(result.layouts)
            if layout.serving is not None and layout.fits and layout.valid
        ]
        points += [
            FrontPoint(("disaggregated", index), option.label(), option.serving, disaggregated=True)
            for index, option in enumerate(result.disaggregated)
        ]
        self.front.set_points(points, tpot_target_ms=result.request.workload.tpot_ms)

    def _point_clicked(self, key: object) -> None:
        assert isinstance(key, tuple)
        kind, index = key
        if kind == "layout":
            self.table.selectRow(index)
        else:
            self.disaggregated.select(index)

    def selected_layout(self) -> LayoutPlan | None:
        rows = self.table.selectionModel().selectedRows()
        if self.result is None or not rows:
            return None
        return self.result.layouts[rows[0].row()]

    def node_names(self) -> list[str]:
        if self.detected is not None:
            return list(self.detected.hosts)
        assert self.result is not None
        return [f"node {i}" for i in range(self.result.request.cluster.nodes)]

    def _layout_chosen(self) -> None:
        layout = self.selected_layout()
        for button in (self.save_button, self.export_button):
            button.setEnabled(layout is not None and layout.valid)
        if layout is None or self.result is None:
            return
        self.front.select(("layout", self.table.selectionModel().selectedRows()[0].row()))
        cluster = self.result.request.cluster
        self.memory.set_bars(memory_bars(layout, cluster.gpu.memory_bytes, cluster.gpu.torch_visible_bytes))
        self.rank_map.set_layout(layout, cluster.nodes, cluster.gpus_per_node, self.node_names())
        self.warnings.clear()
        if not layout.valid:
            self.warnings.addItem(f"invalid: {layout.invalid_reason}")
        self.warnings.addItems(list(layout.warnings) or ["no warnings"])
        self.details.setTabText(1, f"Warnings ({len(layout.warnings)})")
        traffic = "\n".join(
            f"  {item.collective}: {format_bytes(item.bytes_per_token)} per GPU over {item.link.value} "
            f"in {item.collectives_per_token} calls"
            for item in layout.traffic
        )
        self.flags.setPlainText(
            f"vllm serve <model> {shlex.join(layout.vllm_args)}\n\n{layout.reason}\n\n"
            f"traffic per generated token (estimate):\n{traffic or '  none: every group is one GPU'}"
        )

    # ------------------------------------------------------------------ profiles

    def save_profile(self) -> None:
        layout = self.selected_layout()
        if layout is not None and self.result is not None:
            self.saver.save(layout, self.result, self.node_names(), self.inputs.model, to_file=False)

    def export_profile(self) -> None:
        layout = self.selected_layout()
        if layout is not None and self.result is not None:
            self.saver.save(layout, self.result, self.node_names(), self.inputs.model, to_file=True)

    def save_disaggregated(self, index: int, to_file: bool) -> None:
        """Save the prefill/decode plan at `index` as one profile, its pools on the detected hosts in order."""
        if self.result is None or index >= len(self.result.disaggregated):
            return
        hosts = list(self.detected.hosts) if self.detected is not None else None
        plan = self.result.disaggregated[index]
        self.saver.save_disaggregated(plan, self.result, hosts, self.inputs.model, to_file=to_file)

    def _save_alternative(self, row: int, to_file: bool) -> None:
        """The save dialog's "Save rank K instead": select that row (its memory, ranks and flags show) and save it."""
        self.table.selectRow(row)
        QTimer.singleShot(0, self.export_profile if to_file else self.save_profile)

    def screenshot_pages(self) -> list[tuple[str, Callable[[], None]]]:
        """Pages `--screenshots` grabs besides the view as it stands: the throughput–interactivity chart."""
        return [("front", lambda: self.details.setCurrentIndex(self.front_tab))]

    def save_settings(self, settings: QSettings) -> None:
        self.form.save_settings(settings)
