"""Waiting for a launched part to be ready: port open, log line seen, process running — via the agents.

`LogFollower` keeps reading each worker's log from where it left off (`workers.logs {id, offset}`) and
counts pattern matches over whole lines (a line split across two reads counts once; two processes
writing one pipe can run their lines together, so every match in a line counts). Memory stays bounded
however the worker writes: a line longer than MAX_LINE_CHARS is matched in pieces of that size. Each
answer is decoded (`protocol.LogChunk`); a malformed one raises ProtocolError naming the field.
`ReadyProbe` answers one `ReadyCheck` at a time; the caller loops with its own deadline, cancellation
and crash detection.

`read_tail` is the one way a log's last lines are read (a launch that failed, `meshdeck deployments
logs`, the console's log tab): asked of the agent from the log's end, so a log of any length costs a
read or two. `read_log` reads a whole (short) log from its start, for a benchmark's result line.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from meshdeck_agent.protocol import BAD_REQUEST, LogChunk, ProtocolError

from meshdeck.launch.plan import ReadyCheck

MAX_LINE_CHARS = 65536  # a longer line (a worker that never writes a newline) is matched in pieces
TAIL_WINDOW_BYTES = 512 * 1024  # the most one `workers.logs` answer holds (the agent's MAX_LIMIT)
MAX_TAIL_BYTES = 4 * 1024 * 1024  # how far back a tail reads for its lines (a log of very long lines)

AgentCall = Callable[[str, str, dict[str, Any]], Any]  # (host, method, params) -> the agent's answer


@dataclass
class _Followed:
    host: str
    offset: int = 0
    partial: str = ""
    counts: dict[str, int] = field(default_factory=dict)


class LogFollower:
    """Incremental reader of worker logs through `call(host, "workers.logs", ...)`."""

    def __init__(self, call: AgentCall) -> None:
        self._call = call
        self._workers: dict[str, _Followed] = {}
        self._patterns: dict[str, re.Pattern[str]] = {}

    def follow(self, host: str, worker_id: str) -> None:
        self._workers.setdefault(worker_id, _Followed(host))

    def reset(self, worker_id: str) -> None:
        """Forget what was read (a restarted worker's log starts again from the agent's offset 0)."""
        if worker_id in self._workers:
            self._workers[worker_id] = _Followed(self._workers[worker_id].host)

    def watch(self, pattern: str) -> None:
        if pattern not in self._patterns:
            self._patterns[pattern] = re.compile(pattern)
            for followed in self._workers.values():
                followed.counts.setdefault(pattern, 0)

    def poll(self, worker_id: str) -> None:
        followed = self._workers[worker_id]
        for _ in range(8):  # at most a few MiB per poll; the rest next time
            reply = self._call(followed.host, "workers.logs", {"id": worker_id, "offset": followed.offset})
            chunk = LogChunk.from_wire(reply)
            data = chunk.data
            followed.offset = chunk.offset
            if not data:
                return
            text = followed.partial + data
            lines = text.split("\n")
            followed.partial = lines.pop()
            while len(followed.partial) > MAX_LINE_CHARS:  # a line without end: matched in pieces
                lines.append(followed.partial[:MAX_LINE_CHARS])
                followed.partial = followed.partial[MAX_LINE_CHARS:]
            for line in lines:
                for source, pattern in self._patterns.items():
                    found = sum(1 for _ in pattern.finditer(line))
                    if found:
                        followed.counts[source] = followed.counts.get(source, 0) + found

    def count(self, pattern: str, worker_ids: list[str]) -> int:
        self.watch(pattern)
        total = 0
        for worker_id in worker_ids:
            self.poll(worker_id)
            followed = self._workers[worker_id]
            total += followed.counts.get(pattern, 0)
            if followed.partial:  # a last line without its newline yet
                total += sum(1 for _ in self._patterns[pattern].finditer(followed.partial))
        return total


class ReadyProbe:
    """One readiness check, asked of the agents. `running_since` comes from the deployment's worker states."""

    def __init__(self, call: AgentCall, logs: LogFollower) -> None:
        self._call = call
        self._logs = logs

    def passed(
        self,
        check: ReadyCheck,
        *,
        host: str,
        address: str,
        worker_ids: list[str],
        running_since: float | None,
    ) -> bool:
        if check.kind == "tcp":
            reply = self._call(host, "checks.tcp_connect", {"host": address, "port": check.port, "timeout_s": 2})
            ok = reply.get("ok") if isinstance(reply, dict) else None
            if not isinstance(ok, bool):
                raise ProtocolError(BAD_REQUEST, "checks.tcp_connect.ok: must be true or false")
            return ok
        if check.kind == "log":
            return self._logs.count(check.pattern or "", worker_ids) >= check.count
        if check.kind == "running":
            return running_since is not None and time.monotonic() - running_since >= check.settle_s
        raise ValueError(f"unknown ready check {check.kind!r}")


@dataclass(frozen=True)
class LogTail:
    text: str  # the last lines, as the worker wrote them (raw: escape before showing), without the last line end
    end: int  # the log offset right after them, where reading on continues
    ends_line: bool = True  # the log ended with a line end there (else its last line is still being written)


def read_tail(call: AgentCall, host: str, worker_id: str, lines: int) -> LogTail:
    """The last `lines` lines of a worker's log, read from its end: one `workers.logs` answer without an
    offset (the agent's tail), then earlier windows while fewer lines came back, at most MAX_TAIL_BYTES in
    all. Raises ProtocolError (a malformed answer) or the call's error."""
    chunk = LogChunk.from_wire(call(host, "workers.logs", {"id": worker_id, "limit": TAIL_WINDOW_BYTES}))
    text = chunk.data
    start = chunk.start if chunk.start is not None else max(0, chunk.offset - len(text.encode("utf-8")))
    while text.count("\n") <= lines and start > 0 and len(text) < MAX_TAIL_BYTES:
        begin = max(0, start - TAIL_WINDOW_BYTES)
        earlier = LogChunk.from_wire(
            call(host, "workers.logs", {"id": worker_id, "offset": begin, "limit": start - begin})
        )
        if not earlier.data or earlier.offset > start:  # rotated away meanwhile: what was read is the tail
            break
        text = earlier.data + text
        start = earlier.start if earlier.start is not None else begin
    kept = text.splitlines()[-lines:] if lines > 0 else []
    ends_line = not text or text.splitlines(keepends=True)[-1] != text.splitlines()[-1]
    return LogTail("\n".join(kept), chunk.offset, ends_line)


def read_log(call: AgentCall, host: str, worker_id: str, *, offset: int = 0, max_bytes: int = 8 << 20) -> str:
    """A worker's log from `offset` to its end (at most `max_bytes`), through `workers.logs`."""
    parts: list[str] = []
    size = 0
    while size < max_bytes:
        chunk = LogChunk.from_wire(call(host, "workers.logs", {"id": worker_id, "offset": offset}))
        if not chunk.data:
            break
        parts.append(chunk.data)
        size += len(chunk.data)
        offset = chunk.offset
    return "".join(parts)
