"""The history view: a host and a time range from the store, drawn with the dashboard's own charts.

The store picks the tier by span (raw samples, 1-minute or 1-hour rollups) so a chart never reads
more than about a thousand points per series; the query runs as a job (a new one cancels the old)
and the tier it used is said above the charts. CSV export writes every point of the range, at the
tier chosen, as `-o` writes (services/files.py: a temporary file renamed into place for a regular file).
"""

from __future__ import annotations

import logging
import time

import numpy as np
from PySide6.QtCore import QDateTime, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDateTimeEdit,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from meshdeck.services import history as history_service
from meshdeck.services.files import open_output, output_target
from meshdeck.services.history import HostHistory
from meshdeck.ui.context import ConsoleContext
from meshdeck.ui.jobs import Progress
from meshdeck.ui.views.dashboard.charts import DASHBOARD_CHARTS, KV_USAGE_METRICS, Selection
from meshdeck.ui.views.history.data import HistoryFrame, history_frame
from meshdeck.ui.widgets.tables import chart_grid

log = logging.getLogger(__name__)

RANGES: tuple[tuple[str, float], ...] = (
    ("last 15 min", 900.0),
    ("last hour", 3600.0),
    ("last 6 hours", 6 * 3600.0),
    ("last 24 hours", 86400.0),
    ("last 7 days", 7 * 86400.0),
    ("custom", 0.0),
)
MAX_POINTS = 1000
EXPORT_TIERS = ("raw", "1m", "1h")


def chart_metrics() -> list[str]:
    names = [pick.metric for definition in DASHBOARD_CHARTS for pick in definition.picks]
    return list(dict.fromkeys([*names, *KV_USAGE_METRICS]))


class HistoryView(QWidget):
    loaded = Signal(object)  # HistoryFrame

    def __init__(self, context: ConsoleContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("historyView")
        self.context = context
        self.frame: HistoryFrame | None = None
        self.host = QComboBox()
        self.host.setObjectName("historyHost")
        self.host.setAccessibleName("Host")
        self.range = QComboBox()
        self.range.setObjectName("historyRange")
        for label, seconds in RANGES:
            self.range.addItem(label, seconds)
        self.range.setCurrentIndex(1)
        self.since = QDateTimeEdit()
        self.until = QDateTimeEdit()
        for edit in (self.since, self.until):
            edit.setCalendarPopup(True)
            edit.setDisplayFormat("yyyy-MM-dd HH:mm:ss")
        self.range.currentIndexChanged.connect(self._range_changed)
        self.query_button = QPushButton("Show")
        self.query_button.setObjectName("historyQuery")
        self.query_button.clicked.connect(self.query)
        self.reload_button = QPushButton("Hosts ↻")
        self.reload_button.setToolTip("Reload the hosts that have history")
        self.reload_button.clicked.connect(self.reload_hosts)
        self.export_tier = QComboBox()
        self.export_tier.addItems(EXPORT_TIERS)
        self.export_button = QPushButton("Export CSV…")
        self.export_button.setObjectName("historyExport")
        self.export_button.clicked.connect(self.export_csv)
        self.status = QLabel("Choose a host and a range.")
        self.status.setObjectName("historyStatus")
        self.status.setWordWrap(True)

        bar = QHBoxLayout()
        for widget in (QLabel("Host"), self.host, self.reload_button, QLabel("Range"), self.range, self.since):
            bar.addWidget(widget)
        bar.addWidget(QLabel("to"))
        bar.addWidget(self.until)
        bar.addWidget(self.query_button)
        bar.addStretch(1)
        bar.addWidget(self.export_tier)
        bar.addWidget(self.export_button)
        scroll, self.charts = chart_grid(DASHBOARD_CHARTS, "history_")
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.status)
        layout.addWidget(scroll, 1)
        self._range_changed()
        self.reload_hosts()

    # ------------------------------------------------------------------ inputs

    def _range_changed(self) -> None:
        seconds = float(self.range.currentData())
        custom = seconds == 0.0
        self.since.setEnabled(custom)
        self.until.setEnabled(custom)
        if not custom:
            now = QDateTime.currentDateTime()
            self.until.setDateTime(now)
            self.since.setDateTime(now.addSecs(-int(seconds)))

    def time_range(self) -> tuple[float, float]:
        seconds = float(self.range.currentData())
        if seconds:
            until = time.time()
            return until - seconds, until
        return self.since.dateTime().toSecsSinceEpoch(), self.until.dateTime().toSecsSinceEpoch()

    def reload_hosts(self) -> None:
        db = self.context.db
        if db is None:
            return
        job = self.context.jobs.start("history hosts", lambda _p: history_service.history_hosts(db))
        job.succeeded.connect(self._hosts_loaded)

    def _hosts_loaded(self, hosts: list[HostHistory]) -> None:
        chosen = self.host.currentText()
        names = [h.host for h in hosts]
        self.host.clear()
        self.host.addItems(names)
        if chosen in names:
            self.host.setCurrentText(chosen)
        if not names:
            self.status.setText("No history yet: samples are stored as hosts report them.")

    # ------------------------------------------------------------------ query

    def query(self) -> None:
        db, host = self.context.db, self.host.currentText()
        if db is None or not host:
            self.status.setText("Choose a host with history first.")
            return
        since, until = self.time_range()
        if until <= since:
            self.status.setText("The range must end after it starts.")
            return
        self.status.setText(f"reading {host} …")

        def work(progress: Progress) -> HistoryFrame:
            ranges = []
            metrics = chart_metrics()
            for index, metric in enumerate(metrics):
                progress.check()
                progress.report(index / len(metrics), metric)
                ranges += history_service.chart(
                    db, host=host, metric=metric, since=since, until=until, max_points=MAX_POINTS
                )
            return history_frame(host, ranges)

        job = self.context.jobs.start("history query", work)
        job.succeeded.connect(lambda frame, since=since, until=until: self.show_frame(frame, since, until))
        job.failed.connect(lambda message: self.status.setText(f"query failed: {message}"))

    def show_frame(self, frame: HistoryFrame, since: float, until: float) -> None:
        self.frame = frame
        points = int(np.isfinite(frame.values).sum())
        step = f", one point per {frame.step_s:g} s bucket (min and max)" if frame.tier != "raw" else ""
        self.status.setText(
            f"{frame.host}: {len(frame.series)} series, {points:,} points from the {frame.tier} tier{step}."
        )
        hosts = [frame.host]
        for definition in DASHBOARD_CHARTS:
            chart = self.charts[definition.name]
            chart.set_curves(definition.curves(lambda _h: frame.series, hosts, Selection()))
            chart.update_data(lambda _host, ids: frame.rows(ids), since, until)
        self.loaded.emit(frame)

    # ------------------------------------------------------------------ export

    def export_csv(self) -> None:
        db, host = self.context.db, self.host.currentText()
        if db is None or not host:
            self.status.setText("Choose a host with history first.")
            return
        since, until = self.time_range()
        tier = self.export_tier.currentText()
        stamp = time.strftime("%Y%m%d-%H%M", time.localtime(since))
        target, _ = QFileDialog.getSaveFileName(self, "Export history", f"{host}-{stamp}-{tier}.csv", "CSV (*.csv)")
        if target:
            self.export_to(target, host, since, until, tier)

    def export_to(self, target: str, host: str, since: float, until: float, tier: str) -> None:
        db = self.context.db
        assert db is not None

        def work(_progress: Progress) -> int:
            with open_output(output_target(target, option="export")) as out:
                return history_service.export_history(
                    db, out, host=host, since=since, until=until, fmt="csv", tier=tier
                )

        job = self.context.jobs.start("history export", work)
        job.succeeded.connect(lambda rows: self.status.setText(f"exported {rows:,} rows to {target}"))
        job.failed.connect(lambda message: self.status.setText(f"export failed: {message}"))
