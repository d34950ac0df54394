"""Text from outside (a server, an agent, a file) made safe to show on a terminal or in a widget.

    printable("gpu-a\x1b[2J")            -> 'gpu-a\\x1b[2J'      (the escape is shown, not obeyed)
    printable("v" * 100_000, limit=64)   -> 'vvv…v… (100000 characters)'
    printable_lines(log_text)            -> the same, but newlines and tabs are kept (a log the user asked for)

An ESC, CR or backspace from a hostile host can rewrite what a terminal shows (clear the screen, hide a
line, forge a "ok"); a C1 control (U+0080..U+009F) does the same on terminals that read 8-bit CSI; a
lone surrogate (JSON allows "\\ud800") makes `print` raise on a UTF-8 terminal. Each such character is
replaced by a visible escape: \\n, \\r, \\t by name, the rest as \\xNN (\\uNNNN for surrogates). Every
other character, ordinary Unicode included, is kept as it is. Backslashes are kept too: this is for
showing text, not for round-tripping it.
"""

from __future__ import annotations

import re

ELLIPSIS = "…"
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_UNPRINTABLE_IN_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")  # keeps \t and \n


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def _shown(text: str, limit: int | None, pattern: re.Pattern[str]) -> str:
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if limit is None or len(text) <= limit:
        return pattern.sub(_escape, text)
    return pattern.sub(_escape, text[:limit]) + f"{ELLIPSIS} ({len(text)} characters)"


def printable(text: str, limit: int | None = None) -> str:
    """`text` with every control character (C0, DEL, C1) and lone surrogate escaped, on one line.

    With `limit`, at most `limit` characters of `text` are kept and a longer text ends with
    "… (N characters)", N being its original length; an escape counts as the one character it replaces.
    """
    return _shown(text, limit, _UNPRINTABLE)


def printable_lines(text: str, limit: int | None = None) -> str:
    """As `printable`, but newlines and tabs are kept: for multi-line text the user asked to read (a log)."""
    return _shown(text, limit, _UNPRINTABLE_IN_LINES)
