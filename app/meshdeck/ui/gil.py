"""The console's GUI thread gets the GIL back within a millisecond, not five.

CPython hands the GIL to a waiting thread only after the holder has run for the switch interval
(`sys.setswitchinterval`, 5 ms by default). The console's GUI thread releases the GIL many times per
redraw: every numpy call and most Qt calls (PySide allows threads around them). Beside a busy fleet (host
supervisors decoding samples, the store writer staging a commit) each release can cost the GUI thread up to
a whole interval before it runs again, so a redraw of ~5 ms of work took ~100 ms. Measured with the fleet
view at 2,224 GPUs and 3 busy Python threads beside it (tests/benchmarks/test_bench_fleet_view.py, this
2-core machine): median 97 ms at 5 ms, 37 ms at 1 ms, 25 ms at 0.5 ms.

A shorter interval costs the busy threads a few more switches a second; the console's work is the GUI's
latency, so the console trades it. CLI commands and the agent keep CPython's default.
"""

from __future__ import annotations

import sys

GUI_SWITCH_INTERVAL_S = 0.001


def favour_the_gui_thread(interval_s: float = GUI_SWITCH_INTERVAL_S) -> float:
    """Set the process's switch interval to `interval_s` (seconds); returns the one it replaced."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(interval_s)
    return previous
