"""The one error type every layer raises for bad user or remote input.

`str(error)` is a single line that names the field (or file, host, key) and says what is allowed,
so the CLI can print it as is and exit 2, and the GUI can show it next to the field.
"""

from __future__ import annotations


class InputError(ValueError):
    """A value from outside (CLI flag, profile file, config.json, agent message) is not acceptable."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")
