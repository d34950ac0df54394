"""Rotating worker logs keep logical byte offsets across rotations; reads never split a UTF-8 character."""

from __future__ import annotations

from meshdeck_agent.keeper import RotatingLog, process_start_time
from meshdeck_agent.workers.logs import read_log


def test_offsets_survive_rotation_and_old_bytes_stay_readable(tmp_path):
    path, state = str(tmp_path / "out.log"), str(tmp_path / "logstate.json")
    log = RotatingLog(path, state, max_bytes=1024, keep=2)
    lines = [f"line {i:05d}\n".encode() for i in range(300)]
    for line in lines:
        log.write(line)
    log.close()
    everything = b"".join(lines)
    first = read_log(path, state, 0, limit=512 * 1024)
    assert first["size"] == len(everything)
    assert first["start"] > 0  # the oldest bytes rotated away (keep=2)
    assert first["data"].encode() == everything[first["start"] :]
    tail = read_log(path, state, first["size"] - 11, limit=100)
    assert tail["data"] == "line 00299\n" and tail["offset"] == tail["size"]
    assert (
        (tmp_path / "out.log.1").exists()
        and (tmp_path / "out.log.2").exists()
        and not (tmp_path / "out.log.3").exists()
    )


def test_rotation_happens_on_a_line_boundary_when_one_is_in_reach(tmp_path):
    path, state = str(tmp_path / "out.log"), str(tmp_path / "logstate.json")
    log = RotatingLog(path, state, max_bytes=1024, keep=3)
    log.write(b"a" * 1000 + b"\n" + b"b" * 100 + b"\n")
    log.close()
    assert (tmp_path / "out.log.1").read_bytes().endswith(b"\n")
    assert (tmp_path / "out.log").read_bytes() == b"b" * 100 + b"\n"


def test_a_read_ending_inside_a_multibyte_character_stops_before_it(tmp_path):
    path, state = str(tmp_path / "out.log"), str(tmp_path / "logstate.json")
    log = RotatingLog(path, state, max_bytes=1 << 20, keep=1)
    log.write("ab✓cd".encode())
    log.close()
    page = read_log(path, state, 0, limit=3)  # "ab" + first byte of ✓
    assert page["data"] == "ab" and page["offset"] == 2
    rest = read_log(path, state, page["offset"], limit=100)
    assert rest["data"] == "✓cd"


def test_reading_an_empty_or_missing_log():
    assert read_log("/nonexistent/out.log", "/nonexistent/state.json", 0)["data"] == ""


def test_process_start_time_identifies_a_live_process():
    import os

    assert isinstance(process_start_time(os.getpid()), int)
    assert process_start_time(2**22 + 12345) is None
