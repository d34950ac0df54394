"""Helpers shared by the console's tests (tests/gui is on sys.path: `from gui_helpers import ...`)."""

from __future__ import annotations

from typing import Any

from meshdeck.remote.events import HostStateChanged, InventoryReceived
from meshdeck_agent.wire_inventory import Inventory
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QWidget


def press(widget: QWidget, key: Qt.Key, modifiers: Qt.KeyboardModifier = Qt.KeyboardModifier.NoModifier) -> None:
    """A key press as the window system delivers it, so QShortcuts see it (QTest on a QWidget skips them)."""
    window = widget.window().windowHandle()
    assert window is not None, "show the window first"
    QTest.keyClick(window, key, modifiers)


def connect_hosts(qtbot: Any, context: Any, inventories: dict[str, dict[str, Any]]) -> None:
    """Post what a fleet would for hosts that connected and reported their inventory (wire dicts, decoded
    as the host supervisor decodes them); wait for delivery."""
    for host, inventory in inventories.items():
        context.bridge.post(HostStateChanged(host, "connecting"))
        context.bridge.post(HostStateChanged(host, "connected"))
        context.bridge.post(InventoryReceived(host, Inventory.from_wire(inventory)))
    qtbot.waitUntil(lambda: all(context.hosts.get(h).inventory is not None for h in inventories), timeout=30000)


def shown(qtbot: Any, widget: QWidget, width: int, height: int) -> QWidget:
    """`widget` at `width` x `height`, shown and exposed (painted at least once), closed after the test."""
    qtbot.addWidget(widget)
    widget.resize(width, height)
    widget.show()
    qtbot.waitExposed(widget)
    return widget
