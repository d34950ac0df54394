"""The console's collector policy: what survived is frozen out of full collections, and a thaw frees
the cycles that died while frozen."""

from __future__ import annotations

import gc
import weakref

from meshdeck.ui.collector import CollectorPolicy


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_a_frozen_cycle_survives_full_collections_until_the_thaw(qtbot) -> None:
    policy = CollectorPolicy(freeze_every_s=3600, thaw_every_s=3600)
    try:
        node = _Node()
        alive = weakref.ref(node)
        policy.freeze()
        assert gc.get_freeze_count() > 0 and policy.freezes == 1
        del node
        gc.collect()
        assert alive() is not None  # frozen: full collections no longer look at it
        policy.thaw()
        assert alive() is None and policy.thaws == 1 and policy.last_thaw_ms > 0
        assert gc.get_freeze_count() > 0  # what survived the thaw is frozen again
    finally:
        policy.stop()
    assert gc.get_freeze_count() == 0


def test_the_timers_freeze_and_thaw_while_the_console_runs(qtbot) -> None:
    policy = CollectorPolicy(freeze_every_s=0.05, thaw_every_s=0.2).start()
    try:
        qtbot.waitUntil(lambda: policy.freezes >= 2 and policy.thaws >= 1, timeout=5000)
    finally:
        policy.stop()
    assert gc.get_freeze_count() == 0
