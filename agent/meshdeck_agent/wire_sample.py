"""A SAMPLE as typed records: the one definition of its shape, checked once where it enters the app.

The app decodes every sample an agent sends with `Sample.from_wire` at the connection boundary
(meshdeck.remote.sample_gate). A sample with a field of the wrong type or outside its range is refused
whole with a `SampleError` naming the field (`gpus[2].memory_used_bytes: must be a number from 0 to
1.1e+15, got 'lots'`), so one host's bad data never reaches the store or a chart: a time stamp of 1e17
or a seq of 2**70 cannot overflow SQLite's integers, a year-33658 time cannot crash a date format, and a
utilization of 1e15 % cannot flatten a chart's axis. Unknown keys are ignored: a newer agent may add
some within protocol 1 (protocol.py). Numbers may be null where the hardware does not report them.

The agent builds every sample as these records (its backends with `GpuSample.of` / `HostSample.of`,
its scraper with `WorkerSample.of`) and serialises each once, with `Sample.to_wire`, where its ring
stores it. Which metrics a GPU, host and NIC carry, in which unit and within which range, is the metric
registry's (metric_registry.py, re-exported here). Worker metrics are checked here only against
±MAX_WORKER_VALUE: the scraper already leaves out a value outside its registered range, and a name a
newer agent adds still flows. The ranges are physical bounds with room to spare (no GPU has a petabyte
of memory or runs at 10 kW), not tuning: they exist to keep garbage out, never to clip real readings.
Stdlib only, Python 3.9.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from .metric_registry import GPU_METRICS as GPU_METRICS
from .metric_registry import HOST_METRICS as HOST_METRICS
from .metric_registry import MAX_WORKER_VALUE as MAX_WORKER_VALUE
from .metric_registry import NIC_METRICS as NIC_METRICS
from .metric_registry import NVLINK_METRICS as NVLINK_METRICS
from .metric_registry import PETABYTE
from .metric_registry import Metric as Metric

MIN_TS = 946_684_800.0  # 2000-01-01T00:00:00Z: no agent's clock is older
MAX_TS = 4_102_444_800.0  # 2100-01-01T00:00:00Z: far in the future, yet every date type the app uses holds it
MAX_SEQ = 2**53  # exact in JSON doubles and inside SQLite's 64-bit integers
MAX_DROPPED = 2**53
MAX_GPUS = 1024
MAX_NVLINK_LINKS = 64
MAX_NICS = 256
MAX_WORKERS = 1024
MAX_WORKER_METRICS = 256
MAX_XID_EVENTS = 64
MAX_PROCESSES = 4096
MAX_NAME_CHARS = 256

_PB = PETABYTE
_METRIC_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_:]{0,127}$")


class SampleError(ValueError):
    """A sample (or a samples message) that breaks the shape or a range; `field` is its path."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__("%s: %s" % (field, problem))
        self.field = field
        self.problem = problem


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _number(value: Any, field: str, low: float, high: float) -> Optional[float]:
    """None, or a finite number in [low, high] (ints kept exact as floats); else SampleError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SampleError(field, "must be a number, got %s" % _describe(value))
    if not low <= value <= high:  # also false for NaN
        raise SampleError(field, "must be a number from %g to %g, got %s" % (low, high, _describe(value)))
    return float(value)


def _int(value: Any, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SampleError(field, "must be an integer from %d to %d, got %s" % (low, high, _describe(value)))
    return value


def _text(value: Any, field: str, *, optional: bool = False) -> Optional[str]:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise SampleError(field, "must be a string, got %s" % _describe(value))
    if len(value) > MAX_NAME_CHARS:
        raise SampleError(field, "must be at most %d characters, got %d" % (MAX_NAME_CHARS, len(value)))
    return value


def _list(value: Any, field: str, limit: int) -> List[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise SampleError(field, "must be a list, got %s" % type(value).__name__)
    if len(value) > limit:
        raise SampleError(field, "must have at most %d entries, got %d" % (limit, len(value)))
    return value


def _object(value: Any, field: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise SampleError(field, "must be an object, got %s" % type(value).__name__)
    return value


NIC_KINDS = ("infiniband", "roce", "ethernet")


@dataclass(frozen=True)
class XidEvent:
    xid: int
    ts: Optional[float]


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_memory_bytes: Optional[float]


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one instant. `values` holds GPU_METRICS in order (None: not reported), the volatile ECC
    counts among them; a backend builds one with `GpuSample.of`, naming its values. The `remapped_rows_*`
    counts and failure flag are NVML's (sent only when read)."""

    index: int
    uuid: Optional[str]
    values: Tuple[Optional[float], ...]
    nvlink_links: Tuple[Tuple[Optional[float], Optional[float]], ...] = ()  # (tx, rx) bytes/s, index = link id
    xid_events: Tuple[XidEvent, ...] = ()
    remapped_rows_pending: Optional[bool] = None
    processes: Tuple[GpuProcess, ...] = ()
    remapped_rows_correctable: Optional[float] = None
    remapped_rows_uncorrectable: Optional[float] = None
    remapped_rows_failure: Optional[bool] = None

    @classmethod
    def of(
        cls,
        index: int,
        uuid: Optional[str],
        nvlink_links: Iterable[Sequence[Optional[float]]] = (),
        xid_events: Iterable[XidEvent] = (),
        processes: Iterable[GpuProcess] = (),
        remapped_rows_pending: Optional[bool] = None,
        remapped_rows_correctable: Optional[float] = None,
        remapped_rows_uncorrectable: Optional[float] = None,
        remapped_rows_failure: Optional[bool] = None,
        **metrics: Optional[float],
    ) -> "GpuSample":
        """The record of one reading, its GPU_METRICS named (`power_w=301.2`; one left out: not reported).
        A name outside GPU_METRICS is a TypeError: a backend cannot send what the registry lacks."""
        return cls(
            index,
            uuid,
            _metric_values(metrics, _GPU_INDEX, "GpuSample"),
            tuple((pair[0], pair[1]) for pair in nvlink_links),
            tuple(xid_events),
            remapped_rows_pending,
            tuple(processes),
            remapped_rows_correctable,
            remapped_rows_uncorrectable,
            remapped_rows_failure,
        )

    def value(self, metric: str) -> Optional[float]:
        return self.values[_GPU_INDEX[metric]]


@dataclass(frozen=True)
class HostSample:
    values: Tuple[Optional[float], ...]  # HOST_METRICS in order

    @classmethod
    def of(cls, **metrics: Optional[float]) -> "HostSample":
        """The record of one reading, its HOST_METRICS named (`cpu_pct=12.5`)."""
        return cls(_metric_values(metrics, _HOST_INDEX, "HostSample"))

    def value(self, metric: str) -> Optional[float]:
        return self.values[_HOST_INDEX[metric]]


@dataclass(frozen=True)
class NicSample:
    name: str
    kind: Optional[str]
    tx_bytes_per_s: Optional[float]
    rx_bytes_per_s: Optional[float]


@dataclass(frozen=True)
class WorkerSample:
    """One vLLM engine (or a worker's sum over its engines, engine "") as the agent scraped it."""

    id: str
    engine: str
    metrics: Tuple[Tuple[str, float], ...]  # (name, value); names from metric_registry.WORKER_METRICS
    error: Optional[str] = None

    @classmethod
    def of(
        cls, worker_id: str, engine: str, metrics: Mapping[str, Optional[float]], error: Optional[str] = None
    ) -> "WorkerSample":
        """The record of one scrape: values the scrape could not tell (None, or NaN / inf from a server's
        text) are left out, as the wire leaves out what is not known."""
        known = tuple((name, value) for name, value in metrics.items() if value is not None and math.isfinite(value))
        return cls(worker_id, engine, known, error)

    def value(self, metric: str) -> Optional[float]:
        for name, value in self.metrics:
            if name == metric:
                return value
        return None


@dataclass(frozen=True)
class Sample:
    seq: int
    ts: float
    simulated: bool
    gpus: Tuple[GpuSample, ...] = ()
    host: Optional[HostSample] = None
    nics: Tuple[NicSample, ...] = ()
    workers: Tuple[WorkerSample, ...] = ()

    @classmethod
    def from_wire(cls, obj: Any) -> "Sample":
        """Decode and check one wire SAMPLE; raises SampleError naming the first bad field."""
        data = _object(obj, "sample")
        seq = _int(data.get("seq"), "seq", 0, MAX_SEQ)
        ts = _number(data.get("ts"), "ts", MIN_TS, MAX_TS)
        if ts is None:
            raise SampleError("ts", "is required")
        simulated = data.get("simulated", False)
        if not isinstance(simulated, bool):
            raise SampleError("simulated", "must be true or false, got %s" % _describe(simulated))
        gpus = tuple(_gpu(raw, "gpus[%d]" % i) for i, raw in enumerate(_list(data.get("gpus"), "gpus", MAX_GPUS)))
        if len({gpu.index for gpu in gpus}) != len(gpus):
            raise SampleError("gpus", "lists a GPU index twice")
        host_raw = data.get("host")
        host = None
        if host_raw is not None:
            host_data = _object(host_raw, "host")
            host = HostSample(
                tuple(_number(host_data.get(m.name), "host." + m.name, m.low, m.high) for m in HOST_METRICS)
            )
        nics = tuple(_nic(raw, "nics[%d]" % i) for i, raw in enumerate(_list(data.get("nics"), "nics", MAX_NICS)))
        if len({nic.name for nic in nics}) != len(nics):
            raise SampleError("nics", "lists a NIC name twice")
        workers = tuple(
            _worker(raw, "workers[%d]" % i) for i, raw in enumerate(_list(data.get("workers"), "workers", MAX_WORKERS))
        )
        if len({(w.id, w.engine) for w in workers}) != len(workers):
            raise SampleError("workers", "lists one engine of a worker twice")
        return cls(seq, ts, simulated, gpus, host, nics, workers)

    def to_wire(self) -> Dict[str, Any]:
        """The wire dict (the inverse of from_wire for every field this record keeps)."""
        out: Dict[str, Any] = {"seq": self.seq, "ts": self.ts, "simulated": self.simulated}
        out["gpus"] = [_gpu_to_wire(gpu) for gpu in self.gpus]
        if self.host is not None:
            out["host"] = {m.name: v for m, v in zip(HOST_METRICS, self.host.values)}
        out["nics"] = [
            {"name": n.name, "kind": n.kind, "tx_bytes_per_s": n.tx_bytes_per_s, "rx_bytes_per_s": n.rx_bytes_per_s}
            for n in self.nics
        ]
        out["workers"] = [_worker_to_wire(w) for w in self.workers]
        return out


_GPU_INDEX = {m.name: i for i, m in enumerate(GPU_METRICS)}
_HOST_INDEX = {m.name: i for i, m in enumerate(HOST_METRICS)}


def _metric_values(
    metrics: Mapping[str, Optional[float]], index: Mapping[str, int], record: str
) -> Tuple[Optional[float], ...]:
    unknown = sorted(set(metrics).difference(index))
    if unknown:
        raise TypeError("%s.of: %s not in the metric registry" % (record, ", ".join(unknown)))
    return tuple(metrics.get(name) for name in index)


_GPU_BOUNDS = tuple((m.name, m.low, m.high) for m in GPU_METRICS)
_TX_LOW, _TX_HIGH = NVLINK_METRICS[0].low, NVLINK_METRICS[0].high
_RX_LOW, _RX_HIGH = NVLINK_METRICS[1].low, NVLINK_METRICS[1].high


def _gpu_values(data: Dict[str, Any], field: str) -> Tuple[Optional[float], ...]:
    """GPU_METRICS of one GPU in order. The common case (a plain int or float in range, or null) is checked
    inline; anything else goes through `_number`, which accepts or names the field (same verdicts)."""
    values: List[Optional[float]] = []
    for name, low, high in _GPU_BOUNDS:
        value = data.get(name)
        kind = type(value)
        if value is None:
            values.append(None)
        elif (kind is float or kind is int) and low <= value <= high:  # NaN fails the range check
            values.append(float(value))
        else:
            values.append(_number(value, "%s.%s" % (field, name), low, high))
    return tuple(values)


def _nvlink_link(pair: Any, field: str, link: int) -> Tuple[Optional[float], Optional[float]]:
    where = "%s.nvlink_links[%d]" % (field, link)
    if not isinstance(pair, list) or len(pair) != 2:
        raise SampleError(where, "must be a [tx, rx] pair")
    tx, rx = (_number(v, "%s[%d]" % (where, i), m.low, m.high) for i, (v, m) in enumerate(zip(pair, NVLINK_METRICS)))
    return tx, rx


def _nvlink_links(raw: Any, field: str) -> List[Tuple[Optional[float], Optional[float]]]:
    """Every [tx, rx] pair: plain numbers in range pass inline (18 links x 8 GPUs a sample), the rest go
    through `_nvlink_link`, which accepts them (nulls) or names the field."""
    links: List[Tuple[Optional[float], Optional[float]]] = []
    for link, pair in enumerate(_list(raw, field + ".nvlink_links", MAX_NVLINK_LINKS)):
        if type(pair) is list and len(pair) == 2:
            tx, rx = pair
            tx_kind, rx_kind = type(tx), type(rx)
            if (
                (tx_kind is int or tx_kind is float)
                and (rx_kind is int or rx_kind is float)
                and _TX_LOW <= tx <= _TX_HIGH
                and _RX_LOW <= rx <= _RX_HIGH
            ):
                links.append((float(tx), float(rx)))
                continue
        links.append(_nvlink_link(pair, field, link))
    return links


def _gpu(raw: Any, field: str) -> GpuSample:
    data = _object(raw, field)
    index = _int(data.get("index"), field + ".index", 0, MAX_GPUS - 1)
    values = _gpu_values(data, field)
    links = _nvlink_links(data.get("nvlink_links"), field)
    xids = []
    for i, event in enumerate(_list(data.get("xid_events"), field + ".xid_events", MAX_XID_EVENTS)):
        where = "%s.xid_events[%d]" % (field, i)
        event = _object(event, where)
        xids.append(
            XidEvent(
                _int(event.get("xid"), where + ".xid", 0, 2**31),
                _number(event.get("ts"), where + ".ts", MIN_TS, MAX_TS),
            )
        )
    processes = []
    for i, process in enumerate(_list(data.get("processes"), field + ".processes", MAX_PROCESSES)):
        where = "%s.processes[%d]" % (field, i)
        process = _object(process, where)
        processes.append(
            GpuProcess(
                _int(process.get("pid"), where + ".pid", 0, 2**31),
                _number(process.get("used_memory_bytes"), where + ".used_memory_bytes", 0.0, _PB),
            )
        )
    return GpuSample(
        index=index,
        uuid=_text(data.get("uuid"), field + ".uuid", optional=True),
        values=values,
        nvlink_links=tuple(links),
        xid_events=tuple(xids),
        remapped_rows_pending=_flag(data.get("remapped_rows_pending"), field + ".remapped_rows_pending"),
        processes=tuple(processes),
        remapped_rows_correctable=_number(
            data.get("remapped_rows_correctable"), field + ".remapped_rows_correctable", 0.0, 2.0**63
        ),
        remapped_rows_uncorrectable=_number(
            data.get("remapped_rows_uncorrectable"), field + ".remapped_rows_uncorrectable", 0.0, 2.0**63
        ),
        remapped_rows_failure=_flag(data.get("remapped_rows_failure"), field + ".remapped_rows_failure"),
    )


def _flag(value: Any, field: str) -> Optional[bool]:
    if value is not None and not isinstance(value, bool):
        raise SampleError(field, "must be true, false or null")
    return value


def _gpu_to_wire(gpu: GpuSample) -> Dict[str, Any]:
    out: Dict[str, Any] = {"index": gpu.index, "uuid": gpu.uuid}
    out.update(zip((m.name for m in GPU_METRICS), gpu.values))
    out["nvlink_links"] = [list(pair) for pair in gpu.nvlink_links]
    out["xid_events"] = [{"xid": e.xid, "ts": e.ts} for e in gpu.xid_events]
    out["remapped_rows_pending"] = gpu.remapped_rows_pending
    out["processes"] = [{"pid": p.pid, "used_memory_bytes": p.used_memory_bytes} for p in gpu.processes]
    for name in _NVML_EXTRAS:
        value = getattr(gpu, name)
        if value is not None:
            out[name] = value
    return out


_NVML_EXTRAS = ("remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_failure")


def _nic(raw: Any, field: str) -> NicSample:
    data = _object(raw, field)
    name = _text(data.get("name"), field + ".name")
    kind = data.get("kind")
    if kind is not None and kind not in NIC_KINDS:
        raise SampleError(field + ".kind", "must be one of %s, got %s" % (", ".join(NIC_KINDS), _describe(kind)))
    tx, rx = (_number(data.get(m.name), "%s.%s" % (field, m.name), m.low, m.high) for m in NIC_METRICS)
    return NicSample(str(name), kind, tx, rx)


def _worker(raw: Any, field: str) -> WorkerSample:
    data = _object(raw, field)
    worker_id = _text(data.get("id"), field + ".id")
    engine = data.get("engine")
    engine = "" if engine is None else _text(engine, field + ".engine")
    metrics_raw = data.get("metrics")
    metrics: List[Tuple[str, float]] = []
    if metrics_raw is not None:
        table = _object(metrics_raw, field + ".metrics")
        if len(table) > MAX_WORKER_METRICS:
            raise SampleError(field + ".metrics", "must have at most %d entries" % MAX_WORKER_METRICS)
        for name, raw_value in table.items():
            if not _METRIC_NAME.match(name):
                raise SampleError(field + ".metrics", "metric name %s is not a metric name" % _describe(name))
            value = _number(raw_value, "%s.metrics.%s" % (field, name), -MAX_WORKER_VALUE, MAX_WORKER_VALUE)
            if value is not None:
                metrics.append((name, value))
    error = data.get("error")
    if error is not None:
        if not isinstance(error, str):
            raise SampleError(field + ".error", "must be a string")
        error = error[:1000]
    return WorkerSample(str(worker_id), str(engine), tuple(metrics), error)


def _worker_to_wire(worker: WorkerSample) -> Dict[str, Any]:
    out: Dict[str, Any] = {"id": worker.id, "engine": worker.engine, "metrics": dict(worker.metrics)}
    if worker.error is not None:
        out["error"] = worker.error
    return out


def decode_samples_message(data: Any) -> Tuple[List[Any], int]:
    """The raw sample list and the `dropped` count of a `samples` event or a `samples.read` result.

    The list's entries are decoded one by one by the caller (one bad sample must not hide the others);
    a message whose envelope is wrong raises SampleError."""
    body = _object(data, "samples message")
    samples = body.get("samples")
    if samples is None:
        samples = []
    if not isinstance(samples, list):
        raise SampleError("samples", "must be a list, got %s" % type(samples).__name__)
    dropped = body.get("dropped", 0)
    if dropped is None:
        dropped = 0
    return samples, _int(dropped, "dropped", 0, MAX_DROPPED)


# A `samples` event with its name first, as the agent writes it (session.py): its samples are read one
# at a time from the line by `iter_event_samples`, so a 2 MiB backlog event is never ~30 MB of dicts
# decoded whole. The keys of its `data` may come in any order.
SAMPLES_EVENT_PREFIX = b'{"event":"samples","data":{'
_DECODER = json.JSONDecoder()
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_EVENT_END = re.compile(r"[ \t\n\r]*}[ \t\n\r]*$")


class _Text:
    """A cursor over one line of JSON text: the few steps a streaming read of an object needs."""

    def __init__(self, text: str, position: int) -> None:
        self.text = text
        self.position = position

    def skip(self) -> None:
        whitespace = _WHITESPACE.match(self.text, self.position)
        assert whitespace is not None  # the pattern matches the empty string, so it matches everywhere
        self.position = whitespace.end()

    def take(self, char: str) -> bool:
        self.skip()
        if self.text.startswith(char, self.position):
            self.position += 1
            return True
        return False

    def expect(self, chars: str) -> str:
        self.skip()
        char = self.text[self.position : self.position + 1]
        if not char or char not in chars:
            raise SampleError("samples", "expected one of %r at character %d" % (chars, self.position))
        self.position += 1
        return char

    def value(self) -> Any:
        self.skip()
        try:
            value, self.position = _DECODER.raw_decode(self.text, self.position)
        except (ValueError, RecursionError) as exc:
            raise SampleError("samples", "not JSON at character %d: %s" % (self.position, str(exc)[:100])) from None
        return value


def iter_event_samples(line: bytes) -> Iterator[Any]:
    """The raw samples of a line that starts with SAMPLES_EVENT_PREFIX, decoded one by one.

    Raises SampleError where the line stops being a samples event (samples already yielded stay whole
    JSON values; each still goes through `Sample.from_wire`). The event's other data keys (`dropped`)
    are read past: the sample gate counts losses from the seqs themselves."""
    try:
        text = _Text(line.decode("utf-8"), len(SAMPLES_EVENT_PREFIX))
    except UnicodeDecodeError as exc:
        raise SampleError("samples", "the line is not UTF-8 (%s)" % exc.reason) from None
    if not text.take("}"):
        while True:
            key = text.value()
            if not isinstance(key, str):
                raise SampleError("samples", "a key of the event's data is not a string (character %d)" % text.position)
            text.expect(":")
            if key == "samples":
                text.expect("[")
                if not text.take("]"):
                    while True:
                        yield text.value()
                        if text.expect(",]") == "]":
                            break
            else:
                text.value()
            if text.expect(",}") == "}":
                break
    if not _EVENT_END.match(text.text, text.position):
        raise SampleError("samples", "the event does not end after its data (character %d)" % text.position)
