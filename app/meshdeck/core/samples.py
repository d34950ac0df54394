"""Samples past the connection boundary: one host's batch, flattened once, with typed device keys.

An agent's samples are checked where they arrive (meshdeck_agent.wire_sample.Sample.from_wire) and
flattened exactly once (meshdeck.remote.sample_batch) into a `SampleBatch`: the seqs and times of
its samples and one column per series, (device, metric), row-major in one float array with NaN
where a sample did not report that series. The store and the charts read the same batch: nothing
downstream parses device names, re-checks types or flattens again.

`Device` says what a series belongs to. Its `text` form ("gpu3", "gpu3/nvlink7", "nic:mlx5_0/1",
"worker:w1/engine:0", "host") is how the store names a series and how a user sees it;
`Device.from_text` reads a stored name back (the store's own boundary).
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

DEVICE_KINDS = ("host", "gpu", "nvlink", "nic", "worker")


class Device(NamedTuple):
    """What a series is measured on. Fields not used by a kind keep their defaults."""

    kind: str  # one of DEVICE_KINDS
    index: int = -1  # type: ignore[assignment]  # the GPU's index (gpu, nvlink); shadows tuple.index by design
    link: int = -1  # the NVLink link id (nvlink)
    name: str = ""  # the NIC's name (nic), the worker's id (worker)
    engine: str = ""  # the vLLM engine, i.e. DP rank (worker; "" = the worker's sum over its engines)

    @classmethod
    def gpu(cls, index: int) -> Device:
        return cls("gpu", index)

    @classmethod
    def nvlink(cls, index: int, link: int) -> Device:
        return cls("nvlink", index, link)

    @classmethod
    def nic(cls, name: str) -> Device:
        return cls("nic", name=name)

    @classmethod
    def worker(cls, worker_id: str, engine: str = "") -> Device:
        return cls("worker", name=worker_id, engine=engine)

    @property
    def text(self) -> str:
        """The series name the store keeps and a user reads."""
        if self.kind == "gpu":
            return f"gpu{self.index}"
        if self.kind == "nvlink":
            return f"gpu{self.index}/nvlink{self.link}"
        if self.kind == "nic":
            return f"nic:{self.name}"
        if self.kind == "worker":
            return f"worker:{self.name}" + (f"/engine:{self.engine}" if self.engine else "")
        return self.kind

    @classmethod
    def from_text(cls, text: str) -> Device:
        """The Device a stored series name stands for; ValueError for a name meshdeck never writes."""
        if text == "host":
            return HOST
        if match := _GPU_TEXT.match(text):
            index, link = match.groups()
            return cls.gpu(int(index)) if link is None else cls.nvlink(int(index), int(link))
        if text.startswith("nic:") and len(text) > 4:
            return cls.nic(text[4:])
        if text.startswith("worker:") and len(text) > 7:
            worker, _, engine = text[7:].partition("/engine:")
            return cls.worker(worker, engine)
        raise ValueError(f"{text!r} is not a device name (host, gpuN, gpuN/nvlinkL, nic:NAME, worker:ID)")


HOST = Device("host")
_GPU_TEXT = re.compile(r"^gpu(\d{1,4})(?:/nvlink(\d{1,3}))?$")

SeriesKey = tuple[Device, str]
"""(device, metric): one series of one host."""


@dataclass(frozen=True, eq=False)
class SampleBatch:
    """Consecutive samples of one host, seq ascending, as columns: `values[i * width + c]` is series
    `series[c]` at sample `i` (NaN: not reported then)."""

    seqs: tuple[int, ...]
    times: tuple[float, ...]  # Unix seconds, one per sample
    series: tuple[SeriesKey, ...]
    values: array[float]
    simulated: bool = False

    def __post_init__(self) -> None:
        if len(self.seqs) != len(self.times) or len(self.values) != len(self.times) * len(self.series):
            raise ValueError(
                f"a batch of {len(self.seqs)} seqs, {len(self.times)} times and {len(self.series)} series "
                f"cannot hold {len(self.values)} values"
            )

    def __len__(self) -> int:
        return len(self.seqs)

    @property
    def width(self) -> int:
        return len(self.series)

    @property
    def cells(self) -> int:
        """Values held (reported or not): what a bounded inbox counts."""
        return len(self.values)

    def row(self, i: int) -> Iterator[tuple[SeriesKey, float]]:
        """The series sample `i` reported, with their values."""
        width = len(self.series)
        start = i * width
        for key, value in zip(self.series, self.values[start : start + width], strict=True):
            if not math.isnan(value):
                yield key, value

    def rows(self) -> Iterator[tuple[int, float, Device, str, float]]:
        """(seq, ts, device, metric, value) for every reported value, sample by sample."""
        for i, (seq, ts) in enumerate(zip(self.seqs, self.times, strict=True)):
            for (device, metric), value in self.row(i):
                yield seq, ts, device, metric, value

    def select(self, keep: Callable[[SeriesKey], bool]) -> SampleBatch:
        """The same samples with only the series `keep` accepts (a consumer that charts a few of them)."""
        columns = [c for c, key in enumerate(self.series) if keep(key)]
        if len(columns) == len(self.series):
            return self
        width, values = len(self.series), self.values
        kept = array("d", [values[i * width + c] for i in range(len(self.seqs)) for c in columns])
        return SampleBatch(self.seqs, self.times, tuple(self.series[c] for c in columns), kept, self.simulated)

    def slice(self, start: int, stop: int) -> SampleBatch:
        """Samples start..stop-1 of this batch (the same series)."""
        width = len(self.series)
        return SampleBatch(
            self.seqs[start:stop],
            self.times[start:stop],
            self.series,
            self.values[start * width : stop * width],
            self.simulated,
        )


EMPTY_BATCH = SampleBatch((), (), (), array("d"))
