"""The console's whole sample path for a while, next to hostile agents; prints what the soak test checks.

    python soak_console.py RESULT.json WORKDIR SECONDS

One process, as the console is: the fleet with three hosts — `healthy` (a real `meshdeck-agent
--simulate 8xH200` sampling every second), `flooding` and `poisoned` (tests/fakes/hostile_agent.py) —
the store writer recording every host (HistoryRecorder), and offscreen the Qt bridge, the live metrics
and the dashboard drawing them. After SECONDS it stops the way the console does and writes JSON: its
peak RSS, how long the stop took, and the healthy host's seqs as handed to the writer and as the agent
has them when the stop begins.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from meshdeck.remote.connectors import AgentLink
from meshdeck.remote.events import SamplesReceived
from meshdeck.remote.streams import PipeStream
from meshdeck.services.fleet import FleetService, FleetSettings
from meshdeck.services.history import HistoryRecorder
from meshdeck.store.database import open_database
from meshdeck.store.inbox import InboxClosed
from meshdeck.store.writer import SampleWriter
from meshdeck.ui.app import application, drop_import_sources
from meshdeck.ui.bridge import FleetBridge
from meshdeck.ui.context import ConsoleContext
from meshdeck.ui.jobs import JobRunner
from meshdeck.ui.views.dashboard.view import DashboardView
from PySide6.QtCore import QSettings, QTimer

HOSTILE = Path(__file__).resolve().parents[2] / "fakes" / "hostile_agent.py"


class HostileConnector:
    """Starts tests/fakes/hostile_agent.py in MODE on every connect, over pipes like a local agent."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def describe(self) -> str:
        return f"hostile agent ({self.mode})"

    def open(self, progress: object) -> AgentLink:
        process = subprocess.Popen(
            [sys.executable, str(HOSTILE), self.mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        return AgentLink(PipeStream(process, self.mode), {"pid": process.pid})


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    result_path, workdir, seconds = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
    app = application()
    db = open_database(workdir / "meshdeck.db")
    fleet = FleetService(FleetSettings(known_hosts=str(workdir / "known_hosts"), user_known_hosts=(), ssh_config=None))
    bridge = FleetBridge()
    settings = QSettings(str(workdir / "console.ini"), QSettings.Format.IniFormat)
    context = ConsoleContext(fleet=fleet, db=db, bridge=bridge, jobs=JobRunner(), settings=settings)
    writer = SampleWriter(db).start()
    delivered: dict[str, list[int]] = {}
    lock = threading.Lock()

    def count(event: object) -> None:
        if isinstance(event, SamplesReceived):
            with lock:
                delivered.setdefault(event.host, []).extend(event.batch.seqs)

    recorder = HistoryRecorder(writer)

    def record(event: object) -> None:
        """The console's HistoryRecorder, counting the samples it handed to the writer."""
        if isinstance(event, SamplesReceived) and len(event.batch):
            try:
                writer.submit_samples(event.host, event.batch, event.dropped, event.epoch)
            except InboxClosed:  # stopping: these are read from the agent's ring next time
                return
            count(event)
        else:
            recorder.handle(event)  # type: ignore[arg-type]

    unsubscribe_history = fleet.subscribe(record)
    unsubscribe_bridge = fleet.subscribe(bridge.post)
    dashboard = DashboardView(context.live)
    dashboard.resize(1400, 900)
    dashboard.show()

    drop_import_sources()  # as the console does once its window is up
    idle_rss = rss_mb()
    peak = [idle_rss]
    sampling = threading.Event()

    def watch_memory() -> None:
        while not sampling.wait(0.25):
            peak[0] = max(peak[0], rss_mb())

    threading.Thread(target=watch_memory, daemon=True).start()
    socket_dir = Path(f"/tmp/meshdeck-soak-{os.getpid()}")
    socket_dir.mkdir(exist_ok=True)
    fleet.add_local(
        "healthy", simulate="8xH200", socket=str(socket_dir / "a.sock"), state_dir=str(workdir / "healthy-state")
    )
    fleet.add_host("flooding", HostileConnector("flood"))
    fleet.add_host("poisoned", HostileConnector("poison"))
    QTimer.singleShot(int(seconds * 1000), app.quit)
    app.exec()

    agent_last = fleet.call("healthy", "samples.read", {"since_seq": 0, "limit": 1}, timeout=30)["last_seq"]
    started = time.monotonic()
    steps = []
    # the console's shutdown (ui/app.py build_context, run last-in first-out)
    for name, step in (
        ("bridge", bridge.stop),
        ("unsubscribe bridge", unsubscribe_bridge),
        ("unsubscribe history", unsubscribe_history),
        ("writer inbox", writer.close_inbox),
        ("fleet", fleet.close),
        ("writer", lambda: writer.stop(roll_up_open_buckets=False, commit_queued=False)),
    ):
        step_start = time.monotonic()
        step()
        steps.append((name, round(time.monotonic() - step_start, 3)))
    stop_s = time.monotonic() - started
    sampling.set()
    stats = writer.stats()
    db.close()
    result = {
        "peak_rss_mb": peak[0],
        "stop_s": stop_s,
        "stop_steps": steps,
        "idle_rss_mb": idle_rss,
        "healthy_delivered": delivered.get("healthy", []),
        "healthy_agent_last_seq": agent_last,
        "flooding_delivered": len(delivered.get("flooding", [])),
        "poisoned_delivered": len(delivered.get("poisoned", [])),
        "bridge_skipped": bridge.skipped,
        "writer_failures": stats.failures,
        "writer_inbox_waits": stats.inbox_waits,
        "healthy_socket": str(socket_dir / "a.sock"),
    }
    result_path.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
