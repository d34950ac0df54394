"""An error quotes the value it is about, but never a 200 KB one: `core.text.quoted` keeps the start of a
long value and says its length, and `InputError` itself bounds its field and problem (keeping the end,
where a message says what to do) whatever a caller wrote into it."""

from __future__ import annotations

from pathlib import Path

import pytest
from meshdeck.cli import main
from meshdeck.core.errors import MAX_FIELD_CHARS, MAX_PROBLEM_CHARS, InputError
from meshdeck.core.text import quoted


def test_quoted_keeps_short_values_as_repr_and_cuts_long_ones_with_their_length() -> None:
    assert quoted("gpu-a") == "'gpu-a'"
    assert quoted("9" * 200_000) == "'" + "9" * 60 + "'… (200000 characters)"
    assert quoted(10**5000) == "an integer of about 5001 digits"  # repr() of it would raise ValueError
    assert quoted([1] * 100).endswith("… (300 characters)")


def test_an_input_error_is_bounded_whatever_its_caller_quoted() -> None:
    error = InputError("f" * 5_000, f"{'9' * 200_000!r}: vLLM reads whole GiB (an integer)")
    assert len(error.field) <= MAX_FIELD_CHARS + 60 and len(error.problem) <= MAX_PROBLEM_CHARS + 60
    assert error.problem.endswith("vLLM reads whole GiB (an integer)") and "characters left out" in error.problem
    assert str(error) == f"{error.field}: {error.problem}"


def test_a_cli_error_about_a_huge_value_is_one_short_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    address = "9" * 200_000  # a Prometheus address of 200k digits, echoed by the address parser
    assert main(["--db", str(tmp_path / "m.db"), "hosts", "add", "gpu-a", "x", "--prometheus", address]) == 2
    err = capsys.readouterr().err
    assert err.startswith("meshdeck: error: host.prometheus: host gpu-a: '9999")
    assert err.count("\n") == 1 and len(err) < MAX_FIELD_CHARS + MAX_PROBLEM_CHARS + 200
