"""The disaggregated bench's readings: the engines' counters from real /metrics captures, the answers'
comparison, and the processes left in the workers' sessions (a real child process in its own session)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from meshdeck.services.completion_load import LoadResult
from meshdeck.services.pd_bench import EngineCounters, outputs_match, parse_engine_counters
from meshdeck.services.session_processes import left_after, processes_in_sessions

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "disaggregated"


def test_the_decode_engines_counters_show_the_prompts_kv_came_over() -> None:
    decode = parse_engine_counters((REAL / "decode_metrics.txt").read_text())
    prefill = parse_engine_counters((REAL / "prefill_metrics.txt").read_text())
    assert (decode.computed, decode.transferred, decode.nixl_bytes) == (0.0, 241.0, 1179648.0)
    assert (prefill.computed, prefill.transferred) == (241.0, 0.0)
    assert decode.minus(EngineCounters(transferred=41.0)).transferred == 200.0
    assert parse_engine_counters("") == EngineCounters()  # an engine without these metrics


def test_answers_compare_only_when_every_one_came_back() -> None:
    routed = LoadResult(ok=2, texts={0: "a b", 1: "c"})
    assert outputs_match(routed, LoadResult(ok=2, texts={0: "a b", 1: "c"}), 2) == (True, None)
    assert outputs_match(routed, LoadResult(ok=2, texts={0: "a b", 1: "d"}), 2) == (False, None)
    match, why = outputs_match(routed, LoadResult(ok=1, texts={0: "a b"}), 2)
    assert match is None and why == "answers missing: 2 routed, 1 aggregated of 2"


def test_a_process_left_in_a_workers_session_is_found_until_it_ends() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        (found,) = processes_in_sessions([child.pid])
        assert found.startswith(f"{child.pid} ") and "time.sleep(60)" in found
        assert processes_in_sessions([]) == [] and processes_in_sessions([1]) == []
    finally:
        child.kill()
        child.wait()
    assert left_after([child.pid], within_s=5) == []
