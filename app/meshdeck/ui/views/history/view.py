"""The history view: a host and a time range from the store, drawn with the dashboard's own charts.

The store picks the tier by span (raw samples, 1-minute or 1-hour rollups) so a chart never reads
more than about a thousand points per series; the query runs as a job (a new one cancels the old)
and the tier it used is said above the charts. CSV export writes every point of the range, at the
tier chosen, as `-o` writes (services/files.py: a temporary file renamed into place for a regular file).

The source is this console's database or, for a fleet whose history lives in the operator's Prometheus
(every agent's exporter scraped), a Prometheus server's URL and the label that names hosts in its
scrape config (services/prometheus_history.py); the choice is kept in QSettings.

Show draws the range asked for and writes it in the from/to fields (a preset's "last hour" as the times it
read). The time keys (charts/navigation.py) zoom and shift that range and read it again (a finer tier when
zoomed in); Home goes back to the range asked for. The charts share one crosshair, and the deployments that
started or ended on the host in the range are markers on every chart (this console's records).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
from PySide6.QtCore import QDateTime, QSettings, QSignalBlocker, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDateTimeEdit,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from meshdeck.core.errors import InputError
from meshdeck.core.plural import counted
from meshdeck.services import history as history_service
from meshdeck.services import prometheus_history
from meshdeck.services.deployment_marks import DeploymentMark, deployment_marks
from meshdeck.services.files import open_output, output_target
from meshdeck.services.history import SeriesRange
from meshdeck.services.prometheus_history import PrometheusSource, shown_host
from meshdeck.ui.charts.crosshair import CrosshairGroup
from meshdeck.ui.charts.markers import deployment_marker
from meshdeck.ui.charts.navigation import SHORTCUT_HINT, TimeKeys, install_time_keys, shifted, zoomed
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
MIN_SPAN_S = 60.0  # the time keys zoom in to a minute at most
MAX_SPAN_S = 90 * 86400.0  # and out to the minute tier's default retention
EXPORT_TIERS = ("raw", "1m", "1h")
SOURCES = (("SQLite (this console)", "sqlite"), ("Prometheus", "prometheus"))
ChartReader = Callable[..., list[SeriesRange]]  # history_service.chart or prometheus_history.chart, source bound


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
        self.query_button.setToolTip(
            f"Read the range from the store and draw it. {SHORTCUT_HINT} (the range asked for)"
        )
        self.query_button.clicked.connect(self.query)
        self.reload_button = QPushButton("Hosts ↻")
        self.reload_button.setToolTip("Reload the hosts that have history")
        self.reload_button.clicked.connect(self.reload_hosts)
        self.export_tier = QComboBox()
        self.export_tier.addItems(EXPORT_TIERS)
        self.export_button = QPushButton("Export CSV…")
        self.export_button.setObjectName("historyExport")
        self.export_button.clicked.connect(self.export_csv)
        self.source = QComboBox()
        self.source.setObjectName("historySource")
        self.source.setAccessibleName("History source")
        for label, key in SOURCES:
            self.source.addItem(label, key)
        self.prometheus_url = QLineEdit()
        self.prometheus_url.setObjectName("historyPrometheusUrl")
        self.prometheus_url.setPlaceholderText("http://localhost:9090")
        self.prometheus_url.setAccessibleName("Prometheus URL")
        self.prometheus_host_label = QLineEdit(prometheus_history.DEFAULT_HOST_LABEL)
        self.prometheus_host_label.setObjectName("historyPrometheusHostLabel")
        self.prometheus_host_label.setToolTip("The scrape config's label that names each host")
        self.prometheus_host_label.setMaximumWidth(120)
        self.source.currentIndexChanged.connect(self._source_changed)
        self.prometheus_url.editingFinished.connect(self.reload_hosts)
        self.prometheus_host_label.editingFinished.connect(self.reload_hosts)
        self.status = QLabel("Choose a host and a range.")
        self.status.setObjectName("historyStatus")
        self.status.setWordWrap(True)

        source_bar = QHBoxLayout()
        source_widgets: tuple[QWidget, ...] = (
            QLabel("Source"),
            self.source,
            self.prometheus_url,
            QLabel("host label"),
            self.prometheus_host_label,
        )
        for source_widget in source_widgets:
            source_bar.addWidget(source_widget)
        source_bar.addStretch(1)
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
        self.crosshair = CrosshairGroup()
        for chart in self.charts.values():
            chart.join(self.crosshair)
        self.shown: tuple[float, float] | None = None  # the range drawn
        self._asked: tuple[int, float, float] | None = None  # the range choice and range Show was asked for
        self._time_keys = install_time_keys(self, TimeKeys(self.zoom, self.shift, self.back_to_asked))
        layout = QVBoxLayout(self)
        layout.addLayout(source_bar)
        layout.addLayout(bar)
        layout.addWidget(self.status)
        layout.addWidget(scroll, 1)
        self._range_changed()
        self._source_changed()

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

    def _source_changed(self) -> None:
        prometheus = self.source.currentData() == "prometheus"
        self.prometheus_url.setEnabled(prometheus)
        self.prometheus_host_label.setEnabled(prometheus)
        self.host.clear()
        self.reload_hosts()

    def prometheus_source(self) -> PrometheusSource | None:
        """The Prometheus chosen as the source (None: this console's database); InputError for a bad URL or label."""
        if self.source.currentData() != "prometheus":
            return None
        return PrometheusSource(self.prometheus_url.text(), host_label=self.prometheus_host_label.text().strip())

    def reload_hosts(self) -> None:
        try:
            source = self.prometheus_source()
        except InputError as exc:
            self.status.setText(
                str(exc) if self.prometheus_url.text().strip() else "Enter the Prometheus server's URL."
            )
            return
        if source is not None:
            job = self.context.jobs.start("history hosts", lambda _p: prometheus_history.prometheus_hosts(source))
            job.failed.connect(lambda message: self.status.setText(f"listing hosts failed: {message}"))
        else:
            db = self.context.db
            if db is None:
                return
            job = self.context.jobs.start(
                "history hosts", lambda _p: [h.host for h in history_service.history_hosts(db)]
            )
        job.succeeded.connect(self._hosts_loaded)

    def _hosts_loaded(self, names: list[str]) -> None:
        chosen = self.selected_host()
        self.host.clear()
        for name in names:  # a label value from a server: shown escaped and cut short, queried as it is
            self.host.addItem(shown_host(name), name)
        if chosen in names:
            self.host.setCurrentIndex(names.index(chosen))
        if not names and self.source.currentData() == "prometheus":
            self.status.setText("This Prometheus has scraped no meshdeck agent in the last 7 days.")
        elif not names:
            self.status.setText("No history yet: samples are stored as hosts report them.")
        else:
            self.status.setText("Choose a host and a range.")

    # ------------------------------------------------------------------ query

    def _reader(self) -> ChartReader | None:
        """The chosen source's chart function, or None (the status says why)."""
        try:
            source = self.prometheus_source()
        except InputError as exc:
            self.status.setText(str(exc))
            return None
        if source is not None:
            return lambda **query: prometheus_history.chart(source, **query)
        db = self.context.db
        if db is None:
            return None
        return lambda **query: history_service.chart(db, **query)

    def query(self) -> None:
        """Show: read the range chosen and draw it; the from/to fields say the range (Home comes back to it)."""
        since, until = self.time_range()
        self._asked = (self.range.currentIndex(), since, until)
        self._read(since, until)

    def _show_range(self, since: float, until: float) -> None:
        """The from/to fields show [since, until] (a preset's too: the times it was read for)."""
        for edit, ts in ((self.since, since), (self.until, until)):
            edit.setDateTime(QDateTime.fromSecsSinceEpoch(int(ts)))

    def _read(self, since: float, until: float) -> None:
        host = self.selected_host()
        read = self._reader() if host else None
        if read is None or not host:
            if not host:
                self.status.setText("Choose a host with history first.")
            return
        if until <= since:
            self.status.setText("The range must end after it starts.")
            return
        self._show_range(since, until)
        self.status.setText(f"reading {host} …")
        db = self.context.db

        def work(progress: Progress) -> tuple[HistoryFrame, list[DeploymentMark]]:
            ranges = []
            metrics = chart_metrics()
            for index, metric in enumerate(metrics):
                progress.check()
                progress.report(index / len(metrics), metric)
                ranges += read(host=host, metric=metric, since=since, until=until, max_points=MAX_POINTS)
            marks = deployment_marks(db, host, since, until) if db is not None else []
            return history_frame(host, ranges), marks

        job = self.context.jobs.start("history query", work)
        job.succeeded.connect(
            lambda result, since=since, until=until: self.show_frame(result[0], since, until, result[1])
        )
        job.failed.connect(lambda message: self.status.setText(f"query failed: {message}"))

    def show_frame(
        self, frame: HistoryFrame, since: float, until: float, marks: list[DeploymentMark] | None = None
    ) -> None:
        self.frame = frame
        self.shown = (since, until)
        points = int(np.isfinite(frame.values).sum())
        step = f", one point per {frame.step_s:g} s bucket (min and max)" if frame.tier != "raw" else ""
        self.status.setText(
            f"{frame.host}: {counted(len(frame.series), 'series', 'series')}, {counted(points, 'point')}"
            f" from the {frame.tier} tier{step}."
        )
        hosts = [frame.host]
        markers = [deployment_marker(mark) for mark in marks or []]
        for definition in DASHBOARD_CHARTS:
            chart = self.charts[definition.name]
            chart.set_curves(definition.curves(lambda _h: frame.series, hosts, Selection()))
            chart.update_data(lambda _host, ids: frame.rows(ids), since, until)
            chart.set_markers(markers)
        self.loaded.emit(frame)

    # ------------------------------------------------------------------ time keys

    def _keyed(self, since: float, until: float) -> None:
        """A range the time keys chose: shown as a custom range and read."""
        with QSignalBlocker(self.range):
            self.range.setCurrentIndex(self.range.findData(0.0))
        self.since.setEnabled(True)
        self.until.setEnabled(True)
        self._read(since, until)

    def zoom(self, factor: float) -> None:
        if self.shown is not None:
            self._keyed(*zoomed(*self.shown, factor, min_span=MIN_SPAN_S, max_span=MAX_SPAN_S))

    def shift(self, fraction: float) -> None:
        if self.shown is not None:
            self._keyed(*shifted(*self.shown, fraction, latest=max(time.time(), self.shown[1])))

    def back_to_asked(self) -> None:
        """Home: the range Show was asked for (a preset is read again up to now)."""
        if self._asked is None:
            return
        index, since, until = self._asked
        with QSignalBlocker(self.range):
            self.range.setCurrentIndex(index)
        self._range_changed()
        if float(self.range.currentData()) == 0.0:
            self._show_range(since, until)
        self.query()

    # ------------------------------------------------------------------ export

    def export_csv(self) -> None:
        host = self.selected_host()
        if (self.context.db is None and self.source.currentData() == "sqlite") or not host:
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
        try:
            source = self.prometheus_source()
        except InputError as exc:
            self.status.setText(f"export failed: {exc}")
            return

        def work(_progress: Progress) -> int:
            with open_output(output_target(target, option="export")) as out:
                if source is not None:
                    return prometheus_history.export_history(
                        source, out, host=host, since=since, until=until, fmt="csv", tier=tier
                    )
                assert db is not None
                return history_service.export_history(
                    db, out, host=host, since=since, until=until, fmt="csv", tier=tier
                )

        job = self.context.jobs.start("history export", work)
        job.succeeded.connect(lambda rows: self.status.setText(f"exported {counted(rows, 'row')} to {target}"))
        job.failed.connect(lambda message: self.status.setText(f"export failed: {message}"))

    # ------------------------------------------------------------------ settings

    def selected_host(self) -> str:
        """The chosen host's name as its source spells it (the combo box shows it escaped)."""
        data = self.host.currentData()
        return data if isinstance(data, str) else self.host.currentText()

    def save_settings(self, settings: QSettings) -> None:
        settings.setValue("history/source", self.source.currentData())
        # a basic-auth password is never written to the settings file: the URL is kept without it
        settings.setValue("history/prometheus_url", prometheus_history.url_without_password(self.prometheus_url.text()))
        settings.setValue("history/prometheus_host_label", self.prometheus_host_label.text())

    def restore_settings(self, settings: QSettings) -> None:
        self.prometheus_url.setText(str(settings.value("history/prometheus_url", "") or ""))
        label = str(settings.value("history/prometheus_host_label", "") or "")
        self.prometheus_host_label.setText(label or prometheus_history.DEFAULT_HOST_LABEL)
        index = self.source.findData(str(settings.value("history/source", "sqlite")))
        if index >= 0 and index != self.source.currentIndex():
            self.source.setCurrentIndex(index)  # reloads the hosts from it
        elif index >= 0:
            self.reload_hosts()
