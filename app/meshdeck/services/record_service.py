"""`meshdeck record --install-service`: the recorder as a user service, started with the user's session.

    written = install_service(recorder_argv(db_path))       # ServiceFile(path, next_steps)
    removed = uninstall_service()

Linux: a systemd user unit, `$XDG_CONFIG_HOME/systemd/user/meshdeck-record.service` (~/.config by default).
macOS: a launchd agent, `~/Library/LaunchAgents/meshdeck.record.plist`, its output in
`~/Library/Logs/meshdeck-record.log`. Either names the exact meshdeck executable running now (the
console script, the bundle, or this Python with `-m meshdeck`) and the resolved database path, and is
written atomically: a temporary file in the same folder, flushed to disk, then renamed over the old one
(a reader never sees half a file; a link at that name is replaced, not followed). Starting it is the
service manager's job: the lines to run are returned (`next_steps`), since a user manager may not be
reachable from here (a root shell, an SSH session without lingering).
"""

from __future__ import annotations

import os
import plistlib
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from meshdeck.core.errors import InputError

UNIT_NAME = "meshdeck-record.service"
LAUNCHD_LABEL = "meshdeck.record"
STOP_TIMEOUT_S = 150  # the recorder's last commit may take up to 120 s (services/recorder.py)
RESTART_S = 10


@dataclass(frozen=True)
class ServiceFile:
    path: Path
    next_steps: tuple[str, ...]
    existed: bool = False  # install: replaced an older file; uninstall: there was one to remove


def meshdeck_command(argv0: str | None = None) -> list[str]:
    """How to run this meshdeck again: the bundle, the `meshdeck` console script that started this process,
    else this Python with `-m meshdeck` (absolute paths)."""
    if getattr(sys, "frozen", False):
        return [str(Path(sys.executable).absolute())]
    script = Path(sys.argv[0] if argv0 is None else argv0)
    if script.name == "meshdeck" and script.is_file() and os.access(script, os.X_OK):
        return [str(script.absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "meshdeck"]


def recorder_argv(db_path: Path, options: Sequence[str] = (), argv0: str | None = None) -> list[str]:
    """The service's command line: meshdeck, the database, `record` and the recorder's options."""
    return [*meshdeck_command(argv0), "--db", str(db_path), "record", *options]


def _checked(argv: Sequence[str]) -> None:
    for arg in argv:
        if any(ord(c) < 32 or ord(c) == 127 for c in arg):
            raise InputError("service command", f"{arg!r} holds a control character; a service file cannot carry it")


def _systemd_word(arg: str) -> str:
    """One ExecStart= item, double-quoted with systemd's escapes: `%` is a specifier and `$` a variable to it."""
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def systemd_unit(argv: Sequence[str], db_path: Path) -> str:
    _checked([*argv, str(db_path)])
    description = str(db_path).replace("%", "%%")
    return "\n".join(
        [
            "# Written by `meshdeck record --install-service`; `meshdeck record --uninstall-service` removes it.",
            "[Unit]",
            f"Description=meshdeck recorder: every stored host's samples into {description}",
            "",
            "[Service]",
            "Type=simple",
            "ExecStart=" + " ".join(_systemd_word(arg) for arg in argv),
            "Environment=PYTHONUNBUFFERED=1",
            "Restart=on-failure",
            f"RestartSec={RESTART_S}",
            f"TimeoutStopSec={STOP_TIMEOUT_S}",
            "",
            "[Install]",
            "WantedBy=default.target",
            "",
        ]
    )


def launchd_plist(argv: Sequence[str], log_path: Path) -> bytes:
    _checked(argv)
    agent = {
        "Label": LAUNCHD_LABEL,
        "ProgramArguments": list(argv),
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},  # started again after a crash, not after a clean stop
        "ProcessType": "Background",
        "ExitTimeOut": STOP_TIMEOUT_S,
        "EnvironmentVariables": {"PYTHONUNBUFFERED": "1"},
        "StandardOutPath": str(log_path),
        "StandardErrorPath": str(log_path),
    }
    return plistlib.dumps(agent, fmt=plistlib.FMT_XML)


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or Path.home())


def service_path(platform: str = sys.platform, env: Mapping[str, str] = os.environ) -> Path:
    """Where the service file goes for this user on `platform`; InputError where meshdeck has none."""
    if platform.startswith("linux"):
        config = env.get("XDG_CONFIG_HOME") or str(_home(env) / ".config")
        return Path(config) / "systemd" / "user" / UNIT_NAME
    if platform == "darwin":
        return _home(env) / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
    raise InputError("--install-service", f"only on Linux (systemd) and macOS (launchd), not on {platform}")


def write_atomically(path: Path, data: bytes, mode: int = 0o644) -> None:
    """`data` at `path` whole or not at all: a temporary file beside it, fsynced, renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def install_service(
    argv: Sequence[str], db_path: Path, *, platform: str = sys.platform, env: Mapping[str, str] = os.environ
) -> ServiceFile:
    """Write the service file running `argv`; InputError for a platform without one or a file that cannot be written."""
    path = service_path(platform, env)
    existed = path.exists()
    if platform == "darwin":
        log_path = _home(env) / "Library" / "Logs" / "meshdeck-record.log"
        data = launchd_plist(argv, log_path)
        steps: tuple[str, ...] = (
            f"launchctl bootstrap gui/$(id -u) {path}",
            f"tail -f {log_path}   # what it says",
        )
        if existed:
            steps = (f"launchctl bootout gui/$(id -u)/{LAUNCHD_LABEL}", *steps)
    else:
        data = systemd_unit(argv, db_path).encode()
        steps = (
            "systemctl --user daemon-reload",
            f"systemctl --user enable --now {UNIT_NAME}" if not existed else f"systemctl --user restart {UNIT_NAME}",
            'loginctl enable-linger "$USER"   # to record while you are logged out',
            f"journalctl --user -u {UNIT_NAME} -f   # what it says",
        )
    try:
        write_atomically(path, data)
    except OSError as exc:
        raise InputError(f"service file {path}", f"cannot be written ({exc.strerror})") from None
    return ServiceFile(path, steps, existed)


def uninstall_service(*, platform: str = sys.platform, env: Mapping[str, str] = os.environ) -> ServiceFile:
    """Remove the service file (and, on Linux, the link `systemctl enable` made); the lines that stop a
    running one. Nothing to remove is not an error (`existed` False)."""
    path = service_path(platform, env)
    existed = path.exists() or path.is_symlink()
    try:
        if platform != "darwin":
            (path.parent / "default.target.wants" / UNIT_NAME).unlink(missing_ok=True)
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise InputError(f"service file {path}", f"cannot be removed ({exc.strerror})") from None
    if platform == "darwin":
        steps: tuple[str, ...] = (f"launchctl bootout gui/$(id -u)/{LAUNCHD_LABEL}   # if it runs",)
    else:
        steps = (f"systemctl --user stop {UNIT_NAME}   # if it runs", "systemctl --user daemon-reload")
    return ServiceFile(path, steps if existed else (), existed)
