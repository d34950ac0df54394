"""The hosts view with hundreds of hosts: hosts arriving together are drawn once, not once each; a
change redraws only its row; the per-second age column never makes the table measure every row; a
hidden view does nothing and catches up once when shown."""

from __future__ import annotations

import time

from gui_helpers import connect_all, shown
from meshdeck.remote.events import HostStateChanged, SamplesReceived
from meshdeck.services.synthetic_samples import sample_batch
from meshdeck.ui.views.hosts.view import AGE_COLUMN, REASON_COLUMN, STATE_COLUMN, UTIL_COLUMN, VRAM_COLUMN, HostsView
from meshdeck_agent.wire_inventory import Inventory
from PySide6.QtWidgets import QHeaderView
from wire_samples import wire_sample

HOSTS = 60


def _view(qtbot, context) -> HostsView:
    view = HostsView(context)
    shown(qtbot, view, 1200, 600)
    return view


def _connect_all(context, inventory: dict, names: list[str]) -> None:
    connect_all(context, Inventory.from_wire(inventory), names)


def test_hosts_that_connect_together_are_drawn_once_not_once_each(qtbot, console_context, simulated_inventory) -> None:
    view = _view(qtbot, console_context)
    before = view.redraws
    names = [f"gpu-node-{i:03d}" for i in range(HOSTS)]
    _connect_all(console_context, simulated_inventory, names)
    qtbot.waitUntil(lambda: view.table.rowCount() == HOSTS, timeout=10000)
    assert view.redraws - before <= 2  # was one full redraw per host that came
    assert [view.table.item(row, 0).text() for row in range(HOSTS)] == names
    assert {view.table.item(row, STATE_COLUMN).text() for row in range(HOSTS)} == {"connected"}


def test_a_state_change_redraws_its_row_only(qtbot, console_context, simulated_inventory) -> None:
    view = _view(qtbot, console_context)
    names = [f"gpu-node-{i:03d}" for i in range(HOSTS)]
    _connect_all(console_context, simulated_inventory, names)
    qtbot.waitUntil(lambda: view.table.rowCount() == HOSTS, timeout=10000)
    redraws, rows = view.redraws, view.rows_drawn
    console_context.bridge.post(HostStateChanged("gpu-node-017", "degraded", "samples late"))
    console_context.bridge.drain()
    assert view.table.item(17, STATE_COLUMN).text() == "degraded"
    assert view.table.item(17, REASON_COLUMN).text() == "samples late"
    assert view.redraws == redraws and view.rows_drawn == rows + 1


def test_the_age_column_never_makes_the_table_measure_every_row(qtbot, console_context, simulated_inventory) -> None:
    """ResizeToContents measured all rows on every changed cell: 5 s per age tick at 278 hosts (measured)."""
    view = _view(qtbot, console_context)
    names = [f"gpu-node-{i:03d}" for i in range(HOSTS)]
    _connect_all(console_context, simulated_inventory, names)
    qtbot.waitUntil(lambda: view.table.rowCount() == HOSTS, timeout=10000)
    batch = sample_batch([wire_sample(1, time.time(), gpus=8, nvlinks=1, nics=0, workers=0)])
    for name in names:
        console_context.bridge.post(SamplesReceived(name, batch))
    console_context.bridge.drain()
    header = view.table.horizontalHeader()
    modes = [header.sectionResizeMode(column) for column in range(view.table.columnCount())]
    assert QHeaderView.ResizeMode.ResizeToContents not in modes
    view._age_rows(time.time() + 5)
    first_visible = view.table.item(0, AGE_COLUMN).text()
    assert first_visible.endswith("s ago") and int(first_visible.split()[0]) >= 4
    width = view.table.fontMetrics().horizontalAdvance("gpu-node-000")
    qtbot.waitUntil(lambda: header.sectionSize(0) >= width, timeout=5000)  # sized once the rows came, to fit


def test_a_hidden_hosts_view_does_nothing_and_catches_up_once_when_shown(
    qtbot, console_context, simulated_inventory
) -> None:
    view = _view(qtbot, console_context)
    view.hide()
    redraws, rows = view.redraws, view.rows_drawn
    names = [f"gpu-node-{i:03d}" for i in range(HOSTS)]
    _connect_all(console_context, simulated_inventory, names)
    assert (view.redraws, view.rows_drawn) == (redraws, rows)
    assert not view._ages.isActive()
    view.show()
    qtbot.waitUntil(lambda: view.table.rowCount() == HOSTS, timeout=10000)
    assert view.redraws == redraws + 1 and view._ages.isActive()


def test_a_host_chosen_while_the_view_is_hidden_is_selected_when_it_is_shown(
    qtbot, console_context, simulated_inventory
) -> None:
    view = _view(qtbot, console_context)
    view.hide()
    _connect_all(console_context, simulated_inventory, ["gpu-a", "gpu-b", "gpu-c"])
    view.select_host("gpu-b")  # what a click in the fleet view does
    view.show()
    qtbot.waitUntil(lambda: view.table.rowCount() == 3, timeout=10000)
    assert view.selected() == "gpu-b"


def _loaded_sample(seq: int, ts: float) -> dict:
    """8 GPUs at 0, 10, ..., 70 % utilization, each using 100 of 140 GiB."""
    sample = wire_sample(seq, ts, gpus=8, nvlinks=1, nics=0, workers=0)
    for index, gpu in enumerate(sample["gpus"]):
        gpu.update(utilization_pct=10.0 * index, memory_used_bytes=100 * 2**30, memory_total_bytes=140 * 2**30)
    return sample


def test_each_hosts_gpu_load_is_read_once_per_delivery_pass_and_never_while_hidden(
    qtbot, console_context, simulated_inventory
) -> None:
    """nvitop's header per host: utilization mean and max, VRAM used / total, from the live rings the fleet
    view reads; three batches of one host in one pass are one read, and a hidden view reads nothing."""
    view = _view(qtbot, console_context)
    names = [f"gpu-node-{i:03d}" for i in range(HOSTS)]
    _connect_all(console_context, simulated_inventory, names)
    qtbot.waitUntil(lambda: view.table.rowCount() == HOSTS, timeout=10000)
    assert view.table.item(5, UTIL_COLUMN).text() == "—"  # no sample yet
    reads, rows = view.loads.reads, view.rows_drawn
    now = time.time()
    for seq in (1, 2, 3):
        batch = sample_batch([_loaded_sample(seq, now + seq)])
        for name in names:
            console_context.bridge.post(SamplesReceived(name, batch))
    while console_context.bridge.drain():
        pass
    qtbot.waitUntil(lambda: view.table.item(HOSTS - 1, UTIL_COLUMN).text() != "—", timeout=10000)
    assert {view.table.item(row, UTIL_COLUMN).text() for row in range(HOSTS)} == {"35 % (max 70 %)"}
    assert {view.table.item(row, VRAM_COLUMN).text() for row in range(HOSTS)} == {"800 / 1,120 GiB (71 %)"}
    assert view.loads.reads - reads == HOSTS  # one read a host, not one a batch
    assert view.rows_drawn == rows  # the rest of the row is left alone

    view.hide()
    reads = view.loads.reads
    batch = sample_batch([_loaded_sample(4, now + 4)])
    for name in names:
        console_context.bridge.post(SamplesReceived(name, batch))
    while console_context.bridge.drain():
        pass
    qtbot.wait(10)
    assert view.loads.reads == reads  # hidden: nothing read
    view.show()
    assert view.loads.reads == reads + HOSTS  # shown: each host's newest load, once
