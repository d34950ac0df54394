"""The console's status bar says who stores the samples: this console, `meshdeck record` (pid N), or nobody
(before, nothing said whether history was being recorded at all)."""

from __future__ import annotations

import os
from pathlib import Path

from meshdeck.services.writer_claim import ROLE_CONSOLE, ROLE_RECORDER
from meshdeck.store.database import open_database
from meshdeck.store.writer_lock import LockFile, LockHolder, recorder_lock_path, writer_lock_path
from meshdeck.ui.main_window import MainWindow, ViewEntry
from PySide6.QtWidgets import QLabel


def _window(qtbot, context) -> MainWindow:
    window = MainWindow(context, [ViewEntry("empty", "Empty", QLabel("nothing"))])
    qtbot.addWidget(window)
    return window


def test_the_status_bar_names_the_process_that_records_the_history(qtbot, console_context, tmp_path: Path) -> None:
    console_context.db = open_database(tmp_path / "meshdeck.db")
    console_context.on_shutdown.append(console_context.db.close)
    path = console_context.db.path
    writer = LockFile(writer_lock_path(path))
    assert writer.acquire(holder=LockHolder(4242, ROLE_RECORDER, 0.0))
    window = _window(qtbot, console_context)
    label = window.findChild(QLabel, "historyStatus")
    assert label is window.history_status
    assert label.text() == "history: recording by meshdeck record (pid 4242)"
    assert "without writing it" in label.toolTip()

    writer.release()
    window.update_history_status()  # what its timer does every few seconds
    assert label.text() == "history: not recorded (run meshdeck record)"
    assert "meshdeck record --install-service" in label.toolTip()

    recorder = LockFile(recorder_lock_path(path))
    assert recorder.acquire(holder=LockHolder(4243, ROLE_RECORDER, 0.0))
    assert writer.acquire(holder=LockHolder(os.getpid(), ROLE_CONSOLE, 0.0))
    try:
        window.update_history_status()
        assert label.text() == "history: recorded by this console; meshdeck record (pid 4243) waits"
    finally:
        writer.release()
        recorder.release()


def test_a_window_without_a_database_shows_no_history_status(qtbot, console_context) -> None:
    window = _window(qtbot, console_context)
    assert not window.history_status.isVisibleTo(window)
