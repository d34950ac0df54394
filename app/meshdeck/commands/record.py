"""`meshdeck record [--seconds N]`: store every stored host's samples, without the console.

    meshdeck record                       # until Ctrl+C or SIGTERM (both stop it cleanly: exit 0)
    meshdeck record --seconds 600
    meshdeck record --install-service     # a systemd user unit (Linux) or a launchd agent (macOS)
    meshdeck record --uninstall-service

It connects every host `meshdeck hosts add` stored (hosts added later are picked up within 10 s), from
where each one's stored history ends, and writes with the console's own history writer. While a console
has the same database open, the console records and this one pauses (services/writer_claim.py).
A host whose key is not known yet fails until `meshdeck hosts probe NAME --accept-new` accepts it.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from meshdeck.commands import Subparsers
from meshdeck.core.errors import InputError
from meshdeck.core.plural import counted
from meshdeck.services import record_service
from meshdeck.services.fleet import FleetSettings, with_overrides
from meshdeck.services.recorder import Recorder
from meshdeck.services.writer_claim import history_status
from meshdeck.store.database import default_database_path, open_database

MAX_SECONDS = 10 * 365 * 86400.0
# The connection options the service file repeats (tests and unusual setups; none by default).
_FLEET_OPTIONS = (
    ("--known-hosts", "known_hosts", "FILE", "meshdeck's known_hosts file"),
    ("--ssh-config", "ssh_config", "FILE", "ssh config to read (default ~/.ssh/config)"),
    ("--agent-pyz", "agent_pyz", "FILE", "agent zipapp to upload (default: built from this meshdeck)"),
    (
        "--remote-cache-dir",
        "remote_cache_dir",
        "DIR",
        "where the agent goes on the servers (default ~/.cache/meshdeck)",
    ),
    ("--agent-socket", "agent_socket", "PATH", "the agent's socket on the servers"),
    ("--agent-state-dir", "agent_state_dir", "DIR", "the agent's state dir on the servers"),
)


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "record", help="store every stored host's samples in the database, without the console (or as a service)"
    )
    parser.add_argument("--seconds", metavar="N", help="stop after N seconds (default: until Ctrl+C or SIGTERM)")
    service = parser.add_mutually_exclusive_group()
    service.add_argument(
        "--install-service", action="store_true", help="write a user service that runs `meshdeck record` at login"
    )
    service.add_argument("--uninstall-service", action="store_true", help="remove that user service")
    for flag, dest, metavar, text in _FLEET_OPTIONS:
        parser.add_argument(flag, dest=dest, metavar=metavar, help=text)
    parser.set_defaults(func=run)


def _seconds(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise InputError("--seconds", f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
        raise InputError("--seconds", f"{text} must be more than 0 and at most {MAX_SECONDS:.0f}")
    return value


def _fleet_options(args: argparse.Namespace) -> list[str]:
    options: list[str] = []
    for flag, dest, _metavar, _text in _FLEET_OPTIONS:
        value = getattr(args, dest)
        if value is not None:
            options += [flag, value]
    return options


def _say(line: str) -> None:
    print(f"meshdeck record: {line}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    seconds = _seconds(args.seconds)
    if args.install_service or args.uninstall_service:
        if seconds is not None:
            raise InputError("--seconds", "a service records until it is stopped; leave --seconds out")
        return _install(args) if args.install_service else _uninstall(args)
    settings = with_overrides(FleetSettings(), **{dest: getattr(args, dest) for _f, dest, _m, _t in _FLEET_OPTIONS})
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        summary = Recorder(args.db, fleet_settings=settings, say=_say).run(stop, seconds)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    why = "stopped" if stop.is_set() else "done"
    _say(f"{why}: {summary.samples} samples of {counted(summary.hosts, 'host')} committed to {summary.db_path}")
    return 0


def _install(args: argparse.Namespace) -> int:
    with open_database(args.db) as db:  # the path the service names is the one resolved (and checked) here
        db_path = db.path
    argv = record_service.recorder_argv(db_path, _fleet_options(args))
    written = record_service.install_service(argv, db_path)
    print(f"{'replaced' if written.existed else 'wrote'} {written.path}")
    print("start it with:")
    for step in written.next_steps:
        print(f"  {step}")
    return 0


def _uninstall(args: argparse.Namespace) -> int:
    removed = record_service.uninstall_service()
    if not removed.existed:
        print(f"no service file at {removed.path}: nothing to remove")
        return 0
    print(f"removed {removed.path}")
    for step in removed.next_steps:
        print(f"  {step}")
    db_path = Path(args.db).expanduser().absolute() if args.db else default_database_path()
    recorder = history_status(db_path).recorder  # read from the lock files: no database is created
    if recorder is not None:
        print(f"meshdeck record (pid {recorder.pid}) still records {db_path} until it is stopped")
    return 0
