"""Tailing a worker's log for the lines that matter (logparse.py) while the supervisor polls.

`catch_up_log` reads what was written since the last poll, keeps an unfinished last line for the next
one, feeds vLLM startup lines to the simulated-GPU tracker, and returns `log` events for the supervisor
to send (at most LOG_EVENTS_PER_POLL per poll; the rest are counted in one `alert`). A re-adopting agent calls
`replay_log` (tracker only, nothing re-sent) and `skip_log` (start tailing at the end).
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Tuple

from ..logparse import parse_line
from .logs import read_log
from .state import WorkerRecord

LOG_EVENTS_PER_POLL = 200
Event = Tuple[str, Dict[str, Any]]  # (event name, data), as the daemon broadcasts it


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


def catch_up_log(record: WorkerRecord) -> List[Event]:
    """`log` events for the complete lines written since the last call (at most LOG_EVENTS_PER_POLL, then
    one `alert` counting the rest). Only the supervisor's monitor thread calls it: the cursor is its own,
    and no lock is held while it reads and parses."""
    chunk = read_log(record.log_path, record.logstate_path, record.log_cursor, 256 * 1024)
    if chunk["offset"] == record.log_cursor:
        return []
    lines = (record.log_partial + chunk["data"].encode("utf-8")).split(b"\n")
    record.log_partial = lines.pop()[-65536:]
    record.log_cursor = chunk["offset"]
    events: List[Event] = []
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
            events.append(("log", data))
        emitted += 1
    if emitted > LOG_EVENTS_PER_POLL:
        suppressed = emitted - LOG_EVENTS_PER_POLL
        events.append(("alert", {"kind": "log_events_capped", "worker": record.id, "suppressed": suppressed}))
    return events
