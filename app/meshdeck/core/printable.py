"""Text from files and servers, made safe to print: every non-printable character escaped.

A profile, an agent's answer or a row an older meshdeck stored may carry ESC, CR, BEL, C1 controls or
Unicode format characters (bidi overrides). Printed raw they rewrite a terminal (clear it, move the
cursor, hide or reorder a line) or a widget. `printable` writes each such character the way Python's
`repr` does (`\\x1b`, `\\r`, `\\u202e`) and leaves printable text, spaces and backslashes included, as it
is. The CLI, the services and the console all escape through this one function.
"""

from __future__ import annotations


def _escaped(char: str) -> str:
    return repr(char)[1:-1]


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every non-printable character escaped; `keep_newlines` keeps "\\n" (multi-line output)."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() or (keep_newlines and char == "\n") else _escaped(char) for char in text)
