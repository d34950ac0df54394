"""Tailing a worker's log for the lines that matter (logparse.py) while the supervisor polls.

`catch_up_log` reads what was written since the last poll, keeps an unfinished last line for the next
one, feeds vLLM startup lines to the simulated-GPU tracker, and emits `log` events (at most
LOG_EVENTS_PER_POLL per poll; the rest are counted in one `alert`). A re-adopting agent calls
`replay_log` (tracker only, nothing re-sent) and `skip_log` (start tailing at the end).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict

from .logparse import parse_line
from .worker_logs import read_log
from .worker_state import WorkerRecord

LOG_EVENTS_PER_POLL = 200


def skip_log(record: WorkerRecord) -> None:
    """Start tailing at the end: what a previous agent already reported is not sent again."""
    record.log_cursor = read_log(record.log_path, record.logstate_path, None, 1)["size"]
    record.log_partial = b""


def replay_log(record: WorkerRecord, limit_bytes: int = 4 << 20) -> None:
    """Feed the kept log's first `limit_bytes` to the tracker only (after a re-adoption)."""
    offset, seen = 0, 0
    partial = b""
    while seen < limit_bytes:
        chunk = read_log(record.log_path, record.logstate_path, offset, 512 * 1024)
        if not chunk["data"]:
            break
        lines = (partial + chunk["data"].encode("utf-8")).split(b"\n")
        partial = lines.pop()
        for raw in lines:
            parsed = parse_line(raw.decode("utf-8", errors="replace"))
            if parsed is not None and record.tracker is not None:
                record.tracker.log_event(parsed["kind"], parsed["fields"])
        seen += chunk["offset"] - chunk["start"]
        offset = chunk["offset"]


def catch_up_log(record: WorkerRecord, emit: Callable[[str, Dict[str, Any]], None]) -> None:
    """Parse new complete log lines and emit them as `log` events (at most LOG_EVENTS_PER_POLL a poll)."""
    chunk = read_log(record.log_path, record.logstate_path, record.log_cursor, 256 * 1024)
    if chunk["offset"] == record.log_cursor:
        return
    lines = (record.log_partial + chunk["data"].encode("utf-8")).split(b"\n")
    record.log_partial = lines.pop()[-65536:]
    record.log_cursor = chunk["offset"]
    emitted = 0
    for raw in lines:
        line = raw.decode("utf-8", errors="replace")
        parsed = parse_line(line)
        if parsed is None:
            continue
        if record.tracker is not None:
            record.tracker.log_event(parsed["kind"], parsed["fields"])
        if emitted < LOG_EVENTS_PER_POLL:
            data = {"worker": record.id, "kind": parsed["kind"], "fields": parsed["fields"], "line": line[:500]}
            data["ts"] = time.time()
            emit("log", data)
        emitted += 1
    if emitted > LOG_EVENTS_PER_POLL:
        suppressed = emitted - LOG_EVENTS_PER_POLL
        emit("alert", {"kind": "log_events_capped", "worker": record.id, "suppressed": suppressed})
