"""The line of a vLLM log that says why it stopped, for a deployment's reason.

vLLM logs `(<process> pid=N) ERROR MM-DD HH:MM:SS [file.py:line] message`, and a traceback's last line names
the exception (`KeyError: 'cmpl-…'`). The reason is the last such line in the tail read from the agent:
an ERROR line that is not a traceback frame, or an exception line, without vLLM's prefix, cut to one line.

    telling_line(tail) -> "Worker proc VllmWorker-1 died unexpectedly (exit code: -9), shutting down executor."
"""

from __future__ import annotations

import re

from meshdeck.core.text import printable

MAX_REASON_CHARS = 300
_PREFIX = re.compile(
    r"^\((?P<process>[^)]*)\)\s+(?P<level>[A-Z]+)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]*\]\s?"
)
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)")
_ARGPARSE = re.compile(r"^[\w.-]+: error: ")
_FRAME = re.compile(r"^(?:Traceback \(most recent call last\)|\s|\^|~)")


def telling_line(tail: str) -> str | None:
    """vLLM's own word on why it stopped, from the end of its log, or None when the tail has none."""
    for raw in reversed(tail.splitlines()):
        line = raw.rstrip()
        match = _PREFIX.match(line)
        message = line[match.end() :] if match else line
        if not message or _FRAME.match(message):
            continue
        is_error = match is not None and match.group("level") in ("ERROR", "CRITICAL")
        if is_error or _EXCEPTION.match(message) or _ARGPARSE.match(message):
            return printable(message.strip(), MAX_REASON_CHARS)
    return None
