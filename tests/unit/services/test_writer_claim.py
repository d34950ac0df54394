"""Who writes a database's history (services/writer_claim.py): one process at a time; a recorder yields to a
console and takes the history back once it closes; a console that cannot get it writes nothing and lets a
recorder go on; the status bar and `launch --wait` say who records."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from meshdeck.core.errors import InputError
from meshdeck.services.writer_claim import (
    ROLE_CONSOLE,
    ROLE_RECORDER,
    HistoryStatus,
    RecorderClaim,
    claim_for_console,
    history_status,
)
from meshdeck.store.writer_lock import LockFile, LockHolder, console_lock_path, lock_in_use, writer_lock_path


def test_a_console_takes_a_free_history_and_gives_it_back(tmp_path: Path) -> None:
    db = tmp_path / "meshdeck.db"
    claim = claim_for_console(db, wait_s=0)
    assert claim.writes and claim.yielded_by is None
    assert history_status(db).writer == LockHolder(os.getpid(), ROLE_CONSOLE, history_status(db).writer.since)  # type: ignore[union-attr]
    assert history_status(db).text() == "history: recorded by this console"
    claim.release()
    assert history_status(db).writer is None and not lock_in_use(console_lock_path(db))


def test_a_console_finding_another_console_writing_writes_nothing_and_lets_a_recorder_record(tmp_path: Path) -> None:
    db = tmp_path / "meshdeck.db"
    other = LockFile(writer_lock_path(db))
    assert other.acquire(holder=LockHolder(4242, ROLE_CONSOLE, 0.0))
    claim = claim_for_console(db, wait_s=30)  # another console never yields: no wait
    assert not claim.writes and claim.holder == LockHolder(4242, ROLE_CONSOLE, 0.0)
    assert not lock_in_use(console_lock_path(db))  # a recorder would not pause for it
    assert history_status(db).text() == "history: recording by another console (pid 4242)"
    other.release()


def test_a_recorder_yields_to_a_console_and_takes_the_history_back_when_it_closes(tmp_path: Path) -> None:
    db = tmp_path / "meshdeck.db"
    recorder = RecorderClaim(db)
    recorder.start()
    assert recorder.take_writer()
    stop, gave, took_back = threading.Event(), threading.Event(), threading.Event()

    def record() -> None:  # what services/recorder.py does between its polls
        while not recorder.console_wants():
            stop.wait(0.01)
        recorder.give_writer()
        gave.set()
        while not recorder.take_writer():
            stop.wait(0.01)
        took_back.set()

    thread = threading.Thread(target=record)
    thread.start()
    try:
        claim = claim_for_console(db, wait_s=30, poll_s=0.01)
        assert claim.writes and claim.yielded_by == os.getpid() and gave.is_set()
        assert not took_back.wait(0.3)  # paused while the console is open
        claim.release()
        assert took_back.wait(30)
        assert history_status(db).writer.role == ROLE_RECORDER  # type: ignore[union-attr]
    finally:
        stop.set()
        thread.join(30)
        recorder.release()


def test_a_console_stops_waiting_for_a_recorder_that_does_not_yield(tmp_path: Path) -> None:
    db = tmp_path / "meshdeck.db"
    stubborn = LockFile(writer_lock_path(db))
    assert stubborn.acquire(holder=LockHolder(4242, ROLE_RECORDER, 0.0))
    claim = claim_for_console(db, wait_s=0.2, poll_s=0.01)
    assert not claim.writes and claim.holder is not None and claim.holder.pid == 4242
    assert not lock_in_use(console_lock_path(db))
    assert history_status(db).text() == "history: recording by meshdeck record (pid 4242)"
    stubborn.release()


def test_a_second_recorder_of_one_database_is_refused_naming_the_first(tmp_path: Path) -> None:
    db = tmp_path / "meshdeck.db"
    first = RecorderClaim(db)
    first.start()
    try:
        with pytest.raises(InputError, match=rf"meshdeck record \(pid {os.getpid()}\) already records it"):
            RecorderClaim(db).start()
    finally:
        first.release()
    RecorderClaim(db).start()


def test_a_command_that_watches_without_storing_says_whether_anything_records(tmp_path: Path) -> None:
    nobody = HistoryStatus(None, None, db_name="m.db")
    assert nobody.note_for_cli().startswith("no recorder is running: the hosts' samples are not stored")
    assert "meshdeck record" in nobody.note_for_cli()
    recording = HistoryStatus(LockHolder(77, ROLE_RECORDER), LockHolder(77, ROLE_RECORDER), db_name="m.db")
    assert recording.note_for_cli() == "samples are recorded by meshdeck record (pid 77) into m.db"
    assert recording.text(me=1) == "history: recording by meshdeck record (pid 77)"
