"""Text from outside (a server, an agent, a file, a row an older meshdeck stored) made safe to show on a
terminal or in a widget. The CLI, the services and the console all escape through these two functions.

    printable("gpu-a\x1b[2J")            -> 'gpu-a\\x1b[2J'      (the escape is shown, not obeyed)
    printable("v" * 100_000, limit=64)   -> 'vvv…v… (100000 characters)'
    printable_lines(log_text)            -> the same, but newlines and tabs are kept (a log the user asked for)

An ESC, CR or backspace from a hostile host can rewrite what a terminal shows (clear the screen, hide a
line, forge an "ok"); a C1 control (U+0080..U+009F) does the same on terminals that read 8-bit CSI; a
Unicode format character (a bidi override U+202E) reorders what is shown; a lone surrogate (JSON allows
"\\ud800") makes `print` raise on a UTF-8 terminal. Every character Python does not call printable is
replaced by a visible escape, as `repr` writes it: \\n, \\r, \\t by name, the rest as \\xNN, \\uNNNN or
\\UNNNNNNNN. Printable text, spaces and backslashes are kept as they are: this is for showing text, not
for round-tripping it.
"""

from __future__ import annotations

ELLIPSIS = "…"
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_KEPT_IN_LINES = frozenset("\n\t")


def _escaped(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _shown(text: str, limit: int | None, kept: frozenset[str]) -> str:
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    cut = limit is not None and len(text) > limit
    head = text[:limit] if cut else text
    if not head.isprintable():
        head = "".join(char if char.isprintable() or char in kept else _escaped(char) for char in head)
    return f"{head}{ELLIPSIS} ({len(text)} characters)" if cut else head


def printable(text: str, limit: int | None = None) -> str:
    """`text` on one line, every non-printable character escaped.

    With `limit`, at most `limit` characters of `text` are kept and a longer text ends with
    "… (N characters)", N being its original length; an escape counts as the one character it replaces.
    """
    return _shown(text, limit, frozenset())


def printable_lines(text: str, limit: int | None = None) -> str:
    """As `printable`, but newlines and tabs are kept: for multi-line text the user asked to read (a log)."""
    return _shown(text, limit, _KEPT_IN_LINES)


QUOTED_LIMIT = 60


def quoted(value: object, limit: int = QUOTED_LIMIT) -> str:
    """A value from outside, quoted for an error message as `repr` would, but never more than about `limit`
    characters of it: `'99999…' (200000 characters)`. An error names what was wrong with a value; echoing
    a 200,000-digit one back whole would bury what it says (and Python refuses to print an int of over 4,300
    digits at all)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}{ELLIPSIS} ({len(value)} characters)"
    try:
        shown = repr(value)
    except ValueError:  # a container holding an int too long to print
        return f"a {type(value).__name__} too long to show"
    return shown if len(shown) <= limit else f"{shown[:limit]}{ELLIPSIS} ({len(shown)} characters)"
