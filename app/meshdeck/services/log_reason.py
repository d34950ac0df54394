"""The line of a vLLM log that says why it stopped, for a deployment's reason.

vLLM logs `(<process> pid=N) ERROR MM-DD HH:MM:SS [file.py:line] message`, and a traceback's last line names
the exception (`KeyError: 'cmpl-…'`). The reason is, from the end of the log read back from the agent, the
last exception line (or argparse's `vllm: error: …`), else the last ERROR line that is not a traceback frame —
skipping the lines that only point elsewhere ("See root cause above", "See stack trace for root cause"),
which is how vLLM ends a failed start after the real cause — without vLLM's prefix, cut to one line.

    telling_line(tail) -> "Worker proc VllmWorker-1 died unexpectedly (exit code: -9), shutting down executor."
    telling_line(v32_start) -> "NotImplementedError: Sparse Attention is not supported on CPU."
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
_POINTER = re.compile(r"[Ss]ee (?:the )?(?:root cause|stack trace)")


def telling_line(tail: str) -> str | None:
    """vLLM's own word on why it stopped, from the end of its log, or None when the tail has none."""
    last_error = None
    for raw in reversed(tail.splitlines()):
        line = raw.rstrip()
        match = _PREFIX.match(line)
        message = line[match.end() :] if match else line
        if not message or _FRAME.match(message) or _POINTER.search(message):
            continue
        if _EXCEPTION.match(message) or _ARGPARSE.match(message):
            return printable(message.strip(), MAX_REASON_CHARS)
        if last_error is None and match is not None and match.group("level") in ("ERROR", "CRITICAL"):
            last_error = printable(message.strip(), MAX_REASON_CHARS)
    return last_error
