"""`meshdeck bench fleet`: the console's sample path against N real simulated agents on this machine.

    meshdeck bench fleet --host-count 32 --gpus-per-host 8 --seconds 60 [--console] --json
    -> {"hosts": 32, "gpus": 256, "seconds": 60, "client_cpu_pct": ..., "samples_lost": 0, ...}

Each host is its own `meshdeck-agent --simulate {G}xH200` daemon with its own socket and state dir in a
temporary folder, reached through its own `attach` process and protocol session; the console's services
record every sample into a temporary SQLite database. `--console` also runs the console's window offscreen
in this process (QT_QPA_PLATFORM=offscreen), showing the fleet view (`gui_view` names it). Exactly what each number means: `meshdeck.services.fleet_benchmark`.
Everything started is stopped and the folder removed afterwards, also on Ctrl+C (SIGINT) or SIGTERM, which
end the run early (exit status 130 / 143). At most 1,000 hosts.

`--host-count` was `--hosts`, which every other command takes as host NAMES (`plan --hosts gpu-a,gpu-b`);
`--hosts N` still works here and says on stderr that it is deprecated.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Callable

from meshdeck.commands import Subparsers
from meshdeck.commands.bench._arguments import positive_int, positive_seconds
from meshdeck.commands.bench._signals import stop_on_signals
from meshdeck.core.errors import InputError
from meshdeck.services.fleet_benchmark import (
    CONTRACT_KEYS,
    MAX_HOSTS,
    ConsoleProbe,
    FleetBenchmarkSettings,
    FleetBenchmarkStopped,
    run_fleet_benchmark,
)


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "fleet", help="N simulated agents through the fleet and the store (and the console offscreen)"
    )
    parser.add_argument(
        "--host-count",
        dest="host_count",
        type=positive_int,
        metavar="N",
        help=f"required: simulated hosts to run, one agent each (at most {MAX_HOSTS})",
    )
    parser.add_argument(
        "--hosts", dest="host_count", type=positive_int, action=_DeprecatedHosts, metavar="N", help=argparse.SUPPRESS
    )
    parser.add_argument("--gpus-per-host", type=positive_int, default=8, help="simulated GPUs per host (default 8)")
    parser.add_argument("--seconds", type=positive_seconds, default=60.0, help="the measuring window (default 60)")
    parser.add_argument(
        "--console", action="store_true", help="also run the console's window offscreen, showing the fleet view"
    )
    parser.add_argument(
        "--connect-timeout",
        type=positive_seconds,
        default=600.0,
        help="seconds to wait for every host's first sample before measuring anyway (default 600)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    # cli.py fills this in (from console_entry) when --console is given: the command layer has no Qt
    parser.set_defaults(func=lambda args: _run(args, parser), offscreen_console=None)


class _DeprecatedHosts(argparse.Action):
    """`--hosts N`, the old spelling of --host-count: still taken, with a line on stderr saying so."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(
            "meshdeck bench fleet: --hosts is deprecated (elsewhere --hosts takes host names); use --host-count",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.host_count is None:
        parser.error("the following arguments are required: --host-count")
    settings = FleetBenchmarkSettings(
        hosts=args.host_count,
        gpus_per_host=args.gpus_per_host,
        seconds=args.seconds,
        connect_timeout_s=args.connect_timeout,
    )
    console: ConsoleProbe | None = None
    if args.console:
        make: Callable[[], ConsoleProbe] | None = args.offscreen_console
        if make is None:
            raise InputError("--console", "this build of meshdeck has no console (PySide6 is missing)")
        console = make()
    stop = threading.Event()
    with stop_on_signals(stop) as received:
        try:
            result = run_fleet_benchmark(settings, console, stop)
        except FleetBenchmarkStopped:
            signum = received[0] if received else signal.SIGINT
            print(
                f"meshdeck bench fleet: stopped by {signal.Signals(signum).name}; "
                "every agent it started is stopped and its folder removed",
                file=sys.stderr,
            )
            return 128 + signum
    document = result.as_dict()
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    width = max(len(key) for key in CONTRACT_KEYS)
    print(f"meshdeck bench fleet: {settings.hosts} hosts x {settings.simulate}, {settings.seconds:g} s window")
    for key in CONTRACT_KEYS:
        value = document[key]
        print(f"  {key:<{width}}  {'-' if value is None else value}")
    print(
        f"  agents' CPU {document['agents_cpu_pct']} % of a core (their attach relays {document['relays_cpu_pct']} %), "
        f"the whole machine {document['machine_cpu_busy_pct']} % ({document['machine']['cpus']} CPUs); "  # type: ignore[index]
        f"client threads {document['client_threads']}; view {document['gui_view'] or 'none'}"
    )
    if document["not_measured"]:
        print(f"  not measured: {document['not_measured']}")
    return 0
