"""Waiting for a launched part to be ready: port open, log line seen, process running — via the agents.

`LogFollower` keeps reading each worker's log from where it left off (`workers.logs {id, offset}`),
counts pattern matches over whole lines (a line split across two reads counts once; two processes
writing one pipe can run their lines together, so every match in a line counts) and keeps the tail
for error messages. Memory stays bounded however the worker writes: a line longer than
MAX_LINE_CHARS is matched in pieces of that size. Each answer is decoded (`protocol.LogChunk`); a
malformed one raises ProtocolError naming the field. `ReadyProbe` answers one `ReadyCheck` at a time; the caller loops with its
own deadline, cancellation and crash detection.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from meshdeck_agent.protocol import BAD_REQUEST, LogChunk, ProtocolError

from meshdeck.launch.plan import ReadyCheck

TAIL_CHARS = 4000
RECENT_BYTES = 64 << 10  # of a failed part's log, searched for its own last word
MAX_LINE_CHARS = 65536  # a longer line (a worker that never writes a newline) is matched in pieces


@dataclass
class _Followed:
    host: str
    offset: int = 0
    partial: str = ""
    tail: str = ""
    counts: dict[str, int] = field(default_factory=dict)


class LogFollower:
    """Incremental reader of worker logs through `call(host, "workers.logs", ...)`."""

    def __init__(self, call: Callable[..., Any]) -> None:
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
            followed.tail = (followed.tail + data)[-TAIL_CHARS:]

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

    def recent(self, worker_id: str, max_bytes: int = RECENT_BYTES) -> str:
        """Up to the last `max_bytes` of the worker's log, read again from the agent (the tail kept here is
        short): where a failed part's own last word is looked for."""
        followed = self._workers.get(worker_id)
        if followed is None:
            return ""
        with contextlib.suppress(Exception):  # the agent may be gone; what was kept is all there is
            self.poll(worker_id)
            start = max(0, followed.offset - max_bytes)
            return read_log(self._call, followed.host, worker_id, offset=start, max_bytes=max_bytes)
        return followed.tail + followed.partial

    def tail(self, worker_id: str, lines: int = 15) -> str:
        followed = self._workers.get(worker_id)
        if followed is None:
            return ""
        with contextlib.suppress(Exception):  # the agent may be gone; show what was read
            self.poll(worker_id)
        text = (followed.tail + followed.partial).rstrip("\n")
        return "\n".join(text.splitlines()[-lines:])


class ReadyProbe:
    """One readiness check, asked of the agents. `running_since` comes from the deployment's worker states."""

    def __init__(self, call: Callable[..., Any], logs: LogFollower) -> None:
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
            if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
                raise ProtocolError(BAD_REQUEST, "checks.tcp_connect.ok: must be true or false")
            return reply["ok"]
        if check.kind == "log":
            return self._logs.count(check.pattern or "", worker_ids) >= check.count
        if check.kind == "running":
            return running_since is not None and time.monotonic() - running_since >= check.settle_s
        raise ValueError(f"unknown ready check {check.kind!r}")


def read_log(call: Callable[..., Any], host: str, worker_id: str, *, offset: int = 0, max_bytes: int = 8 << 20) -> str:
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
