"""Which processes hold each GPU of a host — nvitop's process table — as its agent reports them.

    listing = fetch_processes(fleet, "gpu-a")           # HostProcesses; raises ProcessesUnavailable
    for row in listing.rows: row.gpu, row.pid, row.user_text, row.memory_gib, row.owner_text, row.command_text

    poller = ProcessPoller(fleet, on_done)               # the console: off the GUI thread, one request per host
    poller.request("gpu-a"); ...; poller.close()

The agent's `processes` answer is decoded once, here (meshdeck_agent.wire_processes.ProcessListing), and each
process it names is joined with the deployment its worker belongs to: a meshdeck worker is named
`meshdeck:<deployment>:<stage>:<command>` (services.deployments.model), so the row says "ds32-0101-ab12 /
vllm-node0" without asking the store. An agent that predates the method answers `unknown_method`: that is
`ProcessesUnavailable` saying the agent is too old to list processes and what to do. The records keep what
the agent sent; the `*_text` properties are what a terminal or a widget shows (escaped, cut).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from meshdeck_agent.protocol import UNKNOWN_METHOD, ProcessListing, ProcessListingError

from meshdeck.core.text import printable
from meshdeck.remote.errors import RemoteError, RpcError
from meshdeck.services.deployments.model import parse_worker_name

log = logging.getLogger(__name__)

METHOD = "processes"
TIMEOUT_S = 15.0
SHOWN_NAME_CHARS = 64
MAX_PARALLEL = 4  # hosts asked at once by a poller; the rest wait their turn on its pool
GIB = float(1 << 30)


class ProcessesUnavailable(Exception):
    """The host's processes could not be listed: `message` says why and what to do (one line, escaped);
    `too_old` when its agent predates the `processes` method."""

    def __init__(self, host: str, message: str, *, too_old: bool = False) -> None:
        super().__init__(message)
        self.host = host
        self.message = message
        self.too_old = too_old


class Asker(Protocol):
    """What fetching needs of the fleet (FleetService): a call to a host's agent."""

    def call(
        self, host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None
    ) -> Any: ...


@dataclass(frozen=True)
class ProcessRow:
    """One process on one GPU of a host, as its agent said, with the meshdeck deployment it belongs to."""

    host: str
    gpu: int
    pid: int
    kind: str  # compute | graphics | compute+graphics
    used_memory_bytes: int | None
    uid: int | None
    user: str | None
    command: str | None
    command_truncated: bool
    worker_id: str | None  # the agent's worker it belongs to (its own process or a descendant)
    worker_name: str | None
    deployment: str | None  # parsed from a meshdeck worker's name
    part: str | None  # the deployment's command (vllm-node0, ...)

    @property
    def memory_gib(self) -> float | None:
        return None if self.used_memory_bytes is None else self.used_memory_bytes / GIB

    @property
    def memory_text(self) -> str:
        gib = self.memory_gib
        return "n/a" if gib is None else f"{gib:.2f} GiB"

    @property
    def kind_code(self) -> str:
        """nvitop's TYPE column: C (compute), G (graphics), C+G."""
        return {"compute": "C", "graphics": "G"}.get(self.kind, "C+G")

    @property
    def user_text(self) -> str:
        if self.user is not None:
            return printable(self.user, SHOWN_NAME_CHARS)
        return "?" if self.uid is None else str(self.uid)

    @property
    def command_text(self) -> str:
        """The command line as the agent sent it (at most 1024 characters), escaped; "…" when the agent cut it."""
        if self.command is None:
            return "? (not visible to the agent: another PID namespace, or hidden)"
        return printable(self.command) + ("…" if self.command_truncated else "")

    @property
    def owner_text(self) -> str:
        """Which meshdeck deployment and part holds the GPU ("" when the process is none of the agent's workers)."""
        if self.deployment is not None:
            return f"{printable(self.deployment, SHOWN_NAME_CHARS)} / {printable(self.part or '', SHOWN_NAME_CHARS)}"
        if self.worker_id is not None:
            return f"worker {printable(self.worker_id, SHOWN_NAME_CHARS)}"
        return ""

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "pid": self.pid,
            "type": self.kind,
            "used_memory_bytes": self.used_memory_bytes,
            "uid": self.uid,
            "user": self.user,
            "command": self.command,
            "command_truncated": self.command_truncated,
            "worker": None if self.worker_id is None else {"id": self.worker_id, "name": self.worker_name},
            "deployment": self.deployment,
            "part": self.part,
        }


@dataclass(frozen=True)
class HostProcesses:
    """One host's answer: every GPU index it has (those without processes too) and a row per process."""

    host: str
    ts: float
    simulated: bool
    gpus: tuple[int, ...]
    rows: tuple[ProcessRow, ...]
    omitted: int = 0
    reason: str | None = None  # why the host lists no GPU (as the agent said it; escape to show)

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "ts": self.ts,
            "simulated": self.simulated,
            "gpus": list(self.gpus),
            "processes": [row.to_json() for row in self.rows],
            "omitted": self.omitted,
            "reason": self.reason,
        }


def rows_of(host: str, listing: ProcessListing) -> HostProcesses:
    """A decoded answer as rows (GPU order, then the most memory first, then pid), each with its deployment."""
    rows = []
    for gpu in sorted(listing.gpus, key=lambda g: g.index):
        for process in gpu.processes:
            worker = process.worker
            parsed = parse_worker_name(worker.name) if worker is not None else None
            rows.append(
                ProcessRow(
                    host=host,
                    gpu=gpu.index,
                    pid=process.pid,
                    kind=process.kind,
                    used_memory_bytes=process.used_memory_bytes,
                    uid=process.uid,
                    user=process.user,
                    command=process.command,
                    command_truncated=process.command_truncated,
                    worker_id=worker.id if worker is not None else None,
                    worker_name=worker.name if worker is not None else None,
                    deployment=parsed[0] if parsed else None,
                    part=parsed[2] if parsed else None,
                )
            )
    rows.sort(key=lambda r: (r.gpu, -(r.used_memory_bytes or 0), r.pid))
    gpus = tuple(sorted(g.index for g in listing.gpus))
    return HostProcesses(host, listing.ts, listing.simulated, gpus, tuple(rows), listing.omitted, listing.reason)


def fetch_processes(
    fleet: Asker, host: str, *, agent_version: str | None = None, timeout_s: float = TIMEOUT_S
) -> HostProcesses:
    """Ask `host`'s agent which processes hold its GPUs. Blocks up to `timeout_s`: call it off the GUI thread.
    Raises ProcessesUnavailable (one line, naming the host, escaped) when the agent cannot say."""
    try:
        answer = fleet.call(host, METHOD, {}, timeout=timeout_s)
    except RpcError as exc:
        if exc.code == UNKNOWN_METHOD:
            version = f" (meshdeck-agent {printable(agent_version, SHOWN_NAME_CHARS)})" if agent_version else ""
            raise ProcessesUnavailable(
                host,
                f"{printable(host, SHOWN_NAME_CHARS)}: this agent is too old to list processes{version}; restart "
                "the agent on that host so meshdeck starts the current one (its workers keep running)",
                too_old=True,
            ) from None
        raise ProcessesUnavailable(host, printable(str(exc), 500)) from None
    except RemoteError as exc:  # not connected, no answer in time, connection lost
        raise ProcessesUnavailable(host, printable(str(exc) or type(exc).__name__, 500)) from None
    try:
        listing = ProcessListing.from_wire(answer)
    except ProcessListingError as exc:
        log.warning("%s: malformed answer to processes: %s", printable(host), printable(str(exc)))
        raise ProcessesUnavailable(
            host, f"{printable(host, SHOWN_NAME_CHARS)}: the agent's processes.{exc.field} is malformed: {exc.problem}"
        ) from None
    return rows_of(host, listing)


Outcome = HostProcesses | ProcessesUnavailable
OnDone = Callable[[str, Outcome], None]


class ProcessPoller:
    """Asks hosts for their processes on a small pool (threads start with the first request): at most one
    request in flight per host, so a slow host is never asked again before it answered, and at most
    MAX_PARALLEL at once. `on_done(host, outcome)` runs on a pool thread; `close` lets the pool go."""

    def __init__(
        self,
        fleet: Asker,
        on_done: OnDone,
        *,
        agent_version: Callable[[str], str | None] | None = None,
        timeout_s: float = TIMEOUT_S,
        max_parallel: int = MAX_PARALLEL,
    ) -> None:
        self._fleet = fleet
        self._on_done = on_done
        self._agent_version = agent_version or (lambda _host: None)
        self._timeout_s = timeout_s
        self._max_parallel = max_parallel
        self._lock = threading.Lock()
        self._in_flight: set[str] = set()
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    def request(self, host: str) -> bool:
        """Ask `host` unless a request to it is in flight (False then, or once closed)."""
        with self._lock:
            if self._closed or host in self._in_flight:
                return False
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self._max_parallel, thread_name_prefix="processes")
            self._in_flight.add(host)
            pool = self._pool
        pool.submit(self._ask, host)
        return True

    def in_flight(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._in_flight)

    def _ask(self, host: str) -> None:
        outcome: Outcome
        try:
            outcome = fetch_processes(
                self._fleet, host, agent_version=self._agent_version(host), timeout_s=self._timeout_s
            )
        except ProcessesUnavailable as exc:
            outcome = exc
        except Exception as exc:  # a bug must not leave the host "in flight" for good
            log.exception("listing the processes of %s failed", printable(host))
            outcome = ProcessesUnavailable(host, printable(f"{host}: {type(exc).__name__}: {exc}", 500))
        finally:
            with self._lock:
                self._in_flight.discard(host)
                closed = self._closed
        if not closed:
            self._on_done(host, outcome)

    def close(self, wait: bool = False) -> None:
        """No more requests; queued ones are dropped, one in flight ends unheard (within its timeout)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=wait, cancel_futures=True)
