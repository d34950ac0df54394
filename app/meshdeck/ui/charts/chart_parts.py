"""The clock of the time charts: the time zone their axis is drawn in and the time of day a readout says.

Times on every chart are the console's local time, as pyqtgraph's date axis draws them; the axis says which
zone that is ("time (UTC+01:00)"), so a screenshot sent to a colleague in another zone is still read right.
"""

from __future__ import annotations

from datetime import datetime, timedelta


def zone_name(when: float | None = None) -> str:
    """The local zone as an offset from UTC at `when` (default now): "UTC", "UTC+01:00", "UTC−05:30"."""
    moment = datetime.now() if when is None else datetime.fromtimestamp(when)
    offset = moment.astimezone().utcoffset() or timedelta(0)
    minutes = round(offset.total_seconds() / 60)
    if minutes == 0:
        return "UTC"
    sign = "+" if minutes > 0 else "−"
    hours, rest = divmod(abs(minutes), 60)
    return f"UTC{sign}{hours:02d}:{rest:02d}"


def time_axis_label(when: float | None = None) -> str:
    return f"time ({zone_name(when)})"


def clock_text(ts: float) -> str:
    """A readout's time of day (local, as the axis), or why a stored time cannot be shown."""
    try:
        return datetime.fromtimestamp(ts).strftime("%H:%M:%S")
    except (OverflowError, OSError, ValueError):  # a stored time no calendar can show (history of old rows)
        return f"out of range (ts {ts:g})"
