"""The processes view: per host and GPU, which processes hold it (nvitop's columns and the meshdeck deployment),
refreshed while shown with one request in flight per host, server text escaped, an old agent said too old."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from gui_helpers import connect_hosts, shown
from meshdeck.remote.errors import RpcError
from meshdeck.ui.views.processes import ProcessesView
from meshdeck_agent.protocol import GpuProcesses, GpuProcessInfo, ProcessListing, ProcessWorker

GIB = 1 << 30
INVENTORY = {"simulated": True, "gpus": [{"index": 0}, {"index": 1}]}
LISTING = ProcessListing(
    ts=1_764_480_000.0,
    simulated=True,
    gpus=(
        GpuProcesses(0, "GPU-0", (
            GpuProcessInfo(4242, "compute", 70 * GIB, 1000, "alice\x1b[31m", "vllm serve \x1b[2Jdeepseek-ai/DeepSeek",
                           False, ProcessWorker("ds32-0101-ab12.vllm-node0", "meshdeck:ds32-0101-ab12:0:vllm-node0")),
        )),
        GpuProcesses(1, "GPU-1", ()),
    ),
)  # fmt: skip


class FakeFleet:
    """What the view's poller asks: `call` (gpu-b blocks until released, as a slow host) and `status`."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.lock = threading.Lock()
        self.slow = threading.Event()

    def call(self, host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        assert method == "processes"
        with self.lock:
            self.calls.append(host)
        if host == "old-c":
            raise RpcError(host, method, "unknown_method", "unknown method 'processes'")
        if host == "gpu-b":
            self.slow.wait(20)
        return LISTING.to_wire()

    def status(self, host: str) -> Any:
        return SimpleNamespace(agent_version="0.1.0")

    def count(self, host: str) -> int:
        with self.lock:
            return self.calls.count(host)


def _view(qtbot, console_context, fleet: FakeFleet) -> ProcessesView:
    console_context.fleet = fleet
    connect_hosts(qtbot, console_context, {"gpu-a": INVENTORY, "gpu-b": INVENTORY, "old-c": INVENTORY})
    view = ProcessesView(console_context, refresh_ms=50)
    shown(qtbot, view, 1280, 700)
    return view


def _cells(view: ProcessesView, row: int) -> list[str]:
    return [view.table.item(row, column).text() for column in range(view.table.columnCount())]


def test_each_process_shows_host_gpu_pid_user_memory_deployment_and_command_escaped(qtbot, console_context) -> None:
    fleet = FakeFleet()
    fleet.slow.set()
    view = _view(qtbot, console_context, fleet)
    qtbot.waitUntil(lambda: view.table.rowCount() == 2, timeout=10000)  # gpu-a's and gpu-b's process
    assert _cells(view, 0) == [
        "gpu-a (simulated)", "0", "4242", "C", "alice\\x1b[31m", "70.00 GiB", "ds32-0101-ab12 / vllm-node0",
        "vllm serve \\x1b[2Jdeepseek-ai/DeepSeek",
    ]  # fmt: skip
    assert view.table.item(0, 7).toolTip() == "vllm serve \\x1b[2Jdeepseek-ai/DeepSeek"
    assert view.table.horizontalHeaderItem(5).text() == "GPU memory"
    qtbot.waitUntil(lambda: "too old" in view.problems.text(), timeout=10000)
    assert view.problems.text() == (
        "old-c: this agent is too old to list processes (meshdeck-agent 0.1.0); restart the agent on that host so "
        "meshdeck starts the current one (its workers keep running)"
    )
    assert "2 processes on 4 GPUs of 2 hosts; 2 GPUs without any" in view.status.text()
    view.host.setCurrentIndex(view.host.findData("gpu-a"))
    assert view.table.rowCount() == 1 and view.problems.text() == ""
    view.shutdown()


def test_a_slow_host_is_never_asked_twice_at_once_and_nothing_is_asked_while_hidden(qtbot, console_context) -> None:
    fleet = FakeFleet()
    view = _view(qtbot, console_context, fleet)
    try:
        qtbot.waitUntil(lambda: fleet.count("gpu-a") >= 5, timeout=10000)  # the timer ticks every 50 ms
        assert fleet.count("gpu-b") == 1  # still waiting for its first answer
        fleet.slow.set()
        qtbot.waitUntil(lambda: fleet.count("gpu-b") >= 2, timeout=10000)  # answered: asked again
        view.hide()
        qtbot.wait(100)  # a request sent just before may still be in flight
        asked = len(fleet.calls)
        qtbot.wait(400)
        assert len(fleet.calls) == asked
        view.show()
        qtbot.waitUntil(lambda: len(fleet.calls) > asked, timeout=10000)
    finally:
        fleet.slow.set()
        view.shutdown()


def test_without_a_connected_host_the_view_says_where_to_connect_one(qtbot, console_context) -> None:
    console_context.fleet = FakeFleet()
    view = ProcessesView(console_context, refresh_ms=50)
    shown(qtbot, view, 1280, 700)
    assert view.status.text().startswith("No connected host: connect one in Hosts")
    assert view.table.rowCount() == 0
    view.shutdown()
