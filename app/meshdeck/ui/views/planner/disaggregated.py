"""The planner's prefill/decode-disaggregated plans: one row per split of the cluster, and the chosen one's pools.

Each row is a rate-matched pair of pools (core/disaggregated.py) on the plan's GPUs and workload, with how it
compares to the best aggregated layout; under the table, the chosen plan's prefill and decode workers with the
exact `vllm serve` flags and environment each needs, and its warnings (RDMA, slow fabric). "Save as profile…"
and "Export profile YAML…" ask the view (`save_requested`) to save the chosen plan as one profile with its pools
(planner/save.py).
"""

from __future__ import annotations

import shlex

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QTableWidgetItem, QVBoxLayout, QWidget

from meshdeck.core.disaggregated import DisaggregatedPlan, Pool
from meshdeck.core.planner import PlanResult
from meshdeck.core.plural import counted
from meshdeck.ui.widgets.tables import row_table

COLUMNS = ("#", "prefill pool", "decode pool", "GPUs", "TTFT ms", "TPOT ms", "tok/s/GPU", "tok/s/user", "vs aggregated")


def _pool(pool: Pool) -> str:
    return f"{pool.workers}× {pool.shape.label()} (batch {pool.batch_per_rank}/rank)"


def _row(rank: int, option: DisaggregatedPlan) -> list[str]:
    s = option.serving
    versus = "—" if option.versus_aggregated is None else f"{option.versus_aggregated:.2f}×"
    miss = "" if s.sla is None or s.sla.meets else " ✗"
    return [
        str(rank),
        _pool(option.prefill),
        _pool(option.decode),
        str(s.gpus),
        f"{s.ttft_ms:,.0f}",
        f"{s.tpot_ms:,.1f}{miss}",
        f"{s.output_tokens_per_s_per_gpu:,.0f}",
        f"{s.tokens_per_s_per_user:,.1f}",
        versus,
    ]


class DisaggregatedTable(QWidget):
    save_requested = Signal(int, bool)  # the chosen plan's index, to a file (True) or the database

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.options: tuple[DisaggregatedPlan, ...] = ()
        self.summary = QLabel("Tick “Also plan prefill/decode pools” and plan a cluster of two or more nodes.")
        self.summary.setWordWrap(True)
        self.table = row_table("disaggregatedTable", COLUMNS)
        self.table.itemSelectionChanged.connect(self._chosen)
        self.pools = QPlainTextEdit()
        self.pools.setObjectName("disaggregatedPools")
        self.pools.setReadOnly(True)
        self.save_button = QPushButton("Save as profile…")
        self.save_button.setObjectName("saveDisaggregatedProfile")
        self.save_button.setToolTip("Store the chosen plan as one profile: both pools, NixlConnector, the router")
        self.save_button.clicked.connect(lambda: self._save(to_file=False))
        self.export_button = QPushButton("Export profile YAML…")
        self.export_button.setObjectName("exportDisaggregatedProfile")
        self.export_button.clicked.connect(lambda: self._save(to_file=True))
        for button in (self.save_button, self.export_button):
            button.setEnabled(False)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.export_button)
        buttons.addWidget(self.save_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.pools, 1)
        layout.addLayout(buttons)

    def set_plan(self, result: PlanResult) -> None:
        self.options = result.disaggregated
        self.table.setRowCount(len(self.options))
        for row, option in enumerate(self.options):
            for column, text in enumerate(_row(row + 1, option)):
                item = QTableWidgetItem(text)
                if column not in (1, 2):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(row, column, item)
        best = result.aggregated_best
        if not result.request.disaggregated:
            self.summary.setText("Tick “Also plan prefill/decode pools” to compare them with the aggregated layouts.")
        elif not self.options:
            self.summary.setText("No split of this cluster holds both a prefill and a decode worker.")
        elif best is not None and best.serving is not None:
            s = best.serving
            self.summary.setText(
                f"Against the best aggregated layout, {best.label()}: {s.output_tokens_per_s_per_gpu:,.0f} tok/s per "
                f"GPU, TPOT {s.tpot_ms:,.1f} ms, TTFT {s.ttft_ms:,.0f} ms. Pools are rate-matched (prefill ≈ decode "
                "requests/s); KV moves over NixlConnector."
            )
        self.pools.clear()
        for button in (self.save_button, self.export_button):
            button.setEnabled(False)
        if self.options:
            self.table.selectRow(0)

    def select(self, index: int) -> None:
        self.table.selectRow(index)

    def selected_index(self) -> int | None:
        rows = self.table.selectionModel().selectedRows()
        return rows[0].row() if rows and rows[0].row() < len(self.options) else None

    def _save(self, *, to_file: bool) -> None:
        index = self.selected_index()
        if index is not None:
            self.save_requested.emit(index, to_file)

    def _chosen(self) -> None:
        index = self.selected_index()
        for button in (self.save_button, self.export_button):
            button.setEnabled(index is not None)
        if index is None:
            return
        option = self.options[index]
        lines = []
        for pool in (option.prefill, option.decode):
            env = " ".join(f"{key}={value}" for key, value in pool.env)
            lines.append(
                f"{pool.role}: {counted(pool.workers, 'worker')} of {pool.shape.gpus} GPUs, {pool.requests_per_s:,.2f} req/s\n"
                f"  {env + ' ' if env else ''}vllm serve <model> {shlex.join(pool.vllm_args)}"
            )
        lines.append(f"KV transfer per request: {option.kv_transfer_ms:,.1f} ms (included in TTFT)")
        lines += [f"warning: {warning}" for warning in option.warnings]
        lines += [f"note: {note}" for note in option.serving.notes]
        lines += [f"not measured: {part}" for part in option.serving.estimated_parts]
        self.pools.setPlainText("\n\n".join(lines))
