"""The window's menu bar and its help: File (Quit, Ctrl+Q), View (each view, Ctrl+1..9, next / previous),
Help (Keyboard shortcuts on `?` and F1, About).

The shortcuts help is read from the window itself — its menus' actions and every view's QShortcut (its
`whatsThis` says what it does) — so a shortcut a view adds shows up without a list to keep in step.
"""

from __future__ import annotations

import html
import platform
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from PySide6 import __version__ as pyside_version
from PySide6.QtCore import qVersion
from PySide6.QtGui import QAction, QActionGroup, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QMenu,
    QMessageBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from meshdeck import __version__

if TYPE_CHECKING:
    from meshdeck.ui.main_window import MainWindow

WINDOW = "Everywhere"
UNDESCRIBED = "(no description)"
PAUSE_NOTE = (
    "The dashboard's Pause is Ctrl+Shift+P: Ctrl+P is Print in every desktop application, and Space presses "
    "the focused button (the keyboard's way to use buttons and check boxes). Typing in a text field never "
    "triggers a single-key shortcut such as ?."
)
# Keys the widgets handle themselves (no QShortcut to read them from).
WIDGET_KEYS = (
    ("Views list", "Up / Down", "Previous / next view (when the list has the focus)"),
    ("Dialogs", "Esc", "Close the dialog without doing anything"),
)


@dataclass(frozen=True)
class ShortcutRow:
    where: str  # WINDOW, or the view's title
    keys: str  # as this platform writes them
    action: str


def build_menu_bar(window: MainWindow) -> None:
    """File, View and Help on the window's menu bar (the View entries replace bare QShortcuts)."""
    bar = window.menuBar()
    file_menu = bar.addMenu("&File")
    quit_action = _action(window, "&Quit", ["Ctrl+Q"], window.request_quit, "quitAction")
    quit_action.setMenuRole(QAction.MenuRole.QuitRole)
    file_menu.addAction(quit_action)

    view_menu = bar.addMenu("&View")
    group = QActionGroup(window)
    for index, entry in enumerate(window.views):
        keys = [f"Ctrl+{index + 1}"] if index < 9 else []
        action = _action(
            window, entry.title, keys, lambda _=False, i=index: window.show_view_at(i), f"view-{entry.key}"
        )
        action.setCheckable(True)
        action.setWhatsThis(f"Show {entry.title}")  # the shortcuts help's words for it
        group.addAction(action)
        view_menu.addAction(action)
    window.navigation.currentRowChanged.connect(lambda row: _check(group, row))
    view_menu.addSeparator()
    view_menu.addAction(_action(window, "&Next view", ["Ctrl+PgDown"], lambda: window.step_view(1), "nextView"))
    view_menu.addAction(_action(window, "&Previous view", ["Ctrl+PgUp"], lambda: window.step_view(-1), "previousView"))

    help_menu = bar.addMenu("&Help")
    shortcuts = _action(window, "&Keyboard shortcuts", ["?", "F1"], lambda: show_shortcuts(window), "shortcutsAction")
    help_menu.addAction(shortcuts)
    about = _action(window, "&About meshdeck", [], lambda: show_about(window), "aboutAction")
    about.setMenuRole(QAction.MenuRole.AboutRole)
    help_menu.addAction(about)


def _action(window: QWidget, text: str, keys: list[str], slot: object, name: str) -> QAction:
    action = QAction(text, window)
    action.setObjectName(name)
    action.setShortcuts([QKeySequence(key) for key in keys])
    action.triggered.connect(slot)
    window.addAction(action)  # its shortcut works wherever the focus is in the window
    return action


def _check(group: QActionGroup, row: int) -> None:
    actions = group.actions()
    if 0 <= row < len(actions):
        actions[row].setChecked(True)


def _keys(sequences: list[QKeySequence]) -> str:
    return ", ".join(sequence.toString(QKeySequence.SequenceFormat.NativeText) for sequence in sequences)


def shortcut_rows(window: MainWindow) -> list[ShortcutRow]:
    """Every keyboard shortcut of the window: the menus' actions, then each view's shortcuts and actions."""
    rows: list[ShortcutRow] = []
    menu_actions: set[QAction] = set()
    for menu in window.menuBar().findChildren(QMenu):
        for action in menu.actions():
            menu_actions.add(action)
            if action.shortcuts():
                rows.append(ShortcutRow(WINDOW, _keys(action.shortcuts()), action.whatsThis() or action.iconText()))
    in_views: set[QShortcut] = set()
    for entry in window.views:
        for shortcut in entry.widget.findChildren(QShortcut):
            in_views.add(shortcut)
            if not shortcut.key().isEmpty():
                rows.append(ShortcutRow(entry.title, _keys(shortcut.keys()), shortcut.whatsThis() or UNDESCRIBED))
        for action in entry.widget.findChildren(QAction):
            if action.shortcuts() and action not in menu_actions:
                rows.append(ShortcutRow(entry.title, _keys(action.shortcuts()), action.iconText()))
    for shortcut in window.findChildren(QShortcut):  # the window's own, outside any view
        if shortcut not in in_views and not shortcut.key().isEmpty():
            rows.append(ShortcutRow(WINDOW, _keys(shortcut.keys()), shortcut.whatsThis() or UNDESCRIBED))
    rows += [ShortcutRow(*keys) for keys in WIDGET_KEYS]
    return _merged(rows)


def _merged(rows: list[ShortcutRow]) -> list[ShortcutRow]:
    """One row per action of a place, its keys joined (zoom in: +, =, Ctrl++); undescribed ones stay apart."""
    merged: dict[tuple[str, str] | int, ShortcutRow] = {}
    for index, row in enumerate(rows):
        key: tuple[str, str] | int = index if row.action == UNDESCRIBED else (row.where, row.action)
        known = merged.get(key)
        merged[key] = row if known is None else replace(known, keys=f"{known.keys}, {row.keys}")
    return list(merged.values())


class ShortcutsDialog(QDialog):
    """Every shortcut in a table (where, keys, what it does), and why Pause is where it is."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.setObjectName("shortcutsDialog")
        self.setWindowTitle("Keyboard shortcuts")
        self.table = QTableWidget(0, 3)
        self.table.setObjectName("shortcutsTable")
        self.table.setHorizontalHeaderLabels(["Where", "Keys", "Action"])
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        note = QLabel(PAUSE_NOTE)
        note.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table)
        layout.addWidget(note)
        layout.addWidget(buttons)
        self.resize(680, 640)
        self.refresh(window)

    def refresh(self, window: MainWindow) -> None:
        rows = shortcut_rows(window)
        self.table.setRowCount(len(rows))
        for index, row in enumerate(rows):
            for column, text in enumerate((row.where, row.keys, row.action)):
                self.table.setItem(index, column, QTableWidgetItem(text))
        self.table.resizeColumnsToContents()

    def rows(self) -> list[tuple[str, ...]]:
        """The table's text, row by row (where, keys, action)."""
        cells = [[self.table.item(row, column) for column in range(3)] for row in range(self.table.rowCount())]
        return [tuple(cell.text() if cell is not None else "" for cell in row) for row in cells]


def show_shortcuts(window: MainWindow) -> ShortcutsDialog:
    dialog = window.findChild(ShortcutsDialog)
    if dialog is None:
        dialog = ShortcutsDialog(window)
    else:
        dialog.refresh(window)
    dialog.show()
    dialog.raise_()
    dialog.activateWindow()
    return dialog


def show_about(window: MainWindow) -> None:
    db = window.context.db
    where = f"<br>Database: {html.escape(str(db.path))}" if db is not None and hasattr(db, "path") else ""
    QMessageBox.about(
        window,
        "About meshdeck",
        f"<b>meshdeck {__version__}</b><br>Plan, launch and watch DeepSeek on GPU servers with vLLM."
        f"<br><br>Qt {qVersion()} · PySide6 {pyside_version} · Python {platform.python_version()}{where}"
        "<br><br>Keyboard shortcuts: press ? (Help &gt; Keyboard shortcuts).",
    )
