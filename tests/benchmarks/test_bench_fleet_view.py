"""Fleet view benchmark: refresh time (reading the newest values + painting) at 278 hosts × 8 GPUs.

Prints (medians, no wall-time assertions; the issue's target is < 50 ms per refresh at 2,224 GPUs):
- the refresh at 2,224 GPUs, one new sample per host between refreshes, 20 hosts stale;
- the same view with one 8-GPU host (baseline: widgets, legend, one block) and the ratio;
- the refresh when nothing new came (only the stale labels and the paint);
- the refresh at 2,224 GPUs with 3 busy Python threads spinning beside it, against the same refresh in a
  quiet process, and the ratio, at CPython's default switch interval and at the console's (ui/gil.py). The
  console at 278 hosts runs ~280 busy threads; PySide releases the GIL around each Qt call and every re-take
  costs up to a switch interval there, so a refresh must make few Qt calls;
- and again with the busy threads stepping aside between units of work while the view redraws, as the
  sample pump and the store writer do (core/foreground.py).

The samples are the wire shape an agent sends (tests/gui/wire_samples), decoded and flattened by the
sample gate's code once; each second's batch is that batch re-timed, so the benchmark measures the
view, not the fabrication of samples. Set MESHDECK_FLEET_SCREENSHOT=path.png to also save the view.

Run: `pytest tests/benchmarks/test_bench_fleet_view.py -s`.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gui"))

from gui_helpers import bare_context
from meshdeck.core.foreground import FOREGROUND
from meshdeck.core.samples import SampleBatch
from meshdeck.remote.events import HostStateChanged
from meshdeck.services.synthetic_samples import sample_batch
from meshdeck.ui.context import ConsoleContext
from meshdeck.ui.gil import GUI_SWITCH_INTERVAL_S, favour_the_gui_thread
from meshdeck.ui.views.fleet.view import STALE_AFTER_S, FleetView
from wire_samples import wire_sample

HOSTS = 278
GPUS_PER_HOST = 8
STALE_HOSTS = 20  # stop sending: hatched after STALE_AFTER_S
DISCONNECTED_HOSTS = 3
REFRESHES = 30
SPINNERS = 3  # busy Python threads beside the GUI thread in the loaded variant
UNIT_S = 0.005  # a spinner's unit of work between steps aside (the pump's turn)
SIZE = (1330, 900)  # the console's view area at its default window size


def _batches(variants: int = 8) -> list[SampleBatch]:
    """A few different 8-GPU samples (load phases, one vLLM engine, 4 IB ports, one NVLink link each: the
    per-link series never reach the view), flattened once."""
    return [
        sample_batch([wire_sample(1, 1.7e9 + i, gpus=GPUS_PER_HOST, nvlinks=1, nics=4, workers=1, phase=0.7 * i)])
        for i in range(variants)
    ]


def _at(batch: SampleBatch, ts: float) -> SampleBatch:
    return SampleBatch(batch.seqs, (ts,), batch.series, batch.values, batch.simulated)


def _feed(context: ConsoleContext, hosts: list[str], batches: list[SampleBatch], ts: float) -> None:
    for h, host in enumerate(hosts):
        context.ingest(host, _at(batches[(h + int(ts)) % len(batches)], ts))  # the charts' rings and ECC counts


@contextmanager
def _busy_threads(count: int, step_aside: bool = False) -> Iterator[None]:
    """`count` Python threads that only spin (each wants the GIL all the time), stopped on exit. With
    `step_aside` each ends a unit of work every UNIT_S and steps aside while a view redraws, as the sample
    pump and the store writer do (core/foreground.py)."""
    stop = threading.Event()

    def spin() -> None:
        turns = 0
        unit_ends = time.perf_counter() + UNIT_S
        while not stop.is_set():
            turns += 1
            if step_aside and turns % 256 == 0 and time.perf_counter() >= unit_ends:
                FOREGROUND.step_aside()
                unit_ends = time.perf_counter() + UNIT_S

    threads = [threading.Thread(target=spin, name=f"spinner-{i}", daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def _measure(
    qapp, hosts: int, tmp_path: Path, screenshot: str | None = None, spinners: int = 0, step_aside: bool = False
) -> tuple[list[float], list[float]]:
    """(refresh ms with one new sample per live host before each, refresh ms with nothing new), with
    `spinners` busy Python threads running while the refreshes are timed."""
    context = bare_context(str(tmp_path / f"console-{hosts}.ini"))
    try:
        names = [f"gpu-node-{h:03d}" for h in range(hosts)]
        stale = names[5 : 5 + STALE_HOSTS] if hosts > STALE_HOSTS + 5 else []
        gone = names[-DISCONNECTED_HOSTS:] if hosts > STALE_HOSTS + 5 else []
        batches = _batches()
        now = time.time()
        _feed(context, names, batches, now - 3 * STALE_AFTER_S)
        live = [n for n in names if n not in stale]
        for host in names:
            context.bridge.post(HostStateChanged(host, "connected"))
        for host in gone:
            context.bridge.post(HostStateChanged(host, "disconnected", "connection reset; retrying in 5 s"))
        context.bridge.drain()
        view = FleetView(context)
        view.resize(*SIZE)
        view.show()
        qapp.processEvents()
        view.set_metric("utilization")  # changes with every sample: each refresh after one paints the cells
        ts = now - 5
        shown = len(view.refresh_durations_ms())  # showing it refreshed once
        for _ in range(3):  # the first ones lay out and map every host
            ts += 1.0
            _feed(context, live, batches, ts)
            view.refresh()
        with _busy_threads(spinners, step_aside):
            for _ in range(REFRESHES):
                ts += 1.0
                _feed(context, live, batches, ts)
                view.refresh()
            fed = view.refresh_durations_ms()[shown + 3 :]
            for _ in range(REFRESHES):
                view.refresh()
            idle = view.refresh_durations_ms()[-REFRESHES:]
        if screenshot:
            view.grab().save(screenshot, "PNG")
        view.close()
        return fed, idle
    finally:
        context.shutdown()


@pytest.mark.slow
def test_bench_fleet_view_2224_gpus(qapp, tmp_path) -> None:
    fleet_fed, fleet_idle = _measure(qapp, HOSTS, tmp_path, os.environ.get("MESHDECK_FLEET_SCREENSHOT"))
    one_fed, one_idle = _measure(qapp, 1, tmp_path)
    fleet_median, one_median = statistics.median(fleet_fed), statistics.median(one_fed)
    print(
        f"\nfleet view, {HOSTS} hosts × {GPUS_PER_HOST} GPUs ({STALE_HOSTS} stale, {DISCONNECTED_HOSTS} disconnected):"
        f"\n  refresh after one new sample per host: median {fleet_median:.1f} ms,"
        f" p90 {statistics.quantiles(fleet_fed, n=10)[-1]:.1f} ms, max {max(fleet_fed):.1f} ms"
        f"\n  refresh with nothing new: median {statistics.median(fleet_idle):.1f} ms"
        f"\n  baseline, 1 host × {GPUS_PER_HOST} GPUs: median {one_median:.2f} ms"
        f" (nothing new: {statistics.median(one_idle):.2f} ms)"
        f"\n  ratio 2,224 GPUs / 8 GPUs: {fleet_median / one_median:.1f}×"
    )
    assert len(fleet_fed) == REFRESHES and len(one_fed) == REFRESHES


@pytest.mark.slow
def test_bench_fleet_view_in_a_loaded_process(qapp, tmp_path) -> None:
    """At CPython's default switch interval (5 ms) and at the console's (ui/gil.py), which `application()`
    sets: the same loaded refresh, so the ratio shows what the console's setting buys."""
    previous = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        quiet_fed, quiet_idle = _measure(qapp, HOSTS, tmp_path)
        loaded_fed, loaded_idle = _measure(qapp, HOSTS, tmp_path, spinners=SPINNERS)
        favour_the_gui_thread()
        console_fed, console_idle = _measure(qapp, HOSTS, tmp_path, spinners=SPINNERS)
        aside_fed, aside_idle = _measure(qapp, HOSTS, tmp_path, spinners=SPINNERS, step_aside=True)
    finally:
        sys.setswitchinterval(previous)
    quiet, loaded, console, aside = (statistics.median(fed) for fed in (quiet_fed, loaded_fed, console_fed, aside_fed))
    print(
        f"\nfleet view, {HOSTS} hosts × {GPUS_PER_HOST} GPUs, refresh after one new sample per host:"
        f"\n  quiet process: median {quiet:.1f} ms (nothing new: {statistics.median(quiet_idle):.1f} ms)"
        f"\n  {SPINNERS} busy Python threads beside it, switch interval 5 ms: median {loaded:.1f} ms,"
        f" p90 {statistics.quantiles(loaded_fed, n=10)[-1]:.1f} ms"
        f" (nothing new: {statistics.median(loaded_idle):.1f} ms)"
        f"\n  the same at the console's {GUI_SWITCH_INTERVAL_S * 1000:g} ms: median {console:.1f} ms,"
        f" p90 {statistics.quantiles(console_fed, n=10)[-1]:.1f} ms"
        f" (nothing new: {statistics.median(console_idle):.1f} ms)"
        f"\n  the same, the busy threads stepping aside every {UNIT_S * 1000:g} ms of work while the view redraws"
        f" (as the pump and the writer do): median {aside:.1f} ms, p90 {statistics.quantiles(aside_fed, n=10)[-1]:.1f} ms"
        f" (nothing new: {statistics.median(aside_idle):.1f} ms)"
        f"\n  ratio loaded / quiet: {loaded / quiet:.1f}× at 5 ms, {console / quiet:.1f}× at the console's interval,"
        f" {aside / quiet:.1f}× stepping aside"
    )
    assert len(quiet_fed) == len(loaded_fed) == len(console_fed) == len(aside_fed) == REFRESHES
