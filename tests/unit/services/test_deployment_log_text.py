"""Log text on its way to a viewer: a tail read from the log's end is the log's last lines whatever the window
size, and log events merged while they wait show what applying each in turn would show."""

from __future__ import annotations

from typing import Any
from unittest import mock

from deploy_fleet import FakeFleet
from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck.services.deployments import waits as deploy_waits
from meshdeck.services.deployments.events import MAX_PENDING_LOG_CHARS, DeploymentLogLines
from meshdeck.services.deployments.waits import read_tail
from meshdeck.services.deployments.watch import shown_log

LINE_ENDS = ["\n", "\r\n", "\r", ""]
_lines = st.lists(st.tuples(st.text(alphabet="ab \x1b\t", max_size=12), st.sampled_from(LINE_ENDS)), max_size=40).map(
    lambda parts: "".join(body + end for body, end in parts)
)


@settings(deadline=None, max_examples=400)
@given(log=_lines, lines=st.integers(min_value=0, max_value=12), window=st.integers(min_value=1, max_value=64))
def test_a_tail_is_the_logs_last_lines_whatever_the_window(log: str, lines: int, window: int) -> None:
    fleet = FakeFleet()
    fleet.logs["w"] = log
    asked: list[dict[str, Any]] = []

    def call(host: str, method: str, params: dict[str, Any]) -> Any:
        asked.append(params)
        return fleet.call(host, method, params)

    with mock.patch.object(deploy_waits, "TAIL_WINDOW_BYTES", window):
        tail = read_tail(call, "gpu-a", "w", lines)

    assert tail.text == "\n".join(log.splitlines()[-lines:] if lines else [])
    assert tail.end == len(log)
    assert tail.ends_line == (not log or log.splitlines(keepends=True)[-1] != log.splitlines()[-1])
    assert all(p.get("limit", 0) <= window for p in asked)  # one window per answer


_events = st.lists(st.tuples(st.text(max_size=30), st.booleans()), min_size=1, max_size=30)


@settings(deadline=None, max_examples=400)
@given(events=_events, before=st.text(max_size=10))
def test_log_events_merged_while_waiting_show_what_each_in_turn_shows(
    events: list[tuple[str, bool]], before: str
) -> None:
    shown = before
    merged: DeploymentLogLines | None = None
    for text, reset in events:
        shown = text if reset else shown + text
        event = DeploymentLogLines("d", "vllm-node0", text, reset)
        merged = event if merged is None else event.merged_after(merged)
    assert merged is not None
    assert (merged.text if merged.reset else before + merged.text) == shown


def test_log_text_waiting_for_a_slow_viewer_is_bounded_to_its_newest_part() -> None:
    chunk = DeploymentLogLines("d", "c", "x" * 1000 + "\n")
    merged = chunk
    for number in range(MAX_PENDING_LOG_CHARS // 1000 + 10):
        merged = DeploymentLogLines("d", "c", f"{number:>999}\n").merged_after(merged)
    assert len(merged.text) == MAX_PENDING_LOG_CHARS and merged.reset  # what was cut was never shown
    assert merged.text.endswith(f"{number:>999}\n")


def test_new_log_text_ends_its_lines_as_a_tail_does_and_escapes_the_rest() -> None:
    assert shown_log("a\r\nb\rc\n\x1b[2Jd") == "a\nb\nc\n\\x1b[2Jd"
