"""The sampler: one thread that takes a sample every interval and stores it in the ring.

Each tick joins the machine's `Reading` (typed GPU / host / NIC records) and the workers' scraped
records into one `Sample` (wire_sample.py), its rates rounded to the precision a chart shows
(quantize.py); the ring numbers it and encodes it once. The schedule does not drift: tick k is due at
start + k·interval; when a read overruns, the missed ticks are skipped (never bunched up). A failing source is logged once per kind of failure and the
tick is skipped; the sampler itself never dies. After each sample `on_sample(seq)` wakes the
subscribers and the Prometheus exporter.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Optional, Sequence, Set, Tuple

from .machine import Machine
from .quantize import quantize
from .ring import SampleRing
from .wire_sample import Sample, WorkerSample

log = logging.getLogger(__name__)


class Sampler:
    def __init__(
        self,
        machine: Machine,
        ring: SampleRing,
        interval_s: float = 1.0,
        workers: Optional[Callable[[], Sequence[WorkerSample]]] = None,
        on_sample: Optional[Callable[[int], None]] = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval must be positive")
        self.machine = machine
        self.ring = ring
        self.interval_s = interval_s
        self.workers: Callable[[], Sequence[WorkerSample]] = workers or (lambda: ())
        self.on_sample = on_sample
        self.clock = clock
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._failures: Set[Tuple[str, str]] = set()

    def sample_once(self) -> Optional[int]:
        now = self.clock()
        try:
            reading = self.machine.read(now)
        except Exception as exc:
            self._log_failure("machine", exc)
            return None
        try:
            workers = tuple(self.workers())
        except Exception as exc:
            self._log_failure("workers", exc)
            workers = ()
        gpus, nics = quantize(reading.gpus, reading.nics)
        sample = Sample(
            seq=0,  # the ring numbers it
            ts=round(now, 3),
            simulated=self.machine.simulated,
            gpus=gpus,
            host=reading.host,
            nics=nics,
            workers=workers,
        )
        seq = self.ring.append(sample)
        if self.on_sample is not None:
            try:
                self.on_sample(seq)
            except Exception as exc:
                self._log_failure("on_sample", exc)
        return seq

    def _log_failure(self, where: str, exc: Exception) -> None:
        key = (where, type(exc).__name__)
        if key not in self._failures:
            self._failures.add(key)
            log.exception("sampler: %s failed (%s); later failures of this kind are not logged", where, exc)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        start = time.monotonic()
        tick = 0
        while not self._stop.is_set():
            self.sample_once()
            tick += 1
            due = start + tick * self.interval_s
            now = time.monotonic()
            if now > due:
                skipped = int((now - due) / self.interval_s) + 1
                tick += skipped
                due = start + tick * self.interval_s
            self._stop.wait(max(0.0, due - now))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
