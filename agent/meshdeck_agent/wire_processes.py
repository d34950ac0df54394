"""The `processes` answer as typed records: which processes hold each GPU, checked once where it enters the app.

nvitop's process panel for a meshdeck host: per GPU, the processes NVML lists as running on it (compute,
graphics or both), each with the GPU memory NVML accounts to it, its user and command line read from /proc,
and the agent's worker it belongs to (the worker's own process or one of its descendants, e.g. a vLLM
engine core). Wire form (protocol.py's `processes` method):

    {"ts": 1764480000.2, "simulated": false, "omitted": 0, "reason": null,
     "gpus": [{"index": 0, "uuid": "GPU-...",
               "processes": [{"pid": 4242, "kind": "compute", "used_memory_bytes": 75161927680 | null,
                              "uid": 1000 | null, "user": "alice" | null,
                              "command": "python3 -m vllm.entrypoints..." | null, "command_truncated": false,
                              "worker": {"id": "ds32-0101.vllm-node0", "name": "meshdeck:ds32-0101:0:vllm-node0"}
                                        | null}]}]}

`used_memory_bytes` is null where NVML cannot tell (NVML_VALUE_NOT_AVAILABLE: a WDDM driver, some
containers); `uid`, `user` and `command` are null where /proc does not say (another PID namespace, a
process of another user under hidepid). `omitted` counts processes left out past the bounds below;
`reason` says why no GPU is listed (no NVML on this server). The agent cuts what it sends to these bounds
(a command line to MAX_COMMAND_CHARS, `command_truncated` then true), so the app's decoder refuses only
an answer no agent of ours sends: `ProcessListing.from_wire` raises `ProcessListingError` naming the
field. Strings are kept as sent (escape codes included): whoever shows them escapes them. Unknown keys
are ignored (a newer agent may add some within protocol 1). Stdlib only, Python 3.9.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from .metric_registry import PETABYTE

MAX_GPUS = 1024
MAX_PROCESSES_PER_GPU = 1024
MAX_PROCESSES = 4096  # all GPUs together: 4096 entries of at most ~1.5 KB stay well inside a 4 MiB line
MAX_COMMAND_CHARS = 1024
MAX_USER_CHARS = 256
MAX_WORKER_ID_CHARS = 64  # protocol.WORKER_ID_PATTERN
MAX_WORKER_NAME_CHARS = 256
MAX_REASON_CHARS = 2000
MAX_PID = 2**31
MAX_UID = 2**32 - 1
MIN_TS = 946_684_800.0  # as wire_sample: 2000-01-01 .. 2100-01-01
MAX_TS = 4_102_444_800.0
PROCESS_KINDS = ("compute", "graphics", "compute+graphics")


class ProcessListingError(ValueError):
    """A `processes` answer that breaks the shape or a bound; `field` is its path."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__("%s: %s" % (field, problem))
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class ProcessWorker:
    """The agent's worker a process belongs to: its id and name (meshdeck names its deployments' workers
    `meshdeck:<deployment>:<stage>:<command>`)."""

    id: str
    name: str = ""


@dataclass(frozen=True)
class GpuProcessInfo:
    pid: int
    kind: str  # one of PROCESS_KINDS
    used_memory_bytes: Optional[int] = None
    uid: Optional[int] = None
    user: Optional[str] = None
    command: Optional[str] = None
    command_truncated: bool = False
    worker: Optional[ProcessWorker] = None

    def to_wire(self) -> Dict[str, Any]:
        worker = None if self.worker is None else {"id": self.worker.id, "name": self.worker.name}
        return {
            "pid": self.pid,
            "kind": self.kind,
            "used_memory_bytes": self.used_memory_bytes,
            "uid": self.uid,
            "user": self.user,
            "command": self.command,
            "command_truncated": self.command_truncated,
            "worker": worker,
        }


@dataclass(frozen=True)
class GpuProcesses:
    """One GPU and the processes on it."""

    index: int
    uuid: Optional[str]
    processes: Tuple[GpuProcessInfo, ...] = ()


@dataclass(frozen=True)
class ProcessListing:
    """The answer to `processes`: every GPU of the server with its processes, at `ts` (the agent's clock)."""

    ts: float
    simulated: bool
    gpus: Tuple[GpuProcesses, ...] = ()
    omitted: int = 0  # processes left out past MAX_PROCESSES_PER_GPU / MAX_PROCESSES
    reason: Optional[str] = None  # why no GPU is listed (no NVML), else None

    def to_wire(self) -> Dict[str, Any]:
        return {
            "ts": self.ts,
            "simulated": self.simulated,
            "omitted": self.omitted,
            "reason": self.reason,
            "gpus": [
                {"index": g.index, "uuid": g.uuid, "processes": [p.to_wire() for p in g.processes]} for g in self.gpus
            ],
        }

    @classmethod
    def from_wire(cls, obj: Any) -> "ProcessListing":
        """Decode and check one `processes` answer; raises ProcessListingError naming the first bad field."""
        data = _object(obj, "processes")
        ts = _number(data.get("ts"), "ts", MIN_TS, MAX_TS)
        simulated = data.get("simulated", False)
        if not isinstance(simulated, bool):
            raise ProcessListingError("simulated", "must be true or false, got %s" % _describe(simulated))
        omitted = _int(data.get("omitted", 0), "omitted", 0, 2**53)
        reason = _text(data.get("reason"), "reason", MAX_REASON_CHARS, optional=True)
        gpus: List[GpuProcesses] = []
        total = 0
        for i, raw in enumerate(_list(data.get("gpus"), "gpus", MAX_GPUS)):
            gpu = _gpu(raw, "gpus[%d]" % i)
            total += len(gpu.processes)
            if total > MAX_PROCESSES:
                raise ProcessListingError("gpus", "must list at most %d processes in all" % MAX_PROCESSES)
            gpus.append(gpu)
        if len({gpu.index for gpu in gpus}) != len(gpus):
            raise ProcessListingError("gpus", "lists a GPU index twice")
        return cls(ts, simulated, tuple(gpus), omitted, reason)


def _gpu(raw: Any, field: str) -> GpuProcesses:
    data = _object(raw, field)
    index = _int(data.get("index"), field + ".index", 0, MAX_GPUS - 1)
    uuid = _text(data.get("uuid"), field + ".uuid", MAX_USER_CHARS, optional=True)
    processes = tuple(
        _process(p, "%s.processes[%d]" % (field, i))
        for i, p in enumerate(_list(data.get("processes"), field + ".processes", MAX_PROCESSES_PER_GPU))
    )
    if len({p.pid for p in processes}) != len(processes):
        raise ProcessListingError(field + ".processes", "lists a pid twice")
    return GpuProcesses(index, uuid, processes)


def _process(raw: Any, field: str) -> GpuProcessInfo:
    data = _object(raw, field)
    kind = data.get("kind")
    if kind not in PROCESS_KINDS:
        raise ProcessListingError(
            field + ".kind", "must be one of %s, got %s" % (", ".join(PROCESS_KINDS), _describe(kind))
        )
    memory = data.get("used_memory_bytes")
    truncated = data.get("command_truncated", False)
    if not isinstance(truncated, bool):
        raise ProcessListingError(field + ".command_truncated", "must be true or false, got %s" % _describe(truncated))
    worker_raw = data.get("worker")
    worker = None
    if worker_raw is not None:
        where = field + ".worker"
        worker_data = _object(worker_raw, where)
        worker_id = _text(worker_data.get("id"), where + ".id", MAX_WORKER_ID_CHARS)
        if not worker_id:
            raise ProcessListingError(where + ".id", "must not be empty")
        worker = ProcessWorker(
            worker_id, _text(worker_data.get("name", ""), where + ".name", MAX_WORKER_NAME_CHARS) or ""
        )
    return GpuProcessInfo(
        pid=_int(data.get("pid"), field + ".pid", 0, MAX_PID),
        kind=kind,
        used_memory_bytes=None if memory is None else _int(memory, field + ".used_memory_bytes", 0, int(PETABYTE)),
        uid=None if data.get("uid") is None else _int(data.get("uid"), field + ".uid", 0, MAX_UID),
        user=_text(data.get("user"), field + ".user", MAX_USER_CHARS, optional=True),
        command=_text(data.get("command"), field + ".command", MAX_COMMAND_CHARS, optional=True),
        command_truncated=truncated,
        worker=worker,
    )


def _describe(value: Any) -> str:
    text = (
        repr(value)
        if not isinstance(value, int) or value.bit_length() < 200
        else "<a %d-bit integer>" % value.bit_length()
    )
    return text if len(text) <= 60 else text[:57] + "..."


def _object(value: Any, field: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise ProcessListingError(field, "must be an object, got %s" % type(value).__name__)
    return value


def _list(value: Any, field: str, limit: int) -> List[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProcessListingError(field, "must be a list, got %s" % type(value).__name__)
    if len(value) > limit:
        raise ProcessListingError(field, "must have at most %d entries, got %d" % (limit, len(value)))
    return value


def _int(value: Any, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ProcessListingError(field, "must be an integer from %d to %d, got %s" % (low, high, _describe(value)))
    return value


def _number(value: Any, field: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:  # NaN fails
        raise ProcessListingError(field, "must be a number from %g to %g, got %s" % (low, high, _describe(value)))
    return float(value)


def _text(value: Any, field: str, limit: int, *, optional: bool = False) -> Optional[str]:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ProcessListingError(
            field, "must be a string%s, got %s" % (" or null" if optional else "", _describe(value))
        )
    if len(value) > limit:
        raise ProcessListingError(field, "must be at most %d characters, got %d" % (limit, len(value)))
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ProcessListingError(field, "is not valid text (it holds an unpaired surrogate)") from None
    return value


def wire_text(value: str, limit: int) -> str:
    """`value` as the agent sends it: cut to `limit` characters, and valid UTF-8 (a user name or worker name
    that holds undecodable bytes, as surrogate escapes, gets U+FFFD in their place)."""
    value = value[:limit]
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")[:limit]
    return value
