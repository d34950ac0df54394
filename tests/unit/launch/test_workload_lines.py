"""The workloads' marker lines reach the shared pipe in one write each (see layout_mesh.say_line)."""

from __future__ import annotations

import io

import pytest
from meshdeck.workloads import layout_mesh


class _Writes(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return super().write(text)


def test_say_line_writes_the_line_and_its_newline_in_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _Writes()
    monkeypatch.setattr("sys.stdout", out)
    layout_mesh.say_line(layout_mesh.RUNNING_MARK % (1, 4))
    assert out.calls == ["meshdeck-workload: rank 1/4 running\n"]
