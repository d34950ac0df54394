"""`-o FILE` of `history export` / `profiles export` and `plan --profile-out`: a regular file (or a new one) is
replaced atomically, a symlink keeps pointing where it did, a pipe or a character device is written through,
a directory or a socket is refused in one line, `-o -` is stdout, and a reader that goes away (`| head`)
ends the command quietly with status 141 (128 + SIGPIPE, as `cat` or `seq` end in a pipeline)."""

from __future__ import annotations

import errno
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from meshdeck.cli import main
from meshdeck.store.database import open_database
from meshdeck.store.writer import SampleWriter

PROFILE = """\
name: tiny-torch
model: tiny
engine: torch
hosts: [local]
gpus_per_node: 2
layout: {data_parallel: 2}
"""
HOUR_START = 1_764_482_400.0


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def db_with_history(tmp_path: Path) -> str:
    path = tmp_path / "m.db"
    with open_database(path) as db, SampleWriter(db) as writer:
        writer.submit_rows("gpu-a", [(s, HOUR_START + s, "gpu0", "temperature_c", 40.0) for s in range(1, 11)])
    return str(path)


@pytest.fixture
def db_with_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    path = str(tmp_path / "p.db")
    source = tmp_path / "tiny.yaml"
    source.write_text(PROFILE)
    assert _run(capsys, "--db", path, "profiles", "import", str(source))[0] == 0
    return path


def _export_history(capsys: pytest.CaptureFixture[str], db: str, target: str) -> tuple[int, str, str]:
    return _run(capsys, "--db", db, "history", "export", "--host", "gpu-a", "-o", target)


def _export_profile(capsys: pytest.CaptureFixture[str], db: str, target: str) -> tuple[int, str, str]:
    return _run(capsys, "--db", db, "profiles", "export", "tiny-torch", "-o", target)


EXPORTS = {"history": ("db_with_history", _export_history), "profiles": ("db_with_profile", _export_profile)}


@pytest.fixture(params=sorted(EXPORTS))
def export(request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> Iterator[object]:
    fixture, run = EXPORTS[request.param]
    db = request.getfixturevalue(fixture)
    yield lambda target: run(capsys, db, str(target))


def _expected_start(export: object, text: str) -> bool:
    return text.startswith(("time,ts,host", "name: tiny-torch"))


def test_a_symlink_to_a_file_keeps_pointing_at_it_and_the_file_gets_the_export(export, tmp_path: Path) -> None:
    real = tmp_path / "real.out"
    real.write_text("old\n")
    real.chmod(0o644)
    link = tmp_path / "link.out"
    link.symlink_to("real.out")
    code, _, err = export(link)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == "real.out"
    assert _expected_start(export, real.read_text())
    assert stat.S_IMODE(real.stat().st_mode) == 0o644  # replaced atomically, the mode kept
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".out")) == ["link.out", "real.out"]


def test_history_export_names_the_file_the_points_went_to_not_only_the_link(
    db_with_history: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "real.csv").write_text("")
    (tmp_path / "link.csv").symlink_to("real.csv")
    code, _, err = _export_history(capsys, db_with_history, str(tmp_path / "link.csv"))
    assert code == 0 and f"points to {tmp_path / 'real.csv'} (through the symlink" in err


def test_a_dangling_symlink_gets_its_target_created(export, tmp_path: Path) -> None:
    link = tmp_path / "link.out"
    link.symlink_to("made.out")
    assert export(link)[0] == 0
    assert link.is_symlink() and _expected_start(export, (tmp_path / "made.out").read_text())


def test_a_fifo_is_written_through_and_stays_a_fifo(export, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there, so the export's open does not wait
    try:
        code, _, err = export(fifo)
        assert code == 0, err
        data = os.read(reader, 1 << 16).decode()
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _expected_start(export, data)


def _private_null_device(tmp_path: Path) -> Path:
    """A character device like /dev/null (1, 3) in tmp_path: the test never goes near the real /dev/null."""
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        os.close(os.open(node, os.O_WRONLY))
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EACCES):
            pytest.skip(f"cannot make or open a device node here ({exc.strerror})")
        raise
    return node


def test_a_character_device_is_written_through_and_stays_a_device(export, tmp_path: Path) -> None:
    node = _private_null_device(tmp_path)
    code, _, err = export(node)
    assert code == 0, err
    assert stat.S_ISCHR(os.lstat(node).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".null")) == []


def test_a_directory_or_a_socket_is_refused_in_one_line(export, tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    code, out, err = export(folder)
    assert (code, out) == (2, "")
    assert err == f"meshdeck: error: -o: {folder} is a directory; name a file, a pipe or a device such as /dev/null\n"
    sock_path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    try:
        code, out, err = export(sock_path)
    finally:
        server.close()
    assert (code, out) == (2, "") and err.startswith(f"meshdeck: error: -o: {sock_path} is a socket;")
    assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)


def test_a_block_device_is_refused_and_left_as_it_was(export, tmp_path: Path) -> None:
    node = tmp_path / "loop"
    try:
        os.mknod(node, stat.S_IFBLK | 0o600, os.makedev(7, 250))
    except PermissionError as exc:
        pytest.skip(f"cannot make a device node here ({exc.strerror})")
    code, out, err = export(node)
    assert (code, out) == (2, "") and err.startswith(f"meshdeck: error: -o: {node} is a block device;")
    assert stat.S_ISBLK(os.lstat(node).st_mode)


def test_a_folder_that_does_not_exist_is_one_error_line(export, tmp_path: Path) -> None:
    code, out, err = export(tmp_path / "missing" / "x.out")
    assert (code, out) == (2, "")
    assert err == f"meshdeck: error: -o: folder {tmp_path / 'missing'} does not exist\n"


def test_dash_means_stdout(export, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # where a file named '-' would have gone
    code, out, _ = export("-")
    assert not (tmp_path / "-").exists()
    assert code == 0 and _expected_start(export, out)


def test_plan_profile_out_writes_through_a_symlink_and_refuses_a_device_for_several_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    h200 = ("--gpu", "H200-SXM-141GB")
    real = tmp_path / "real.yaml"
    real.write_text("old\n")
    link = tmp_path / "ds32.yaml"
    link.symlink_to(real)
    code, _, err = _run(capsys, "plan", *h200, "--hosts", "gpu-a", "--profile-out", str(link))
    assert (code, err) == (0, "")
    assert link.is_symlink() and real.read_text().startswith("# meshdeck plan")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    pair = ("--nodes", "2", "--tensor-parallel", "1", "--data-parallel", "8", "--expert-parallel", "on")
    code, _, err = _run(capsys, "plan", *h200, *pair, "--hosts", "gpu-a,gpu-b", "--profile-out", str(fifo))
    assert code == 2
    assert err == (
        f"meshdeck: error: --profile-out: {fifo} is a pipe: a layout of 2 instances writes 2 files "
        f"({fifo}-1, {fifo}-2); name a regular file\n"
    )
    assert not list(tmp_path.glob("pipe-*"))
    code, _, err = _run(capsys, "plan", *h200, "--hosts", "gpu-a", "--profile-out", "-")
    assert code == 2 and err.startswith("meshdeck: error: --profile-out: '-' is not a file name")
    assert not (tmp_path / "-").exists()


def test_a_reader_that_goes_away_ends_the_export_quietly_with_status_141(db_with_history: str, tmp_path: Path) -> None:
    rows = [(s, HOUR_START + s, f"gpu{g}", "temperature_c", 40.0) for s in range(11, 3000) for g in range(4)]
    with open_database(db_with_history) as db, SampleWriter(db) as writer:
        writer.submit_rows("gpu-a", rows)
    command = [sys.executable, "-m", "meshdeck", "--db", db_with_history, "history", "export", "--host", "gpu-a"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline().startswith(b"time,ts,host")  # `| head -1`
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141
    assert err == ""
