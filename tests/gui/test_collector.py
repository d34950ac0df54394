"""The console's collector policy: CPython starts no full collection by itself, the GUI thread's timer
collects what is young and freezes what survived, and a thaw frees the cycles that died while frozen."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

from meshdeck.ui.collector import CollectorPolicy


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def _full_collections_while_allocating() -> int:
    """Allocate as a fleet's sample path does (many small containers kept for a while) and count the full
    collections CPython starts by itself meanwhile."""
    full: list[int] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(1)

    gc.callbacks.append(on_gc)
    try:
        kept: list[list[int]] = []
        for _ in range(20):
            kept.extend([i] for i in range(50_000))  # 1 M survivors: gen-2 growth past a quarter
    finally:
        gc.callbacks.remove(on_gc)
    return len(full)


def _policy(**timers: float) -> Iterator[CollectorPolicy]:
    policy = CollectorPolicy(**timers)
    try:
        yield policy
    finally:
        policy.stop()


def test_only_the_policy_starts_full_collections_and_stop_gives_cpython_its_thresholds_back(qtbot) -> None:
    defaults = gc.get_threshold()
    assert _full_collections_while_allocating() > 0  # the baseline: CPython collects by itself
    policy = CollectorPolicy(collect_every_s=3600, thaw_every_s=3600).start()
    try:
        assert gc.get_freeze_count() > 0  # what the start-up made: out of the scheduled collections' scans
        assert gc.get_threshold()[:2] == defaults[:2]  # the young generations as before
        assert _full_collections_while_allocating() == 0
    finally:
        policy.stop()
    assert gc.get_threshold() == defaults
    assert gc.get_freeze_count() == 0


def test_the_scheduled_collection_frees_young_cycles_and_freezes_what_survived(qtbot) -> None:
    for policy in _policy(collect_every_s=3600, thaw_every_s=3600):
        dead, kept = _Node(), _Node()
        dead_ref, kept_ref = weakref.ref(dead), weakref.ref(kept)
        del dead
        policy.collect_young()
        assert dead_ref() is None  # younger than the last freeze: collected
        assert kept_ref() is kept and gc.get_freeze_count() > 0 and policy.freezes == 1
        assert len(policy.pauses_ms) == 1 and policy.pauses_ms[0] > 0


def test_a_frozen_cycle_survives_full_collections_until_the_thaw(qtbot) -> None:
    for policy in _policy(collect_every_s=3600, thaw_every_s=3600):
        node = _Node()
        alive = weakref.ref(node)
        policy.collect_young()
        del node
        gc.collect()
        assert alive() is not None  # frozen: full collections no longer look at it
        policy.thaw()
        assert alive() is None and policy.thaws == 1 and policy.last_thaw_ms > 0
        assert gc.get_freeze_count() > 0  # what survived the thaw is frozen again
    assert gc.get_freeze_count() == 0


def test_the_timers_collect_and_thaw_while_the_console_runs(qtbot) -> None:
    policy = CollectorPolicy(collect_every_s=0.05, thaw_every_s=0.2).start()
    try:
        qtbot.waitUntil(lambda: policy.freezes >= 2 and policy.thaws >= 1, timeout=5000)
        assert len(policy.pauses_ms) >= 3
    finally:
        policy.stop()
    assert gc.get_freeze_count() == 0
