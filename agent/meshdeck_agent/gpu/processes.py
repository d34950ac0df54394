"""The `processes` answer: which processes hold each GPU, who runs them, and which worker they belong to.

A backend lists, per GPU, the pids it sees there with their GPU memory (`RawGpuProcesses`: NVML's compute
and graphics lists on a real server, the stand-ins' pids on a simulated one); `build_listing` adds what
/proc says of each (procinfo.ProcReader: user, command line) and the agent's worker it belongs to: the
worker's own process or a descendant of it (a vLLM API server's engine cores and their GPU workers), found
by walking the process's ancestors, else by its session (a worker leads its own session, so a descendant
that its parent left behind still names it). A worker's pid counts only with the start time the agent
recorded for it, so a recycled pid is never taken for a worker.

A pid NVML lists that /proc lacks has either just ended or lives in another PID namespace (an agent in a
container). The backend is asked once more: a pid still listed is kept, with its user and command null; one
gone from the second list ended between the two reads and is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from ..metric_registry import PETABYTE
from ..procinfo import ProcessGone, ProcReader, ProcStat
from ..wire_processes import (
    MAX_PROCESSES,
    MAX_PROCESSES_PER_GPU,
    MAX_REASON_CHARS,
    MAX_WORKER_NAME_CHARS,
    GpuProcesses,
    GpuProcessInfo,
    ProcessListing,
    ProcessWorker,
    wire_text,
)

MAX_ANCESTRY = 64  # parents walked from a GPU process up to init; real trees are a handful deep
NVML_VALUE_NOT_AVAILABLE = 2**64 - 1  # what NVML's unsigned long long fields hold when it cannot tell
COMPUTE = "compute"
GRAPHICS = "graphics"


@dataclass(frozen=True)
class RawGpuProcesses:
    """What a backend sees on one GPU: (pid, kind, used GPU memory in bytes or None) per process."""

    index: int
    uuid: Optional[str]
    processes: Tuple[Tuple[int, str, Optional[int]], ...] = ()


# pid -> (its start time as the agent recorded it, or None when unknown; the worker)
Owners = Mapping[int, Tuple[Optional[int], ProcessWorker]]


def nvml_bytes(value: object) -> Optional[int]:
    """A memory amount from NVML as bytes, or None when NVML could not tell: NVML_VALUE_NOT_AVAILABLE (the
    raw struct of an older pynvml), None (a newer pynvml already maps it), or anything not a sane count."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    if value >= NVML_VALUE_NOT_AVAILABLE or value > PETABYTE:
        return None
    return value


def merge(index: int, uuid: Optional[str], lists: Mapping[str, object]) -> RawGpuProcesses:
    """One GPU's processes from NVML's lists per kind ({"compute": [c_nvmlProcessInfo_t, ...], "graphics": ...}).
    A pid in both lists is "compute+graphics" with the larger of its amounts; a pid listed twice in one list
    (one entry per MIG instance) has them added up."""
    kinds: Dict[int, List[str]] = {}
    memory: Dict[int, Dict[str, Optional[int]]] = {}
    for kind, entries in lists.items():
        for entry in entries if isinstance(entries, (list, tuple)) else ():
            pid = getattr(entry, "pid", None)
            if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
                continue
            used = nvml_bytes(getattr(entry, "usedGpuMemory", None))
            by_kind = memory.setdefault(pid, {})
            if kind in by_kind:
                earlier = by_kind[kind]
                by_kind[kind] = None if earlier is None or used is None else earlier + used
            else:
                by_kind[kind] = used
                kinds.setdefault(pid, []).append(kind)
    processes = []
    for pid in sorted(kinds):
        known = [v for v in memory[pid].values() if v is not None]
        kind = "+".join(k for k in (COMPUTE, GRAPHICS) if k in kinds[pid])
        processes.append((pid, kind, max(known) if known else None))
    return RawGpuProcesses(index, uuid, tuple(processes))


class _Lookup:
    """/proc looked up once per pid for one answer (GPU processes share parents and appear on several GPUs)."""

    def __init__(self, reader: ProcReader, owners: Owners) -> None:
        self.reader = reader
        self.owners = owners
        self._stats: Dict[int, Optional[ProcStat]] = {}
        self._described: Dict[int, Optional[GpuProcessInfo]] = {}

    def stat(self, pid: int) -> Optional[ProcStat]:
        if pid not in self._stats:
            try:
                self._stats[pid] = self.reader.stat(pid)
            except ProcessGone:
                self._stats[pid] = None
        return self._stats[pid]

    def _is_worker(self, pid: int) -> Optional[ProcessWorker]:
        owner = self.owners.get(pid)
        if owner is None:
            return None
        start_time, worker = owner
        stat = self.stat(pid)
        return worker if stat is not None and (start_time is None or stat.start_time == start_time) else None

    def worker_of(self, pid: int, stat: ProcStat) -> Optional[ProcessWorker]:
        current, seen = pid, set()
        for _ in range(MAX_ANCESTRY):
            worker = self._is_worker(current)
            if worker is not None:
                return worker
            seen.add(current)
            current_stat = self.stat(current)
            if current_stat is None or current_stat.ppid <= 1 or current_stat.ppid in seen:
                break
            current = current_stat.ppid
        return self._is_worker(stat.session) if stat.session > 1 else None

    def describe(self, pid: int) -> Optional[GpuProcessInfo]:
        """The process's /proc facts (kind and memory left for the caller), or None when it is not in /proc."""
        if pid not in self._described:
            self._described[pid] = self._describe(pid)
        return self._described[pid]

    def _describe(self, pid: int) -> Optional[GpuProcessInfo]:
        stat = self.stat(pid)
        if stat is None:
            return None
        try:
            uid = self.reader.uid(pid)
            command, cut = self.reader.command(pid)
        except ProcessGone:
            return None
        return GpuProcessInfo(
            pid=pid,
            kind=COMPUTE,
            uid=uid,
            user=self.reader.user(uid),
            command=command,
            command_truncated=cut,
            worker=self.worker_of(pid, stat),
        )


Listing = Callable[[], Tuple[List[RawGpuProcesses], Optional[str]]]


def build_listing(
    listing: Listing, reader: ProcReader, owners: Owners, *, simulated: bool, now: float
) -> ProcessListing:
    """The `processes` answer: `listing()` (the backend's GPUs and pids, and why it has no GPU) joined with /proc
    and the workers."""
    raw, reason = listing()
    lookup = _Lookup(reader, owners)
    omitted = 0
    total = 0
    kept: List[Tuple[RawGpuProcesses, List[Tuple[int, str, Optional[int]]]]] = []
    for gpu in raw:
        room = max(0, min(MAX_PROCESSES_PER_GPU, MAX_PROCESSES - total))
        entries = list(gpu.processes[:room])
        omitted += len(gpu.processes) - len(entries)
        total += len(entries)
        kept.append((gpu, entries))
    missing = {pid for _gpu, entries in kept for pid, _kind, _used in entries if lookup.describe(pid) is None}
    still_listed = set()
    if missing:
        still_listed = {pid for gpu in listing()[0] for pid, _kind, _used in gpu.processes if pid in missing}
    gpus = []
    for gpu, entries in kept:
        processes = []
        for pid, kind, used in entries:
            described = lookup.describe(pid)
            if described is None and pid not in still_listed:
                continue  # it ended between NVML's list and /proc
            base = described or GpuProcessInfo(pid=pid, kind=kind)
            processes.append(
                GpuProcessInfo(
                    pid=pid,
                    kind=kind,
                    used_memory_bytes=used,
                    uid=base.uid,
                    user=base.user,
                    command=base.command,
                    command_truncated=base.command_truncated,
                    worker=base.worker,
                )
            )
        gpus.append(GpuProcesses(gpu.index, gpu.uuid, tuple(processes)))
    cut_reason = wire_text(reason, MAX_REASON_CHARS) if reason and not gpus else None
    return ProcessListing(ts=now, simulated=simulated, gpus=tuple(gpus), omitted=omitted, reason=cut_reason)


def worker_ref(worker_id: str, name: str) -> ProcessWorker:
    """A worker as the answer names it (its name cut to the wire's bound)."""
    return ProcessWorker(worker_id, wire_text(name, MAX_WORKER_NAME_CHARS))
