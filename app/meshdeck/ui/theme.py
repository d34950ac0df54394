"""Look and feel: follow the system's light or dark palette, never hard-code one.

The window uses the platform palette as it is; our style sheet (resources/qss/console.qss) only
refers to `palette(...)` roles, and the charts take their background and foreground from the
palette too. When the system switches scheme, `ThemeWatcher` tells every chart to repaint.
Series colours are a colour-blind-safe qualitative set readable on both light and dark.
"""

from __future__ import annotations

import logging
from importlib import resources

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPalette
from PySide6.QtWidgets import QApplication

log = logging.getLogger(__name__)

# Okabe-Ito (colour-blind safe) followed by Tableau 10 for more hues.
SERIES_COLORS = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#CC79A7",
    "#56B4E9",
    "#D55E00",
    "#F0E442",
    "#999999",
    "#4E79A7",
    "#F28E2B",
    "#59A14F",
    "#E15759",
    "#76B7B2",
    "#EDC948",
    "#B07AA1",
    "#FF9DA7",
)

# Link classes of the topology matrix, strongest first (nvidia-smi topo -m legend).
LINK_COLORS = {
    "nvlink": "#2E7D32",
    "pix": "#1565C0",
    "pxb": "#42A5F5",
    "phb": "#F9A825",
    "node": "#EF6C00",
    "sys": "#C62828",
    "self": "#9E9E9E",
    "unknown": "#BDBDBD",
}

STATE_COLORS = {
    "connected": "#2E7D32",
    "running": "#2E7D32",
    "ok": "#2E7D32",
    "connecting": "#F9A825",
    "bootstrapping": "#F9A825",
    "starting": "#F9A825",
    "restarting": "#F9A825",
    "degraded": "#EF6C00",
    "warn": "#EF6C00",
    "failed": "#C62828",
    "fail": "#C62828",
    "disconnected": "#757575",
    "stopped": "#757575",
    "exited": "#757575",
}


def series_color(index: int) -> QColor:
    return QColor(SERIES_COLORS[index % len(SERIES_COLORS)])


def is_dark(palette: QPalette | None = None) -> bool:
    palette = palette or QGuiApplication.palette()
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def chart_background(palette: QPalette | None = None) -> QColor:
    palette = palette or QGuiApplication.palette()
    return palette.color(QPalette.ColorRole.Base)


def chart_foreground(palette: QPalette | None = None) -> QColor:
    palette = palette or QGuiApplication.palette()
    return palette.color(QPalette.ColorRole.Text)


def resource_text(*parts: str) -> str:
    return resources.files("meshdeck").joinpath("resources", *parts).read_text(encoding="utf-8")


def app_icon() -> QIcon:
    icon = QIcon()
    folder = resources.files("meshdeck").joinpath("resources", "icons")
    for size in (16, 32, 48, 64, 128, 256):
        png = folder.joinpath(f"meshdeck-{size}.png")
        if png.is_file():
            icon.addFile(str(png))
    return icon


class ThemeWatcher(QObject):
    """Emits `changed` when the system's colour scheme or the application palette changes."""

    changed = Signal()

    def __init__(self, app: QApplication) -> None:
        super().__init__(app)
        hints = app.styleHints()
        hints.colorSchemeChanged.connect(self._on_scheme_changed)
        app.paletteChanged.connect(lambda _palette: self.changed.emit())

    def _on_scheme_changed(self, scheme: Qt.ColorScheme) -> None:
        log.info("system colour scheme changed to %s", scheme.name)
        self.changed.emit()


def apply_theme(app: QApplication) -> ThemeWatcher:
    """Fusion style on the system palette, our palette-relative style sheet, the app icon."""
    app.setStyle("Fusion")
    try:
        app.setStyleSheet(resource_text("qss", "console.qss"))
    except OSError as exc:  # a broken install still opens, just plainer
        log.warning("style sheet not loaded: %s", exc)
    app.setWindowIcon(app_icon())
    return ThemeWatcher(app)
