"""The sampler is not held up by the worker supervisor: with a worker whose log is tailed and broadcast
as fast as it grows, the time each sampler tick spends asking the supervisor for worker entries stays
what it is with a quiet worker. (The supervisor once held its lock across reading 256 KiB of log,
parsing it and broadcasting the events, and the sampler takes that lock every tick.)"""

from __future__ import annotations

import http.server
import shutil
import statistics
import sys
import threading
import time

from agent_harness import short_dir, wait_for
from meshdeck_agent.machine import Reading
from meshdeck_agent.ring import SampleRing
from meshdeck_agent.sampler import Sampler
from meshdeck_agent.workers.supervisor import Supervisor

INTERVAL_S = 0.02
# ~2.5 MB/s of NCCL transport lines: every 0.2 s poll finds more than the 256 KiB it tails at once
CHATTY = (
    "import sys, time\n"
    "block = b'gpu1:4242:4242 [0] NCCL INFO Channel 00/0 : 1[1] -> 4[0] [send] via NET/IBext/0\\n' * 3200\n"
    "while True:\n"
    "    sys.stdout.buffer.write(block); sys.stdout.flush(); time.sleep(0.1)\n"
)
QUIET = "import time; time.sleep(120)"


class _Idle:
    """A machine with nothing to read: a tick's time is then the supervisor's."""

    simulated = False

    def read(self, _now: float) -> Reading:
        return Reading()


class _SlowBroadcast:
    """Stands in for the daemon's broadcast to many sessions: each `log` event costs 0.5 ms (sleeping, so it
    holds no GIL: a tick that waits on it waits on a lock, not on the interpreter)."""

    def __init__(self) -> None:
        self.log_events = 0
        self.flowing = threading.Event()

    def __call__(self, name: str, _data: dict) -> None:
        if name == "log":
            time.sleep(0.0005)
            self.log_events += 1
            if self.log_events >= 1000:
                self.flowing.set()


class _TimedEntries:
    """The sampler's `workers` callback: supervisor.sample_entries, timed at each tick."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        self.costs: list[float] = []

    def __call__(self) -> list:
        started = time.monotonic()
        entries = self.supervisor.sample_entries()
        self.costs.append(time.monotonic() - started)
        return entries


def _tick_costs(supervisor: Supervisor, seconds: float) -> list[float]:
    """How long each tick of a real Sampler spent in supervisor.sample_entries, over `seconds`."""
    timed = _TimedEntries(supervisor)
    sampler = Sampler(_Idle(), SampleRing(capacity=1000), INTERVAL_S, workers=timed)
    sampler.start()
    try:
        threading.Event().wait(seconds)  # the measurement window itself, not a wait for a result
    finally:
        sampler.stop()
    assert timed.costs
    return timed.costs


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


def test_a_chatty_worker_log_does_not_delay_the_sampler():
    directory = short_dir()
    broadcast = _SlowBroadcast()
    supervisor = Supervisor(str(directory / "state"), broadcast, interval_s=INTERVAL_S)
    supervisor.start()
    try:
        supervisor.start_worker({"argv": [sys.executable, "-c", QUIET], "id": "quiet"})
        quiet = _tick_costs(supervisor, 2.0)
        supervisor.start_worker({"argv": [sys.executable, "-c", CHATTY], "id": "chatty"})
        assert broadcast.flowing.wait(timeout=60), "the chatty worker's log events never flowed"
        chatty = _tick_costs(supervisor, 2.0)
        for worker_id in ("quiet", "chatty"):
            supervisor.stop_worker(worker_id, grace_s=2.0)
    finally:
        supervisor.close()
        shutil.rmtree(directory, ignore_errors=True)
    quiet_p90, chatty_p90 = _p90(quiet), _p90(chatty)
    # a generous bound: a tick may wait for the interpreter (the tail parses in another thread), never
    # for the supervisor's lock; a quarter of the interval is far above the first and far below the second
    assert chatty_p90 <= max(4 * quiet_p90, INTERVAL_S / 4), (
        f"sample_entries per tick: quiet p90 {quiet_p90 * 1e3:.2f} ms, chatty p90 {chatty_p90 * 1e3:.2f} ms "
        f"(max {max(chatty) * 1e3:.1f} ms, {len(chatty)} ticks of {len(quiet)}, {broadcast.log_events} log events)"
    )


class _SlowMetrics(http.server.BaseHTTPRequestHandler):
    """A /metrics that never answers in time: a scrape waits out its whole timeout."""

    def do_GET(self) -> None:
        threading.Event().wait(12.0)

    def log_message(self, *_args: object) -> None:
        pass


def test_a_worker_ending_while_its_scrape_waits_on_a_slow_server_does_not_delay_the_sampler():
    """Ending a worker stops its scrape loop, which waits for a scrape in flight (up to its timeout): once
    done under the supervisor's lock, so every sampler tick waited too."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowMetrics)
    server.daemon_threads, server.block_on_close = True, False
    threading.Thread(target=server.serve_forever, daemon=True).start()
    directory = short_dir()
    ended = threading.Event()

    def emit(name: str, data: dict) -> None:
        if name == "worker" and data["state"] == "exited":
            ended.set()

    scrape_interval_s = 5.0  # also the scrape's timeout: max(0.5, min(5, interval))
    supervisor = Supervisor(str(directory / "state"), emit, interval_s=scrape_interval_s)
    supervisor.start()
    timed = _TimedEntries(supervisor)
    sampler = Sampler(_Idle(), SampleRing(capacity=1000), INTERVAL_S, workers=timed)
    sampler.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        # it ends ~2 s into its first scrape, which waits ~3 s more for the server
        supervisor.start_worker({"argv": [sys.executable, "-c", "import time; time.sleep(2)"], "metrics_url": url})
        assert ended.wait(timeout=60)
        # ticks after the exit, while the scrape loop is being stopped: a tick blocked on the lock is
        # counted once it gets through, with its cost
        ticks_at_exit = len(timed.costs)
        assert wait_for(lambda: len(timed.costs) >= ticks_at_exit + int(1.0 / INTERVAL_S), timeout=60)
    finally:
        sampler.stop()
        supervisor.close()
        server.shutdown()
        server.server_close()
        shutil.rmtree(directory, ignore_errors=True)
    assert max(timed.costs) < scrape_interval_s / 4, f"a tick waited {max(timed.costs) * 1e3:.0f} ms on the supervisor"
