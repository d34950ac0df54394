"""End to end, from a real simulated agent (its own process, through the fleet service) to the fleet view:
the agent's seeded uncorrected ECC error crosses the wire, the sample gate, the one flatten, the bridge and
the newest-only values, and colours that GPU as alerting."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from gui_helpers import shown
from integration.remote.remote_agent_fixtures import local_fleet, short_temp_dir
from meshdeck.services.fleet import FleetService
from meshdeck.ui.views.fleet.view import FleetView

# The simulation's seed 13326 is a faulty server: its GPU 4 takes one uncorrected error 0.2 s after the
# first sample (meshdeck_agent.gpu.simulated); every other GPU stays at 0.
FAULTY_SEED, FAULTY_GPU = 13326, 4


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = short_temp_dir("mde-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fleet(tmp_path: Path, short_dir: Path) -> Iterator[FleetService]:
    with local_fleet(tmp_path, short_dir) as service:
        yield service


@pytest.mark.slow
def test_a_simulated_agents_ecc_error_colours_its_gpu_alerting(qtbot, console_context, fleet, short_dir) -> None:
    unsubscribe = fleet.subscribe(console_context.bridge.post)
    try:
        fleet.add_local(
            "sim-ecc",
            simulate="8xH200",
            socket=str(short_dir / "a.sock"),
            state_dir=str(short_dir / "state"),
            seed=FAULTY_SEED,
            interval_s=0.2,
        )
        view = FleetView(console_context)
        shown(qtbot, view, 1000, 600)
        view.set_metric("xid")
        top = len(view.canvas.colors) - 1

        def alerting() -> bool:
            view.refresh()
            cell = view.table.cell_of("sim-ecc", FAULTY_GPU)
            return cell is not None and view.canvas.bins[cell] == top

        qtbot.waitUntil(alerting, timeout=60000)
        table = view.table
        others = [table.cell_of("sim-ecc", gpu) for gpu in range(8) if gpu != FAULTY_GPU]
        assert [int(view.canvas.bins[cell]) for cell in others] == [0] * 7
        tip = view.describe_cell(table.cell_of("sim-ecc", FAULTY_GPU))
        assert "XID / ECC alerts: 1 (XID events 0, uncorrected ECC 1, corrected ECC " in tip
        assert console_context.live.is_simulated("sim-ecc")  # labelled simulated, as everything simulated is
    finally:
        unsubscribe()
