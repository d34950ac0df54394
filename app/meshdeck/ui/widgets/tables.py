"""Small builders the views share: a read-only row-selecting table, and the scrolling grid of charts."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtWidgets import QAbstractItemView, QGridLayout, QHeaderView, QScrollArea, QTableWidget, QWidget

from meshdeck.ui.charts.time_chart import TimeChart
from meshdeck.ui.views.dashboard.charts import ChartDefinition


def row_table(name: str, columns: Sequence[str], *, stretch_last: bool = True) -> QTableWidget:
    """A table of whole-row, single selection that the user cannot edit, sized to its contents."""
    table = QTableWidget(0, len(columns))
    table.setObjectName(name)
    table.setHorizontalHeaderLabels(list(columns))
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.verticalHeader().setVisible(False)
    table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    table.horizontalHeader().setStretchLastSection(stretch_last)
    return table


def chart_grid(definitions: Sequence[ChartDefinition], prefix: str) -> tuple[QScrollArea, dict[str, TimeChart]]:
    """One TimeChart per definition, two per row, in a scroll area; charts named `<prefix><name>`."""
    charts: dict[str, TimeChart] = {}
    grid_host = QWidget()
    grid = QGridLayout(grid_host)
    grid.setContentsMargins(4, 4, 4, 4)
    for position, definition in enumerate(definitions):
        chart = TimeChart(definition.title, definition.unit, mirrored=definition.mirrored)
        chart.setObjectName(f"{prefix}{definition.name}")
        charts[definition.name] = chart
        grid.addWidget(chart, position // 2, position % 2)
    scroll = QScrollArea()
    scroll.setWidgetResizable(True)
    scroll.setWidget(grid_host)
    return scroll, charts
