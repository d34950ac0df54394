"""Hosts view benchmark at 278 hosts, offscreen. Prints (medians, no wall-time assertions):
- absorbing every host's connecting / connected / inventory events while the view is shown, and how many
  times every row was redrawn for it;
- one tick of the "last sample" age column (update + paint), against the same with 8 hosts (ratio);
- one host's state change (update + paint);
- the same events while the view is hidden (it should do nothing).

Measured on this 2-core machine before the view sized its columns once per redraw: connect-all 1.2 s with
279 full redraws, an age tick 5.3 s, one state change 3.3 s (ResizeToContents measured every row per
changed cell). Run: `pytest tests/benchmarks/test_bench_hosts_view.py -s`.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gui"))

from gui_helpers import bare_context, connect_all, simulated_inventory_wire
from meshdeck.remote.events import HostStateChanged, SamplesReceived
from meshdeck.services.synthetic_samples import sample_batch
from meshdeck.ui.views.hosts.view import HostsView
from meshdeck_agent.wire_inventory import Inventory
from wire_samples import wire_sample

REPEATS = 10


def _run(qapp, tmp_path: Path, inventory: Inventory, hosts: int) -> dict[str, float]:
    context = bare_context(str(tmp_path / f"hosts-{hosts}.ini"))
    try:
        view = HostsView(context)
        view.resize(1300, 900)
        view.show()
        qapp.processEvents()
        names = [f"gpu-node-{i:03d}" for i in range(hosts)]
        began, redraws = time.perf_counter(), view.redraws
        connect_all(context, inventory, names)
        qapp.processEvents()
        connected_in = time.perf_counter() - began
        full_redraws = view.redraws - redraws
        batch = sample_batch([wire_sample(1, time.time(), gpus=8, nvlinks=1, nics=1, workers=0)])
        for name in names:
            context.bridge.post(SamplesReceived(name, batch))
        while context.bridge.drain():
            pass
        ticks, changes = [], []
        for i in range(REPEATS):
            began = time.perf_counter()
            view._age_rows(time.time() + i + 1)  # what the view's timer does each second
            view.repaint()
            ticks.append(time.perf_counter() - began)
            began = time.perf_counter()
            context.bridge.post(HostStateChanged(names[(i * 7) % hosts], "degraded", "samples late"))
            context.bridge.drain()
            view.repaint()
            changes.append(time.perf_counter() - began)
        view.hide()
        qapp.processEvents()
        began, redraws, rows = time.perf_counter(), view.redraws, view.rows_drawn
        for name in names:
            context.bridge.post(HostStateChanged(name, "connected"))
        while context.bridge.drain():
            pass
        hidden = time.perf_counter() - began
        assert (view.redraws, view.rows_drawn) == (redraws, rows)
        view.close()
        return {
            "connect_all_ms": 1000 * connected_in,
            "full_redraws": full_redraws,
            "age_tick_ms": 1000 * statistics.median(ticks),
            "state_change_ms": 1000 * statistics.median(changes),
            "hidden_ms": 1000 * hidden,
        }
    finally:
        context.shutdown()


@pytest.mark.slow
def test_bench_hosts_view_278_hosts(qapp, tmp_path) -> None:
    inventory = Inventory.from_wire(simulated_inventory_wire())
    fleet = _run(qapp, tmp_path, inventory, 278)
    few = _run(qapp, tmp_path, inventory, 8)
    print(
        f"\nhosts view, 278 hosts: connect-all absorbed in {fleet['connect_all_ms']:.0f} ms"
        f" with {fleet['full_redraws']:.0f} full redraw(s)"
        f"\n  age tick {fleet['age_tick_ms']:.2f} ms (8 hosts: {few['age_tick_ms']:.2f} ms,"
        f" ratio {fleet['age_tick_ms'] / few['age_tick_ms']:.1f}×)"
        f"\n  one host's state change {fleet['state_change_ms']:.2f} ms (8 hosts: {few['state_change_ms']:.2f} ms)"
        f"\n  hidden: 278 state changes absorbed in {fleet['hidden_ms']:.1f} ms, no row drawn"
    )
