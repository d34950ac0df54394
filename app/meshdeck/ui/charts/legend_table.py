"""A chart's legend as a table, as Grafana's table legend: each curve's colour and name, its last value and its
minimum and maximum over the window shown. Click a row to hide or show its curve, Ctrl+click to show only it
(Ctrl+click it again: all of them); click a column's header to sort by it.

While the pointer is over any chart of the dashboard (the crosshair is shared), the "last" column holds
each curve's value at the pointer's time instead, its header saying which time, and the names' header is
the chart's readout: the curve nearest the pointer (or the highest) with its value.

The model keeps numbers, not text: a refresh hands it three arrays (one `dataChanged`), and only the rows
on screen are formatted when they are painted. Names from a server are shown escaped and cut short.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
    Signal,
)
from PySide6.QtGui import QColor, QFont, QGuiApplication, QIcon, QPainter, QPalette, QPen, QPixmap
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QWidget

from meshdeck.core.text import printable
from meshdeck.ui.charts.navigation import SHORTCUT_HINT

ROWS_SHOWN = 4  # rows the legend is tall enough for; more scroll
LABEL, LAST, MINIMUM, MAXIMUM = range(4)
HEADERS = ("", "last", "min", "max")
LEGEND_HELP = "Click a row: hide or show its curve · Ctrl+click: show only it (again: all) · click a header: sort"
Index = QModelIndex | QPersistentModelIndex


@dataclass(frozen=True)
class LegendRow:
    """One curve of the legend: its name (host, device, direction), colour and line style."""

    label: str
    color: str
    dashed: bool = False


def _swatch(color: str, dashed: bool, hidden: bool) -> QIcon:
    """A short line in the curve's colour and style (hollow when the curve is hidden)."""
    pixmap = QPixmap(18, 10)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    pen = QPen(QColor(color), 3)
    if dashed:
        pen.setStyle(Qt.PenStyle.DashLine)
        pen.setWidth(2)
    if hidden:
        pen.setWidth(1)
    painter.setPen(pen)
    painter.drawLine(1, 5, 17, 5)
    painter.end()
    return QIcon(pixmap)


class LegendModel(QAbstractTableModel):
    """Rows of curves with their last / min / max (raw units), formatted by `format_value` when painted."""

    def __init__(self, format_value: Callable[[float], str]) -> None:
        super().__init__()
        self.format_value = format_value
        self.rows: list[LegendRow] = []
        self.hidden: set[int] = set()
        self.last = np.empty(0)
        self.minimum = np.empty(0)
        self.maximum = np.empty(0)
        self.at_label = ""  # "at 15:36:12" while a crosshair is shown: `last` holds the values at that time
        self.readout = ""  # the names' header: the chart's readout under the crosshair
        self._icons: dict[tuple[str, bool, bool], QIcon] = {}
        self._labels: list[str] = []

    # ------------------------------------------------------------------ contents

    def set_rows(self, rows: Sequence[LegendRow], hidden: set[int]) -> None:
        self.beginResetModel()
        self.rows = list(rows)
        self._labels = [printable(row.label, 120) for row in self.rows]
        self.hidden = set(hidden)
        nan = np.full(len(self.rows), np.nan)
        self.last, self.minimum, self.maximum = nan, nan.copy(), nan.copy()
        self.endResetModel()

    def set_values(self, last: np.ndarray, minimum: np.ndarray, maximum: np.ndarray) -> None:
        """New numbers for every row (NaN: none); one dataChanged, only when one of them changed."""
        if (
            np.array_equal(last, self.last, equal_nan=True)
            and np.array_equal(minimum, self.minimum, equal_nan=True)
            and np.array_equal(maximum, self.maximum, equal_nan=True)
        ):
            return
        self.last, self.minimum, self.maximum = last, minimum, maximum
        if self.rows:
            self.dataChanged.emit(self.index(0, LAST), self.index(len(self.rows) - 1, MAXIMUM))

    def set_at(self, label: str, values: np.ndarray | None) -> None:
        """Show the values at the crosshair's time in the "last" column (`label` empty: the last ones again)."""
        if label != self.at_label:
            self.at_label = label
            self.headerDataChanged.emit(Qt.Orientation.Horizontal, LAST, LAST)
        if values is not None and not np.array_equal(values, self.last, equal_nan=True):
            self.last = values
            if self.rows:
                self.dataChanged.emit(self.index(0, LAST), self.index(len(self.rows) - 1, LAST))

    def set_readout(self, text: str) -> None:
        if text != self.readout:
            self.readout = text
            self.headerDataChanged.emit(Qt.Orientation.Horizontal, LABEL, LABEL)

    def set_hidden(self, hidden: set[int]) -> None:
        if hidden != self.hidden:
            self.hidden = set(hidden)
            if self.rows:
                self.dataChanged.emit(self.index(0, LABEL), self.index(len(self.rows) - 1, MAXIMUM))

    # ------------------------------------------------------------------ Qt model

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 (Qt's signature)
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(HEADERS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if orientation != Qt.Orientation.Horizontal:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            if section == LABEL and self.readout:
                return self.readout
            return self.at_label if section == LAST and self.at_label else HEADERS[section]
        if role == Qt.ItemDataRole.TextAlignmentRole and section == LABEL:
            return int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ToolTipRole:
            return (
                LEGEND_HELP,
                "the newest value in the window (under the crosshair: the value at its time)",
                "the lowest value in the window shown",
                "the highest value in the window shown",
            )[section]
        return None

    def _number(self, row: int, column: int) -> float:
        values = (self.last, self.minimum, self.maximum)[column - LAST]
        return float(values[row]) if row < values.shape[0] else math.nan

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid():
            return None
        row, column = index.row(), index.column()
        spec = self.rows[row]
        hidden = row in self.hidden
        if role == Qt.ItemDataRole.DisplayRole:
            return self._labels[row] if column == LABEL else self.format_value(self._number(row, column))
        if role == Qt.ItemDataRole.UserRole:  # what a column sorts by
            if column == LABEL:
                return row
            value = self._number(row, column)
            return value if math.isfinite(value) else -math.inf
        if role == Qt.ItemDataRole.DecorationRole and column == LABEL:
            key = (spec.color, spec.dashed, hidden)
            icon = self._icons.get(key)
            if icon is None:
                icon = self._icons[key] = _swatch(*key)
            return icon
        if role == Qt.ItemDataRole.ForegroundRole and hidden:
            return QGuiApplication.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text)
        if role == Qt.ItemDataRole.FontRole and hidden:
            font = QFont()
            font.setStrikeOut(True)
            return font
        if role == Qt.ItemDataRole.TextAlignmentRole and column != LABEL:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ToolTipRole:
            state = "hidden: click to show" if hidden else "click to hide, Ctrl+click to show only this one"
            return f"{self._labels[row]} — {state}"
        return None


class LegendTable(QTableView):
    """The table under a chart; `toggled(row, only)` when a row is clicked (`only`: Ctrl+click)."""

    toggled = Signal(int, bool)

    def __init__(self, format_value: Callable[[float], str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chartLegend")
        self.model_ = LegendModel(format_value)
        self.proxy = QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.model_)
        self.proxy.setSortRole(Qt.ItemDataRole.UserRole)
        self.setModel(self.proxy)
        self.setSortingEnabled(True)
        self.sortByColumn(-1, Qt.SortOrder.AscendingOrder)  # the curves' own order until a header is clicked
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.setShowGrid(False)
        self.setWordWrap(False)
        self.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # host names differ at their ends
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.verticalHeader().setVisible(False)
        row_height = self.fontMetrics().height() + 2
        self.verticalHeader().setDefaultSectionSize(row_height)
        self.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        header = self.horizontalHeader()
        header.setSectionResizeMode(LABEL, QHeaderView.ResizeMode.Stretch)
        number_width = self.fontMetrics().horizontalAdvance("−888.8 GiB/s ") + 8
        for column in (LAST, MINIMUM, MAXIMUM):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Fixed)
            header.resizeSection(column, number_width)
        header.setHighlightSections(False)
        self.setToolTip(f"{LEGEND_HELP}\n{SHORTCUT_HINT}")
        self.clicked.connect(self._clicked)
        self._fit_height()

    def set_rows(self, rows: Sequence[LegendRow], hidden: set[int]) -> None:
        self.model_.set_rows(rows, hidden)
        self._fit_height()

    def _fit_height(self) -> None:
        rows = len(self.model_.rows)
        shown = min(max(rows, 1), ROWS_SHOWN)
        height = self.horizontalHeader().sizeHint().height() + shown * self.verticalHeader().defaultSectionSize() + 4
        self.setFixedHeight(height)
        self.setVisible(rows > 0)

    def source_row(self, view_row: int) -> int:
        return self.proxy.mapToSource(self.proxy.index(view_row, 0)).row()

    def labels(self) -> list[str]:
        """The rows' names in the curves' order (not the sorted order)."""
        return [row.label for row in self.model_.rows]

    def _clicked(self, index: QModelIndex) -> None:
        row = self.proxy.mapToSource(index).row()
        only = bool(QGuiApplication.keyboardModifiers() & Qt.KeyboardModifier.ControlModifier)
        self.toggled.emit(row, only)
