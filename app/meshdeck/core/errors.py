"""The one error type every layer raises for bad user or remote input.

`str(error)` is a single line that names the field (or file, host, key) and says what is allowed,
so the CLI can print it as is and exit 2, and the GUI can show it next to the field. A message quotes
the value it is about (`core.text.quoted` keeps that short); as a last bound, a field over
MAX_FIELD_CHARS or a problem over MAX_PROBLEM_CHARS keeps its start and its end (what to do) and says how
much was left out between, so no value from outside makes an error of 200 KB.
"""

from __future__ import annotations

MAX_FIELD_CHARS = 1000
MAX_PROBLEM_CHARS = 2000


def bounded(text: str, limit: int) -> str:
    """`text` when it is at most `limit` characters long, else its start and end with what was cut counted."""
    if len(text) <= limit:
        return text
    tail = limit // 4
    head = limit - tail
    return f"{text[:head]}… ({len(text) - head - tail} characters left out) …{text[len(text) - tail :]}"


class InputError(ValueError):
    """A value from outside (CLI flag, profile file, config.json, agent message) is not acceptable."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = bounded(field, MAX_FIELD_CHARS)
        self.problem = bounded(problem, MAX_PROBLEM_CHARS)
        super().__init__(f"{self.field}: {self.problem}")
