"""The console's process hands the GIL to its GUI thread within ~1 ms (ui/gil.py); what that buys is measured by
tests/benchmarks/test_bench_fleet_view.py (the loaded refresh at both intervals)."""

from __future__ import annotations

import sys

from meshdeck.ui.app import application
from meshdeck.ui.gil import GUI_SWITCH_INTERVAL_S


def test_the_console_application_sets_the_gui_switch_interval(qapp) -> None:
    previous = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        assert application() is qapp
        assert sys.getswitchinterval() == GUI_SWITCH_INTERVAL_S < 0.005
    finally:
        sys.setswitchinterval(previous)
