"""vLLM's CPU build logs its KV budget and pool its own way; the agent reads both from the lines captured from
the real TP=2 two-node run (tests/fixtures/agent/SOURCES.md §7)."""

from __future__ import annotations

from pathlib import Path

from meshdeck_agent.logparse import parse_line

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "agent"
HEAD = FIXTURES / "vllm_log_v0.32.0-cpu_tiny-deepseek-v3_tp2-2node_head-startup_meshdeck-run.txt"
HEADLESS = FIXTURES / "vllm_log_v0.32.0-cpu_tiny-deepseek-v3_tp2-2node_headless-startup_meshdeck-run.txt"


def startup_events(path: Path) -> list[dict]:
    parsed = [parse_line(line) for line in path.read_text().splitlines()]
    return [event["fields"] for event in parsed if event and event["kind"] == "vllm_startup"]


def test_the_heads_budget_and_pool_lines_give_the_kv_numbers() -> None:
    events = startup_events(HEAD)
    assert events == [
        {"available_kv_gib": 1.0, "process": "Worker_TP0", "pid": 7064},
        {"kv_cache_tokens": 233008, "max_concurrency_tokens": 2048, "max_concurrency": 113.77, "process": "EngineCore",
         "pid": 6870},
    ]  # fmt: skip


def test_the_headless_node_gives_its_own_budget_and_no_pool() -> None:
    assert startup_events(HEADLESS) == [{"available_kv_gib": 1.0, "process": "Worker_TP1", "pid": 7567}]


def test_an_auto_sized_budget_is_read_too() -> None:
    # vllm/v1/worker/cpu_worker.py's other message, when no budget is set
    line = ("(Worker pid=9) INFO 12-01 16:25:27 [cpu_worker.py:260] Auto set (17.25/23.54) GiB for KV cache on node 0, "
            "with 20.0 GiB requested memory for the worker. 2.75 GiB memory was consumed by non-kv usages.")  # fmt: skip
    assert parse_line(line)["fields"]["available_kv_gib"] == 17.25
