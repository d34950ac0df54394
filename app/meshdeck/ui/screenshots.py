"""`--screenshots DIR`: one PNG of the whole window per view, named `NN-<view>.png`, and one per extra page a
view names (`screenshot_pages()`: the planner's throughput–interactivity chart), named `NN-<view>-<page>.png`.

Each view is brought to the front, given time to lay out and (for chart views) redrawn from the
data it has before the window is grabbed, so every picture shows what a user would see. Works on
the offscreen platform (QT_QPA_PLATFORM=offscreen) and under Xvfb alike.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QEventLoop, QTimer
from PySide6.QtWidgets import QApplication

from meshdeck.ui.main_window import MainWindow

log = logging.getLogger(__name__)
SETTLE_MS = 400


def _pump(milliseconds: int) -> None:
    loop = QEventLoop()
    QTimer.singleShot(milliseconds, loop.quit)
    loop.exec()


def save_screenshots(window: MainWindow, folder: str | Path) -> list[Path]:
    """Grab every view of `window` into `folder` (created if missing). Returns the files written."""
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    current = window.current_view_key()
    written = []
    for index, key in enumerate(window.view_keys()):
        view = window.show_view(key)
        QApplication.processEvents()
        refresh = getattr(view, "refresh", None)
        if callable(refresh):
            refresh()
        _pump(SETTLE_MS)
        written.append(_grab(window, target / f"{index + 1:02d}-{key}.png"))
        pages = getattr(view, "screenshot_pages", None)
        for page, show in pages() if callable(pages) else ():
            show()
            _pump(SETTLE_MS)
            written.append(_grab(window, target / f"{index + 1:02d}-{key}-{page}.png"))
    window.show_view(current)
    return written


def _grab(window: MainWindow, path: Path) -> Path:
    if not window.grab().save(str(path), "PNG"):
        raise OSError(f"could not write {path}")
    log.info("screenshot %s", path)
    return path
