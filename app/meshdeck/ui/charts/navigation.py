"""Keys that move a view's charts through time, as Grafana's time-range keys: zoom the range in or out around
its middle, shift it back or forward by half its span, Home for live (the dashboard) or the range asked for
(History). `CHART_SHORTCUTS` lists them for the console's help dialog; `SHORTCUT_HINT` is the tooltip line.

The ranges are computed here (plain functions, tested alone); a view installs the keys with
`install_time_keys`, scoped to itself and its children, so a text field that takes the key (← in the GPU
filter) keeps it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QWidget

# (key as shown, what it does): the help dialog's list of the charts' keys.
CHART_SHORTCUTS: tuple[tuple[str, str], ...] = (
    ("+", "Charts: zoom in (half the time range, around its middle)"),
    ("−", "Charts: zoom out (twice the time range)"),
    ("←", "Charts: shift the time range back by half its span"),
    ("→", "Charts: shift the time range forward by half its span (not past now)"),
    ("Home", "Charts: back to live (Dashboard) or to the range asked for (History)"),
)
SHORTCUT_HINT = "Keys: + / − zoom the time range, ← / → shift it, Home: back to live"
MIN_SPAN_S = 30.0


@dataclass(frozen=True)
class TimeKeys:
    """What each key does in a view: `zoom(factor)`, `shift(fraction of the span)`, `home()`."""

    zoom: Callable[[float], None]
    shift: Callable[[float], None]
    home: Callable[[], None]


def zoomed(
    start: float, end: float, factor: float, min_span: float = MIN_SPAN_S, max_span: float = 1e12
) -> tuple[float, float]:
    """[start, end] scaled by `factor` around its middle (factor < 1 zooms in), the span kept in bounds."""
    span = min(max((end - start) * factor, min_span), max_span)
    middle = (start + end) / 2
    return middle - span / 2, middle + span / 2


def shifted(start: float, end: float, fraction: float, latest: float | None = None) -> tuple[float, float]:
    """[start, end] moved by `fraction` of its span (negative: back in time), not past `latest` when given."""
    step = (end - start) * fraction
    if latest is not None and end + step > latest:
        step = max(latest - end, 0.0) if fraction > 0 else step
    return start + step, end + step


def install_time_keys(widget: QWidget, keys: TimeKeys) -> list[QShortcut]:
    """The keys of CHART_SHORTCUTS on `widget` and its children, one QShortcut per action (its `whatsThis` says
    what it does: the console's shortcuts help reads it)."""
    actions: tuple[tuple[tuple[str, ...], Callable[[], None]], ...] = (
        (("+", "="), lambda: keys.zoom(0.5)),
        (("-",), lambda: keys.zoom(2.0)),
        (("Left",), lambda: keys.shift(-0.5)),
        (("Right",), lambda: keys.shift(0.5)),
        (("Home",), keys.home),
    )
    shortcuts = []
    for (sequences, action), (_, description) in zip(actions, CHART_SHORTCUTS, strict=True):
        shortcut = QShortcut(widget)
        shortcut.setKeys([QKeySequence(sequence) for sequence in sequences])
        shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        shortcut.setWhatsThis(description)
        shortcut.activated.connect(action)
        shortcuts.append(shortcut)
    return shortcuts
