"""Measuring the console's whole sample path against a fleet of real agents on this machine.

    result = run_fleet_benchmark(FleetBenchmarkSettings(hosts=32, gpus_per_host=8, seconds=60))
    result.as_dict()   # the `meshdeck bench fleet --json` document

What runs: `hosts` real `meshdeck-agent` daemons (`--simulate {gpus_per_host}xH200`, each with its own socket
and state dir in a fresh temporary folder, each reached through its own `attach` process and protocol
session: `FleetService.add_local`), supervised by the console's own services (`ConsoleServices`: the
fleet, the deployment registry surveying each host as it connects, `HistoryRecorder` -> `SampleWriter` into
a fresh SQLite database in that folder). With a console (`ConsoleProbe`, ui/fleet_benchmark.py) the
console's window runs offscreen in this process on the same services and the benchmark's waits run its
event loop, as the console's would.

The agents start from bytecode, as a pip install leaves a package: where the agent's modules have no
compiled bytecode yet (an editable install under PYTHONDONTWRITEBYTECODE, as on the CI machines) it is
compiled once before the run (`agent_bytecode` says which), else each of the run's agent processes would
compile its ~45 modules on start (~0.1 s of CPU each, 278 times, on the cores the client shares).

The run: all hosts are added at once; once every host delivered its first sample (or `connect_timeout_s`
passed) the fleet settles: the client works off the backlog the connect storm left (at 278 hosts on this
2-core machine the agents' own start-up takes most of it, and the hosts connected first are up to ~20 s
behind when the last connects). The measuring window of `seconds` starts once every host's newest delivered
sample is under SETTLED_AGE_S old, the writer's inbox holds under SETTLED_AGE_S of the fleet's samples and,
with a console, the events waiting for its GUI thread are under SETTLED_AGE_S per host (the console posts
each host's batch as one event a second), or `settle_timeout_s` passed: the window then opens on the
backlog and `settle_s` is null; after it,
every host's samples produced in the window are waited for (`drain_timeout_s`), the writer is flushed, and
SQLite is asked what it holds.

Stopping early: `run_fleet_benchmark(..., stop=event)` watches `stop` in every wait (the command sets it
from SIGINT and SIGTERM); once set, the run raises `FleetBenchmarkStopped` after stopping every agent it
started (as after a whole run: asked to shut down, then by their sockets, then any process still naming
the run's folder) and removing its folder. A run has at most MAX_HOSTS hosts.

What each number is (all measured in this run, none assumed):

- `client_cpu_pct`: CPU time (user + system, every thread) of this process only — not the agents, not their
  `attach` relays — over the window, in % of one core (100 = one core busy).
- `client_rss_mb`: this process's peak resident memory during the window (sampled every RSS_EVERY_S), MiB.
- `samples_produced`: per host, the agent's newest seq at the window's end minus at its start (each agent is
  asked with `samples.read`), summed: the samples the agents took during the window.
- `samples_stored`: of those samples, the ones committed to SQLite after the final flush: per host, the
  distinct sample times stored between the time of the window's first and last sample (the agent says
  them), summed.
- `samples_lost`: produced − stored, after the final flush (0 when nothing was lost).
- `delay_p50_ms` / `delay_p99_ms`: time of delivery to the fleet's subscribers (after the history recorder
  took the batch: any wait for the writer is in it) minus the sample's own time stamp (taken by the agent),
  over every live sample delivered during the window (a backfill after a reconnect is not live).
- `writer_backlog_start` / `writer_backlog_end`: values waiting in the writer's inbox (the one place the
  sample path waits) at the window's start and end.
- `rows_per_sample`: rows the writer committed per sample it committed, from the window's start to the
  final flush.
- `gui_refresh_ms_median` / `gui_refresh_ms_p99`: the shown view's own update + paint times
  (`refresh_record()`) of the refreshes during the window (those the view still keeps when the window
  is longer than its record); null without a console.
- `connect_all_s`: from adding the first host until every host delivered its first sample; null when some
  did not within `connect_timeout_s` (`hosts_connected` says how many did).
- `settle_s` (extra): from then until the window opened (the client caught up with the connect storm).
- `agent_bytecode` (extra): whether the agent's bytecode was compiled before, or just now for this run.
- `connect_phase` (extra): where the connect storm's CPU went, from adding the first host until every host
  delivered: this process's CPU seconds (`client_cpu_s`), the agents' daemons' and relays' (all of theirs
  until then), and the machine's busy time in % of one core.

Extra keys (beyond the contract): `agents_cpu_pct` / `relays_cpu_pct`, the agents' own CPU over the window
(their daemons, and the `attach` relays between them and this process, from /proc/<pid>/stat), and
`machine_cpu_busy_pct`, every CPU's busy time from /proc/stat — all in % of one core like the client's
(2 CPUs fully busy = 200), so other work on the machine shows as the difference; `machine.load_average_1m`;
`client_threads` (this process's threads at the window's end, from /proc/self/task) and
`caught_up_s` / `delay_p99_ms_after_catch_up` (seconds into the window after which every live sample
arrived within a second, and the p99 of the delays after that: a fleet-sized window can open on the
backlog the connect storm left); `client_cpu_pct_by_thread` (their CPU in the window by thread group, from /proc/self/task/*/stat: the GUI
thread is "MainThread", the hosts' supervisors "meshdeck-host-*", threads Python did not start "other");
the live samples
delivered and those backfilled in the window; `samples_undelivered`, the window's samples still waiting
in the agents' rings when the drain ended (the client was behind: part of `samples_lost`, though the
agents still hold them) and `samples_dropped_by_agents`, those the rings lost before they were read (the
whole run); the writer's commits and inbox waits in the window; `gui_collections` /
`gui_collection_ms_median` / `gui_collection_ms_max`, the full garbage collections the console ran on its GUI
thread in the window (between refreshes, ui/collector.py; every other thread waits for them too);
`background_stepped_aside_s`, how long the sample pump and the writer waited in the window while the console
redrew (core/foreground.py); and
the hosts left out of the counts, with why (`not_measured`). Linux only (/proc).
"""

from __future__ import annotations

import compileall
import importlib.util
import json
import logging
import math
import os
import re
import shutil
import statistics
import tempfile
import threading
import time
from array import array
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import meshdeck_agent
from meshdeck_agent.gpu.catalog import SimulateSpecError, parse_simulate
from meshdeck_agent.wire_sample import Sample, SampleError, decode_samples_message
from sqlalchemy import func, select

from meshdeck.core.errors import InputError
from meshdeck.core.foreground import FOREGROUND
from meshdeck.services.console import ConsoleServices
from meshdeck.services.demo import shutdown_agent_socket, sweep_processes
from meshdeck.services.events import FleetEvent, SamplesReceived
from meshdeck.services.fleet import FleetSettings
from meshdeck.services.ingest_benchmark import machine
from meshdeck.store import schema
from meshdeck.store.writer import SampleWriter, WriterStats

log = logging.getLogger(__name__)

RSS_EVERY_S = 0.25
CALL_TIMEOUT_S = 60.0
# Each host is two local processes (its daemon and its `attach` relay, ~30 MB each) and three pipes here: 1,000
# is ~60 GB and past what one machine serves (this 2-core machine was measured to 278).
MAX_HOSTS = 1_000
CONTRACT_KEYS = (
    "hosts",
    "gpus",
    "seconds",
    "client_cpu_pct",
    "client_rss_mb",
    "samples_produced",
    "samples_stored",
    "samples_lost",
    "delay_p50_ms",
    "delay_p99_ms",
    "writer_backlog_start",
    "writer_backlog_end",
    "rows_per_sample",
    "gui_refresh_ms_median",
    "gui_refresh_ms_p99",
    "connect_all_s",
)


class ConsoleProbe(Protocol):
    """The console beside the benchmark (ui/fleet_benchmark.py), on the same services, in this process.

    `attach` builds the window on the services and shows the view `view_key` names; `wait` runs the GUI's
    event loop until `ready()` or `timeout_s` (True when ready). Each record is (how many so far, the most
    recent ones kept, oldest first): `refresh_record` the shown view's update + paint times,
    `collection_record` how long each full garbage collection the console scheduled on its GUI thread took
    (ui/collector.py)."""

    view_key: str

    def attach(self, services: ConsoleServices) -> None: ...

    def wait(self, ready: Callable[[], bool], timeout_s: float) -> bool: ...

    def refresh_record(self) -> tuple[int, list[float]]: ...

    def collection_record(self) -> tuple[int, list[float]]: ...

    def backlog(self) -> int: ...

    def close(self) -> None: ...


class FleetBenchmarkStopped(Exception):
    """The run was stopped early (its `stop` event was set); everything it started is stopped and removed."""


def since(count_before: int, record: tuple[int, list[float]]) -> list[float]:
    """The entries of a bounded record (count so far, the most recent kept) added after it counted
    `count_before`: its tail, not an index from its start (which shifts once the record is full)."""
    count, kept = record
    added = min(max(0, count - count_before), len(kept))
    return kept[len(kept) - added :]


def plain_wait(ready: Callable[[], bool], timeout_s: float, poll_s: float = 0.1) -> bool:
    """Wait without a console: check `ready()` every `poll_s` until it holds or `timeout_s` passed."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(poll_s, left))
    return True


@dataclass(frozen=True)
class FleetBenchmarkSettings:
    hosts: int
    gpus_per_host: int = 8
    seconds: float = 60.0
    gpu_type: str = "H200"
    connect_timeout_s: float = 600.0  # for every host's first sample
    settle_timeout_s: float = 180.0  # then for the client to catch up with the connect storm's backlog
    drain_timeout_s: float = 120.0  # after the window, for the samples produced in it to be delivered
    directory: str | None = None  # where the temporary folder goes (default /tmp: agent sockets need short paths)

    def __post_init__(self) -> None:
        if not 1 <= self.hosts <= MAX_HOSTS:
            raise InputError(
                "--host-count",
                f"must be from 1 to {MAX_HOSTS} (each host is two local agent processes), got {self.hosts}",
            )
        if self.gpus_per_host < 1:
            raise InputError("--gpus-per-host", f"must be at least 1, got {self.gpus_per_host}")
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise InputError("--seconds", f"must be a positive number of seconds, got {self.seconds}")
        try:
            parse_simulate(self.simulate)
        except SimulateSpecError as exc:
            raise InputError("--gpus-per-host", str(exc)) from None

    @property
    def simulate(self) -> str:
        return f"{self.gpus_per_host}x{self.gpu_type}"


# -- what the subscriber and /proc say ----------------------------------------------------------------


class DeliveryMeter:
    """A fleet subscriber: each host's first delivery, and (while measuring) the delay of every live sample.
    Runs on the fleet's threads (the sample pump for samples); cheap (a float per sample)."""

    def __init__(self, hosts: int) -> None:
        self._lock = threading.Lock()
        self._hosts = hosts
        self.first_delivery: dict[str, float] = {}  # host -> time.monotonic() of its first sample
        self._newest: dict[str, float] = {}  # host -> the newest sample time delivered (time.time())
        self._cells: dict[str, float] = {}  # host -> the writer's cost of one of its samples (batch cells / samples)
        self.all_connected = threading.Event()
        self._delays = array("d")
        self._delivered = array("d")  # time.time() of each recorded delay's delivery
        self._measuring = False
        self.backfilled = 0  # samples delivered as backfill while measuring
        self.dropped = 0  # samples the agents' rings lost before they were read (the whole run)

    def __call__(self, event: FleetEvent) -> None:
        if not isinstance(event, SamplesReceived):
            return
        if event.dropped:
            with self._lock:
                self.dropped += event.dropped
        if not len(event.batch):
            return
        now, now_mono = time.time(), time.monotonic()
        with self._lock:
            if event.host not in self.first_delivery:
                self.first_delivery[event.host] = now_mono
                if len(self.first_delivery) >= self._hosts:
                    self.all_connected.set()
            self._newest[event.host] = max(self._newest.get(event.host, 0.0), event.batch.times[-1])
            self._cells[event.host] = event.batch.cells / len(event.batch)
            if not self._measuring:
                return
            if event.backfill:
                self.backfilled += len(event.batch)
            else:
                self._delays.extend(now - ts for ts in event.batch.times)
                self._delivered.extend(now for _ in event.batch.times)

    def measuring(self, on: bool) -> list[float]:
        """Start (True) or stop (False) recording delays; returns the delays recorded (seconds)."""
        with self._lock:
            self._measuring = on
            if on:
                self._delays = array("d")
                self._delivered = array("d")
                self.backfilled = 0
            return list(self._delays)

    def delivered_at(self) -> list[float]:
        """When each delay `measuring` returned was recorded (time.time()), in the same order."""
        with self._lock:
            return list(self._delivered)

    def connected(self) -> int:
        with self._lock:
            return len(self.first_delivery)

    def settled(self, now: float | None = None, writer_backlog: int = 0) -> bool:
        """Whether every host that delivered has delivered a sample taken under SETTLED_AGE_S ago, and the
        writer's inbox holds under SETTLED_AGE_S of the fleet's samples (`writer_backlog`, in its cells)."""
        return not self.behind(now) and writer_backlog < SETTLED_AGE_S * self.cells_per_second()

    def cells_per_second(self) -> float:
        """What the fleet gives the writer per second at one sample per host per second (in batch cells)."""
        with self._lock:
            return sum(self._cells.values())

    def behind(self, now: float | None = None) -> dict[str, float]:
        """The hosts whose newest delivered sample is SETTLED_AGE_S old or older, with its age in seconds."""
        now = time.time() if now is None else now
        with self._lock:
            return {host: now - newest for host, newest in self._newest.items() if now - newest >= SETTLED_AGE_S}


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` from /proc/<pid>/stat; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the name may hold spaces; after it: state, ppid, ...
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime (fields 14 and 15 of stat)


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of every CPU since boot, from /proc/stat (idle and iowait are not busy)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    total = sum(values[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    return total - values[3] - values[4], total


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile (q in 0..1) of `values`; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class PeakRss:
    """This process's RSS, sampled every RSS_EVERY_S on a small thread between start() and stop()."""

    def __init__(self) -> None:
        self.peak = rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="meshdeck-bench-rss", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(RSS_EVERY_S):
            self.peak = max(self.peak, rss_mb())

    def start(self) -> PeakRss:
        self._thread.start()
        return self

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb())
        return self.peak


# -- the run ----------------------------------------------------------------------------------------


@dataclass
class HostWindow:
    """One host's part of the window: the agent's newest seq at its start and end, and what was stored."""

    seq_start: int
    seq_end: int | None = None
    stored: int | None = None
    delivered_seq: int | None = None  # the last seq delivered by the end of the drain

    @property
    def undelivered(self) -> int:
        """Samples of the window still in the agent's ring when the drain ended (not lost: not read yet)."""
        if self.seq_end is None:
            return 0
        return max(0, self.seq_end - max(self.seq_start, self.delivered_seq or 0))

    @property
    def produced(self) -> int:
        return 0 if self.seq_end is None else max(0, self.seq_end - self.seq_start)


@dataclass
class FleetBenchmark:
    settings: FleetBenchmarkSettings
    gui_view: str | None
    connect_all_s: float | None
    settle_s: float | None
    hosts_connected: int
    window_s: float
    client_cpu_s: float
    client_rss_mb: float
    client_threads: int
    agents_cpu_s: float
    relays_cpu_s: float
    machine_busy_pct: float
    delays_s: list[float]
    backfilled: int
    dropped: int
    windows: dict[str, HostWindow]
    backlog_start: int
    backlog_end: int
    stats_start: WriterStats
    stats_end: WriterStats
    refresh_ms: list[float]
    collection_ms: list[float] = field(default_factory=list)  # the console's scheduled full collections
    stepped_aside_s: float = 0.0  # the pump's and the writer's waits for the console's redraws
    not_measured: dict[str, str] = field(default_factory=dict)  # host -> why it is not in the sample counts
    machine: dict[str, object] = field(default_factory=machine)
    thread_cpu_s: dict[str, float] = field(default_factory=dict)  # thread group -> CPU seconds in the window
    agent_bytecode: str = ""
    connect_phase: dict[str, float] = field(default_factory=dict)
    delivered_s: list[float] = field(default_factory=list)  # per delay: seconds into the window it was delivered

    def as_dict(self) -> dict[str, object]:
        produced = sum(w.produced for w in self.windows.values())
        stored = sum(w.stored or 0 for w in self.windows.values())
        rows = self.stats_end.rows - self.stats_start.rows
        samples = self.stats_end.samples - self.stats_start.samples

        def ms(value: float | None) -> float | None:
            return None if value is None else round(value * 1e3, 1)

        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 2)

        document: dict[str, object] = {
            "hosts": self.settings.hosts,
            "gpus": self.settings.hosts * self.settings.gpus_per_host,
            "seconds": self.settings.seconds,
            "client_cpu_pct": round(100 * self.client_cpu_s / self.window_s, 1),
            "client_rss_mb": round(self.client_rss_mb, 1),
            "samples_produced": produced,
            "samples_stored": stored,
            "samples_lost": produced - stored,
            "delay_p50_ms": ms(percentile(self.delays_s, 0.5)),
            "delay_p99_ms": ms(percentile(self.delays_s, 0.99)),
            "writer_backlog_start": self.backlog_start,
            "writer_backlog_end": self.backlog_end,
            "rows_per_sample": round(rows / samples, 1) if samples else None,
            "gui_refresh_ms_median": rounded(statistics.median(self.refresh_ms)) if self.refresh_ms else None,
            "gui_refresh_ms_p99": rounded(percentile(self.refresh_ms, 0.99)),
            "connect_all_s": rounded(self.connect_all_s),
        }
        document.update(
            {
                "gpus_per_host": self.settings.gpus_per_host,
                "simulate": self.settings.simulate,
                "window_s": round(self.window_s, 2),
                "settle_s": rounded(self.settle_s),
                "agent_bytecode": self.agent_bytecode,
                "connect_phase": dict(self.connect_phase),
                "hosts_connected": self.hosts_connected,
                "hosts_measured": len(self.windows),
                "not_measured": dict(self.not_measured),
                "samples_delivered_live": len(self.delays_s),
                "samples_backfilled": self.backfilled,
                "samples_undelivered": sum(w.undelivered for w in self.windows.values()),
                "samples_dropped_by_agents": self.dropped,
                "gui_view": self.gui_view,
                "gui_refreshes": len(self.refresh_ms),
                "gui_collections": len(self.collection_ms),
                "gui_collection_ms_median": rounded(statistics.median(self.collection_ms))
                if self.collection_ms
                else None,
                "gui_collection_ms_max": rounded(max(self.collection_ms, default=None)),
                "background_stepped_aside_s": round(self.stepped_aside_s, 3),
                "client_threads": self.client_threads,
                "agents_cpu_pct": round(100 * self.agents_cpu_s / self.window_s, 1),
                "relays_cpu_pct": round(100 * self.relays_cpu_s / self.window_s, 1),
                "machine_cpu_busy_pct": round(self.machine_busy_pct, 1),
                "writer_inbox_waits": self.stats_end.inbox_waits - self.stats_start.inbox_waits,
                "writer_commits": self.stats_end.commits - self.stats_start.commits,
                **catch_up(self.delays_s, self.delivered_s, self.window_s),
                "client_cpu_pct_by_thread": {
                    group: round(100 * seconds / self.window_s, 1)
                    for group, seconds in sorted(self.thread_cpu_s.items(), key=lambda item: -item[1])
                },
                "machine": self.machine,
                "definitions": "see `meshdeck.services.fleet_benchmark` (python -m pydoc)",
            }
        )
        return document


class _Run:
    """One benchmark: the folder, the services, the agents; `close()` stops and removes them all."""

    def __init__(
        self, settings: FleetBenchmarkSettings, console: ConsoleProbe | None, stop: threading.Event | None = None
    ) -> None:
        self.settings = settings
        self.console = console
        self.stop = stop
        self.closing = False  # close() waits for the agents' shutdown whatever `stop` says
        base = settings.directory or ("/tmp" if Path("/tmp").is_dir() else None)
        self.folder = Path(tempfile.mkdtemp(prefix="mdfb-", dir=base))
        self.names = [f"sim-{index:03d}" for index in range(settings.hosts)]
        fleet_settings = FleetSettings(
            known_hosts=str(self.folder / "known_hosts"), user_known_hosts=(), ssh_config=None
        )
        self.services: ConsoleServices | None = None
        self.services = ConsoleServices.start(db_path=self.folder / "history.sqlite", fleet_settings=fleet_settings)
        self.meter = DeliveryMeter(settings.hosts)
        self.agent_bytecode = ""
        self.connect_phase: dict[str, float] = {}
        self.services.fleet.subscribe(self.meter)

    @property
    def fleet(self) -> Any:
        assert self.services is not None
        return self.services.fleet

    @property
    def writer(self) -> SampleWriter:
        assert self.services is not None
        return self.services.writer

    def stopping(self) -> bool:
        return self.stop is not None and self.stop.is_set() and not self.closing

    def check_stop(self) -> None:
        if self.stopping():
            raise FleetBenchmarkStopped()

    def wait(self, ready: Callable[[], bool], timeout_s: float) -> bool:
        """Wait for `ready()` (running the console's event loop, with one) up to `timeout_s`; raises
        FleetBenchmarkStopped as soon as `stop` is set (except while closing)."""
        self.check_stop()

        def done() -> bool:
            return self.stopping() or ready()

        waiting = self.console.wait if self.console is not None else plain_wait
        finished = waiting(done, timeout_s)
        self.check_stop()
        return finished

    def host_dir(self, name: str) -> Path:
        return self.folder / name

    def start_hosts(self) -> float:
        started = time.monotonic()
        for seed, name in enumerate(self.names):  # each its own seed: its own GPU ids, noise and ECC errors
            folder = self.host_dir(name)
            folder.mkdir()
            self.fleet.add_local(
                name,
                simulate=self.settings.simulate,
                socket=str(folder / "a.sock"),
                state_dir=str(folder / "state"),
                seed=seed,
            )
        return started

    def ask_all(self, method: str, params_of: Callable[[str], dict[str, Any]], names: Iterable[str]) -> dict[str, Any]:
        """`method` asked of every host at once; host -> its answer or the exception it raised."""
        futures: dict[str, Future[Any] | Exception] = {}
        for name in names:
            try:
                futures[name] = self.fleet.call_async(name, method, params_of(name))
            except Exception as exc:  # not connected
                futures[name] = exc
        answers: dict[str, Any] = {}
        deadline = time.monotonic() + CALL_TIMEOUT_S
        for name, future in futures.items():
            if isinstance(future, Exception):
                answers[name] = future
                continue
            ready = self.wait(future.done, max(0.0, deadline - time.monotonic()))
            if not ready:
                future.cancel()
                answers[name] = TimeoutError(f"no answer to {method} within {CALL_TIMEOUT_S:g} s")
                continue
            error = future.exception()
            answers[name] = error if error is not None else future.result()
        return answers

    def newest_seqs(self, names: Iterable[str]) -> dict[str, int | Exception]:
        answers = self.ask_all("samples.read", lambda _name: {"since_seq": 0, "limit": 1}, names)
        seqs: dict[str, int | Exception] = {}
        for name, answer in answers.items():
            last = answer.get("last_seq") if isinstance(answer, dict) else None
            if isinstance(answer, Exception):
                seqs[name] = answer
            elif isinstance(last, int) and not isinstance(last, bool) and last >= 0:
                seqs[name] = last
            else:
                seqs[name] = ValueError(f"samples.read answered without a last_seq: {json.dumps(answer)[:200]}")
        return seqs

    def sample_times(self, names: Iterable[str], since: Callable[[str], int]) -> dict[str, float | Exception]:
        """The time stamp of each host's sample `since(host) + 1`, as its agent has it."""
        answers = self.ask_all("samples.read", lambda name: {"since_seq": since(name), "limit": 1}, names)
        times: dict[str, float | Exception] = {}
        for name, answer in answers.items():
            if isinstance(answer, Exception):
                times[name] = answer
                continue
            try:
                raw, _ = decode_samples_message(answer)
                sample = Sample.from_wire(raw[0]) if raw else None
            except SampleError as exc:
                times[name] = exc
                continue
            expected = since(name) + 1
            if sample is None or sample.seq != expected:
                times[name] = LookupError(f"the agent no longer holds seq {expected}")
            else:
                times[name] = sample.ts
        return times

    def agent_cpu_s(self) -> tuple[float, float]:
        """(daemons, attach relays) CPU seconds so far, of every host's processes still running."""
        daemons = relays = 0.0
        for name in self.names:
            try:
                record = json.loads((self.host_dir(name) / "state" / "agent.pid").read_text())
                daemons += process_cpu_s(int(record["pid"])) or 0.0
            except (OSError, ValueError, KeyError, TypeError):
                pass
            try:
                pid = self.fleet.status(name).details.get("pid")
            except Exception:
                pid = None
            if isinstance(pid, int):
                relays += process_cpu_s(pid) or 0.0
        return daemons, relays

    def stored_samples(self, host: str, first_ts: float, last_ts: float) -> int:
        """Distinct sample times of `host` committed to SQLite between two sample times (inclusive)."""
        assert self.services is not None
        low, high = round(first_ts * 1000), round(last_ts * 1000)
        query = (
            select(func.count(func.distinct(schema.samples.c.ts)))
            .select_from(schema.samples.join(schema.series, schema.series.c.id == schema.samples.c.series_id))
            .where(schema.series.c.host == host, schema.samples.c.ts >= low, schema.samples.c.ts <= high)
        )
        with self.services.db.read() as connection:
            return int(connection.execute(query).scalar_one())

    def close(self) -> None:
        """Stop the agents (asked first, then by their sockets, then any process naming the folder), the
        console and the services; remove the folder."""
        self.closing = True
        if self.services is not None:
            connected = [n for n in self.names if n in self.meter.first_delivery]
            self.ask_all("agent.shutdown", lambda _name: {}, connected)
        if self.console is not None:
            try:
                self.console.close()
            except Exception:
                log.exception("closing the benchmark's console failed")
        if self.services is not None:
            self.services.shutdown()
        for name in self.names:
            socket_path = self.host_dir(name) / "a.sock"
            if socket_path.exists():
                shutdown_agent_socket(socket_path, timeout=5.0)
        sweep_processes(str(self.folder) + "/")
        shutil.rmtree(self.folder, ignore_errors=True)


def agent_bytecode() -> str:
    """Compile the agent package's bytecode where it is missing (see the module doc); says what it did."""
    folder = Path(meshdeck_agent.__file__).parent
    missing = [p for p in folder.rglob("*.py") if not Path(importlib.util.cache_from_source(str(p))).exists()]
    if not missing:
        return "compiled before the run"
    if not compileall.compile_dir(folder, quiet=2):
        return f"not compiled ({folder} is not writable): each agent compiles its modules on start"
    return f"compiled now ({len(missing)} modules had none)"


def connect_phase(run: _Run, client_cpu_s: float, busy_start: tuple[float, float]) -> dict[str, float]:
    """Where the connect storm's CPU went: this process's, the agents' daemons' and relays' (all of theirs so
    far: they started with it) in CPU seconds, and how busy the machine was (% of one core)."""
    daemons, relays = run.agent_cpu_s()
    busy_end = machine_busy()
    cpus = os.cpu_count() or 1
    busy = busy_end[0] - busy_start[0]
    total = busy_end[1] - busy_start[1]
    return {
        "client_cpu_s": round(client_cpu_s, 2),
        "agents_cpu_s": round(daemons, 2),
        "relays_cpu_s": round(relays, 2),
        "machine_cpu_busy_pct": round(100 * cpus * busy / total, 1) if total else 0.0,
    }


def run_fleet_benchmark(
    settings: FleetBenchmarkSettings, console: ConsoleProbe | None = None, stop: threading.Event | None = None
) -> FleetBenchmark:
    """Run the benchmark the module doc describes; everything it started is stopped and removed after, also
    when `stop` is set meanwhile (then FleetBenchmarkStopped is raised)."""
    bytecode = agent_bytecode()
    run = _Run(settings, console, stop)
    run.agent_bytecode = bytecode
    try:
        run.check_stop()
        if console is not None:
            assert run.services is not None
            console.attach(run.services)
        client_cpu_start, busy_start = time.process_time(), machine_busy()
        started = run.start_hosts()
        connected = run.wait(run.meter.all_connected.is_set, settings.connect_timeout_s)
        connect_all_s = (max(run.meter.first_delivery.values()) - started) if connected else None
        run.connect_phase = connect_phase(run, time.process_time() - client_cpu_start, busy_start)
        settling = time.monotonic()

        def caught_up() -> bool:  # the fleet path, the writer and (with a console) the console's inbox
            console_behind = console is not None and console.backlog() >= SETTLED_AGE_S * settings.hosts
            return run.meter.settled(writer_backlog=run.writer.inbox_held) and not console_behind

        settled = run.wait(caught_up, settings.settle_timeout_s)
        if not settled:
            behind = sorted(run.meter.behind().items(), key=lambda item: -item[1])
            log.warning(
                "bench fleet: the client did not catch up within %g s (%d hosts behind; the furthest: %s; "
                "the writer's backlog: %d values, %.1f s of the fleet's; the console's: %d events); measuring anyway",
                settings.settle_timeout_s,
                len(behind),
                ", ".join(f"{host} {age:.1f} s" for host, age in behind[:5]) or "none",
                run.writer.inbox_held,
                run.writer.inbox_held / max(1.0, run.meter.cells_per_second()),
                console.backlog() if console is not None else 0,
            )
        return _measure(run, connect_all_s, time.monotonic() - settling if settled else None)
    finally:
        run.close()


CAUGHT_UP_DELAY_S = 1.0
SETTLED_AGE_S = 2.0  # one sampling interval (1 s) plus a delay that still counts as caught up


def catch_up(delays_s: list[float], delivered_s: list[float], window_s: float) -> dict[str, float | None]:
    """How the window's delays evolved: `caught_up_s`, seconds into the window after which every live
    sample arrived within CAUGHT_UP_DELAY_S (0: all did; the window's length: the client never caught up)
    — at fleet size the window can open on a backlog the connect storm left — and `delay_p99_ms_after_catch_up`,
    the p99 of the samples delivered after that (None when none were)."""
    late = [at for delay, at in zip(delays_s, delivered_s, strict=True) if delay >= CAUGHT_UP_DELAY_S]
    caught_up = max(late, default=0.0)
    after = [delay for delay, at in zip(delays_s, delivered_s, strict=True) if at > caught_up]
    p99 = percentile(after, 0.99)
    return {
        "caught_up_s": round(min(caught_up, window_s), 1),
        "delay_p99_ms_after_catch_up": None if p99 is None else round(p99 * 1e3, 1),
    }


_THREAD_GROUP = re.compile(r"^(meshdeck-(?:host|rpc|job)|deploy|load)-.*$")


def thread_cpu_s() -> dict[str, float]:
    """CPU seconds (user + system) of this process's threads, summed per group: the Python threads by
    name (one group for all `meshdeck-host-*` supervisors, etc.), the rest (Qt's, SQLite's) as "other"."""
    names = {thread.native_id: thread.name for thread in threading.enumerate() if thread.native_id is not None}
    tick = os.sysconf("SC_CLK_TCK")
    groups: dict[str, float] = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        name = names.get(int(task), "other")
        group = _THREAD_GROUP.sub(r"\1-*", name)
        groups[group] = groups.get(group, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return groups


def _measure(run: _Run, connect_all_s: float | None, settle_s: float | None) -> FleetBenchmark:
    settings = run.settings
    hosts = [n for n in run.names if n in run.meter.first_delivery]
    not_measured = {n: "no sample delivered before the window" for n in run.names if n not in hosts}
    refreshes_before = run.console.refresh_record()[0] if run.console is not None else 0
    collections_before = run.console.collection_record()[0] if run.console is not None else 0
    stepped_aside_before = FOREGROUND.stepped_aside_s

    # -- the window's start
    windows: dict[str, HostWindow] = {}
    for name, seq in run.newest_seqs(hosts).items():
        if isinstance(seq, Exception):
            not_measured[name] = f"its newest seq at the start: {seq}"
        else:
            windows[name] = HostWindow(seq)
    stats_start, backlog_start = run.writer.stats(), run.writer.inbox_held
    daemons_start, relays_start = run.agent_cpu_s()
    busy_start, total_start = machine_busy()
    threads_start = thread_cpu_s()
    rss = PeakRss().start()
    run.meter.measuring(True)
    wall_start, cpu_start = time.monotonic(), time.process_time()
    log.info("bench fleet: the window opens: measuring %d hosts for %g s", len(windows), settings.seconds)

    run.wait(lambda: False, settings.seconds)

    # -- the window's end
    cpu_s, window_s = time.process_time() - cpu_start, time.monotonic() - wall_start
    delays = run.meter.measuring(False)
    window_wall_start = time.time() - window_s
    delivered_s = [at - window_wall_start for at in run.meter.delivered_at()]
    backfilled = run.meter.backfilled
    backlog_end = run.writer.inbox_held
    peak_rss = rss.stop()
    busy_end, total_end = machine_busy()
    threads_end = thread_cpu_s()
    daemons_end, relays_end = run.agent_cpu_s()
    threads = len(os.listdir("/proc/self/task"))
    refresh_ms = since(refreshes_before, run.console.refresh_record()) if run.console is not None else []
    collection_ms = since(collections_before, run.console.collection_record()) if run.console is not None else []
    stepped_aside_s = FOREGROUND.stepped_aside_s - stepped_aside_before
    for name, seq in run.newest_seqs(list(windows)).items():
        if isinstance(seq, Exception):
            not_measured[name] = f"its newest seq at the end: {seq}"
            del windows[name]
        else:
            windows[name].seq_end = seq

    # -- what reached SQLite: every sample of the window delivered, then flushed
    def delivered() -> bool:
        return all(
            w.seq_end is None or (run.fleet.supervisor(n).last_seq or 0) >= w.seq_end for n, w in windows.items()
        )

    if not run.wait(delivered, settings.drain_timeout_s):
        log.warning("bench fleet: not every sample of the window was delivered within %g s", settings.drain_timeout_s)
    run.check_stop()
    if not run.writer.flush(timeout=settings.drain_timeout_s):
        log.warning("bench fleet: the final flush did not finish within %g s", settings.drain_timeout_s)
    stats_end = run.writer.stats()
    for name, window in windows.items():
        window.delivered_seq = run.fleet.supervisor(name).last_seq
    produced = {n: w for n, w in windows.items() if w.produced}
    firsts = run.sample_times(produced, lambda n: windows[n].seq_start)
    lasts = run.sample_times(produced, lambda n: (windows[n].seq_end or 1) - 1)
    for name, window in windows.items():
        first, last = firsts.get(name), lasts.get(name)
        if window.produced == 0:
            window.stored = 0
        elif isinstance(first, float) and isinstance(last, float):
            window.stored = run.stored_samples(name, first, last)
        else:
            problem = first if isinstance(first, Exception) else last
            not_measured[name] = f"the times of the window's samples: {problem}"
    for name in [n for n, w in windows.items() if w.stored is None]:
        del windows[name]

    return FleetBenchmark(
        settings=settings,
        gui_view=run.console.view_key if run.console is not None else None,
        connect_all_s=connect_all_s,
        settle_s=settle_s,
        hosts_connected=run.meter.connected(),
        window_s=window_s,
        client_cpu_s=cpu_s,
        client_rss_mb=peak_rss,
        client_threads=threads,
        agents_cpu_s=daemons_end - daemons_start,
        relays_cpu_s=relays_end - relays_start,
        machine_busy_pct=100 * (busy_end - busy_start) / max(1, total_end - total_start) * (os.cpu_count() or 1),
        delays_s=delays,
        backfilled=backfilled,
        dropped=run.meter.dropped,
        windows=windows,
        backlog_start=backlog_start,
        backlog_end=backlog_end,
        stats_start=stats_start,
        stats_end=stats_end,
        refresh_ms=refresh_ms,
        collection_ms=collection_ms,
        stepped_aside_s=stepped_aside_s,
        not_measured=not_measured,
        delivered_s=delivered_s,
        thread_cpu_s={
            group: threads_end[group] - threads_start.get(group, 0.0)
            for group in threads_end
            if threads_end[group] - threads_start.get(group, 0.0) > 0
        },
        agent_bytecode=run.agent_bytecode,
        connect_phase=run.connect_phase,
    )
