"""core.text: what is shown from a server or a file carries no raw control character, and stays bounded."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck.core.text import printable, printable_lines

RAW_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
RAW_CONTROL_BUT_NEWLINE_AND_TAB = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def test_terminal_escapes_are_shown_not_obeyed():
    assert printable("gpu-a\x1b[2J") == "gpu-a\\x1b[2J"
    assert printable("ok\rFAIL\n\tx\x7f\x9b") == "ok\\rFAIL\\n\\tx\\x7f\\x9b"
    assert printable("bad \ud800 half") == "bad \\ud800 half"


def test_unicode_format_characters_that_reorder_a_line_are_shown_escaped():
    assert printable("ok\u202egpj.exe") == "ok\\u202egpj.exe"  # a right-to-left override
    assert printable("a\u200bb") == "a\\u200bb"


def test_ordinary_unicode_and_backslashes_are_kept():
    text = "H200 × 8 — 显存 80 GiB ✓ C:\\models"
    assert printable(text) == text


def test_limit_keeps_the_start_and_says_how_long_the_text_was():
    assert printable("v" * 100_000, limit=8) == "vvvvvvvv… (100000 characters)"
    assert printable("short", limit=8) == "short"
    assert printable("\x1b" * 10, limit=2) == "\\x1b\\x1b… (10 characters)"


def test_log_text_keeps_its_lines_and_tabs_but_not_other_controls():
    assert printable_lines("a\tb\nc\x1b[31m\r\n") == "a\tb\nc\\x1b[31m\\r\n"


@settings(deadline=None, max_examples=400)
@given(
    st.text(alphabet=st.one_of(st.characters(), st.characters(categories=["Cc", "Cs"]))),  # controls, lone surrogates
    st.none() | st.integers(min_value=0, max_value=50),
)
def test_no_raw_control_character_survives_and_the_output_is_bounded(text: str, limit: int | None):
    shown = printable(text, limit)
    assert not RAW_CONTROL.search(shown)
    shown.encode("utf-8")  # printable on any UTF-8 terminal
    if limit is not None:
        assert len(shown) <= 10 * limit + len(f"… ({len(text)} characters)")
    if text.isprintable() and (limit is None or len(text) <= limit):
        assert shown == text
    lines = printable_lines(text, limit)
    assert not RAW_CONTROL_BUT_NEWLINE_AND_TAB.search(lines)
    assert lines.count("\n") == text[: limit if limit is not None else len(text)].count("\n")
