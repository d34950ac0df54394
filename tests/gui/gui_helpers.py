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


def simulated_inventory_wire() -> dict[str, Any]:
    """A real simulated agent's inventory (`meshdeck-agent inventory --simulate 8xH200 --json`)."""
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "meshdeck_agent", "inventory", "--simulate", "8xH200", "--json"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    return json.loads(out)


def bare_context(settings_file: str) -> Any:
    """A ConsoleContext without fleet or database (views fed by posting events to its bridge); the caller
    shuts it down."""
    from meshdeck.ui.bridge import FleetBridge
    from meshdeck.ui.context import ConsoleContext
    from meshdeck.ui.jobs import JobRunner
    from PySide6.QtCore import QSettings

    return ConsoleContext(
        fleet=None,
        db=None,
        bridge=FleetBridge(),
        jobs=JobRunner(),
        settings=QSettings(settings_file, QSettings.Format.IniFormat),
    )


def connect_all(context: Any, inventory: Inventory, names: list[str]) -> None:
    """Every host of `names` connecting, connected and reporting `inventory`, delivered at once."""
    for name in names:
        context.bridge.post(HostStateChanged(name, "connecting"))
        context.bridge.post(HostStateChanged(name, "connected"))
        context.bridge.post(InventoryReceived(name, inventory))
    while context.bridge.drain():
        pass
