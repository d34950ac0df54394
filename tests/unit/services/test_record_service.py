"""`meshdeck record --install-service` / `--uninstall-service`: a systemd user unit (Linux) or a launchd agent
(macOS) that runs the exact meshdeck executable with the resolved `--db`, written atomically, accepted by
`systemd-analyze verify` where it is installed; removed again by --uninstall-service."""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from meshdeck.core.errors import InputError
from meshdeck.services import record_service
from meshdeck.services.record_service import (
    LAUNCHD_LABEL,
    UNIT_NAME,
    install_service,
    launchd_plist,
    meshdeck_command,
    recorder_argv,
    service_path,
    systemd_unit,
    uninstall_service,
)

MESHDECK = Path(sys.executable).parent / "meshdeck"  # the venv's console script


def _exec_start(unit: str) -> str:
    (line,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    return line.removeprefix("ExecStart=")


def test_the_unit_runs_the_exact_executable_with_the_database_quoted_as_systemd_reads_it(tmp_path: Path) -> None:
    db = tmp_path / "my data" / "100%$HOME.db"
    argv = ["/opt/meshdeck/bin/meshdeck", "--db", str(db), "record"]
    unit = systemd_unit(argv, db)
    quoted_db = str(db).replace("%", "%%").replace("$", "$$")
    assert _exec_start(unit) == f'"/opt/meshdeck/bin/meshdeck" "--db" "{quoted_db}" "record"'
    assert "[Install]\nWantedBy=default.target" in unit and "Restart=on-failure" in unit
    assert "TimeoutStopSec=150" in unit  # the last commit gets its time at a stop
    with pytest.raises(InputError, match="control character"):
        systemd_unit(["/opt/meshdeck", "--db", "a\nExecStartPre=/bin/evil"], db)


def test_the_launchd_agent_names_the_same_command(tmp_path: Path) -> None:
    argv = ["/Applications/meshdeck.app/Contents/MacOS/meshdeck", "--db", "/Users/a/m.db", "record"]
    agent = plistlib.loads(launchd_plist(argv, tmp_path / "record.log"))
    assert agent["Label"] == LAUNCHD_LABEL and agent["ProgramArguments"] == argv
    assert agent["RunAtLoad"] is True and agent["KeepAlive"] == {"SuccessfulExit": False}
    assert agent["StandardErrorPath"] == str(tmp_path / "record.log")


def test_the_service_file_goes_where_each_service_manager_reads_it(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    assert service_path("linux", env) == tmp_path / "cfg" / "systemd" / "user" / UNIT_NAME
    assert service_path("linux", {"HOME": str(tmp_path)}) == tmp_path / ".config" / "systemd" / "user" / UNIT_NAME
    assert service_path("darwin", env) == tmp_path / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
    with pytest.raises(InputError, match=r"only on Linux \(systemd\) and macOS \(launchd\)"):
        service_path("win32", env)


def test_install_replaces_a_file_or_a_link_whole_and_uninstall_removes_it(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    path = service_path("linux", env)
    path.parent.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("not ours")
    path.symlink_to(elsewhere)
    db = tmp_path / "m.db"
    written = install_service(["/x/meshdeck", "--db", str(db), "record"], db, platform="linux", env=env)
    assert written.path == path and written.existed and not path.is_symlink()
    assert elsewhere.read_text() == "not ours"  # the link was replaced, not followed
    assert _exec_start(path.read_text()) == f'"/x/meshdeck" "--db" "{db}" "record"'
    assert sorted(p.name for p in path.parent.iterdir()) == [UNIT_NAME]  # no temporary file left
    assert path.stat().st_mode & 0o777 == 0o644
    wants = path.parent / "default.target.wants" / UNIT_NAME
    wants.parent.mkdir()
    wants.symlink_to(path)  # what `systemctl --user enable` makes
    removed = uninstall_service(platform="linux", env=env)
    assert removed.existed and not path.exists() and not wants.is_symlink()
    assert any("systemctl --user stop" in step for step in removed.next_steps)
    assert not uninstall_service(platform="linux", env=env).existed


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / UNIT_NAME
    path.write_text("old")

    def broken_replace(source: str, target: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(record_service.os, "replace", broken_replace)
    with pytest.raises(OSError):
        record_service.write_atomically(path, b"new")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == [UNIT_NAME]


def test_the_command_is_the_console_script_or_this_python_with_dash_m(tmp_path: Path) -> None:
    if MESHDECK.is_file():
        assert meshdeck_command(str(MESHDECK)) == [str(MESHDECK)]
    assert meshdeck_command("/somewhere/meshdeck/__main__.py") == [sys.executable, "-m", "meshdeck"]
    assert recorder_argv(Path("/d/m.db"), ["--agent-socket", "/s"], "/nope/__main__.py")[-5:] == [
        "--db", "/d/m.db", "record", "--agent-socket", "/s",
    ]  # fmt: skip


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="systemd user units are Linux's")
@pytest.mark.skipif(not MESHDECK.is_file(), reason="the meshdeck console script is not installed in this venv")
def test_meshdeck_record_install_service_writes_a_unit_systemd_accepts(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    db = tmp_path / "data" / "meshdeck.db"
    run = [str(MESHDECK), "--db", str(db), "record"]
    installed = subprocess.run([*run, "--install-service"], env=env, capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stderr
    unit_path = tmp_path / "cfg" / "systemd" / "user" / UNIT_NAME
    assert f"wrote {unit_path}" in installed.stdout and f"systemctl --user enable --now {UNIT_NAME}" in installed.stdout
    unit = unit_path.read_text()
    assert _exec_start(unit) == f'"{MESHDECK}" "--db" "{db}" "record"'

    analyze = shutil.which("systemd-analyze")
    if analyze is not None:  # where systemd is installed, it must read the unit without a word of complaint
        runtime = tmp_path / "runtime"
        runtime.mkdir(mode=0o700)
        verified = subprocess.run(
            [analyze, "--user", "verify", str(unit_path)],
            env={**env, "XDG_RUNTIME_DIR": str(runtime)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        complaints = [line for line in verified.stderr.splitlines() if UNIT_NAME in line or str(unit_path) in line]
        assert verified.returncode == 0 and complaints == [], verified.stderr

    again = subprocess.run([*run, "--install-service"], env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and f"replaced {unit_path}" in again.stdout
    removed = subprocess.run([*run, "--uninstall-service"], env=env, capture_output=True, text=True, timeout=120)
    assert removed.returncode == 0 and f"removed {unit_path}" in removed.stdout
    assert not unit_path.exists()
    refused = subprocess.run([*run, "--install-service", "--seconds", "5"], env=env, capture_output=True, text=True)
    assert refused.returncode == 2 and "--seconds" in refused.stderr
