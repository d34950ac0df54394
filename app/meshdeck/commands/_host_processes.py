"""`meshdeck hosts processes HOST [--json]`: which processes hold each GPU of a host, as nvitop lists them.

    $ meshdeck hosts processes gpu-a
    gpu-a: 2 process(es) on 8 GPU(s)
    GPU  PID      TYPE  USER   GPU MEMORY  DEPLOYMENT / PART          COMMAND
    0    412233   C     alice  70.31 GiB   ds32-0101-ab12 / vllm-node0  python3 -m vllm.entrypoints.openai...

HOST is a stored host (`meshdeck hosts add`) or `local` (this machine's agent). The host is reached as
`deployments list` reaches it (a short connect timeout) and its agent asked once. Everything the agent sent
is printed escaped (no raw control character reaches the terminal); `--json` prints it as JSON, each string
as the agent sent it (JSON escapes control characters). Exit status: 0 listed; 1 the agent could not list
them (too old for it, a malformed answer, no answer in time); 2 bad input; 3 the host could not be reached.
"""

from __future__ import annotations

import argparse
import json
import sys

from meshdeck.commands import Subparsers
from meshdeck.core.plural import counted
from meshdeck.core.text import printable
from meshdeck.services import processes as process_service
from meshdeck.services.deployments import hosts as deploy_hosts
from meshdeck.services.fleet import FleetService
from meshdeck.store.database import open_database

EXIT_NOT_LISTED = 1
EXIT_UNREACHABLE = 3
_EXIT_STATUS = """exit status: 0 listed; 1 the agent could not list them (too old, malformed answer, no answer);
2 bad input; 3 the host could not be reached"""


def register(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "processes",
        help="which processes hold each GPU (PID, user, GPU memory, command, deployment), like nvitop",
        epilog=_EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("host", help="a stored host name, or `local` for this machine's agent")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with open_database(args.db) as db, FleetService(deploy_hosts.query_settings()) as fleet:
        unreached = deploy_hosts.reach(fleet, [args.host], db)
        if unreached:
            print(f"meshdeck: {printable(args.host)} could not be reached: {unreached[args.host]}", file=sys.stderr)
            return EXIT_UNREACHABLE
        version = fleet.status(args.host).agent_version
        try:
            listing = process_service.fetch_processes(fleet, args.host, agent_version=version)
        except process_service.ProcessesUnavailable as exc:
            print(f"meshdeck: {exc.message}", file=sys.stderr)
            return EXIT_NOT_LISTED
    if args.json:
        print(json.dumps(listing.to_json(), indent=2))
    else:
        print(render(listing))
    return 0


HEADER = ("GPU", "PID", "TYPE", "USER", "GPU MEMORY", "DEPLOYMENT / PART", "COMMAND")


def render(listing: process_service.HostProcesses) -> str:
    """The table, nvitop's columns; every cell escaped (the services' *_text), GPUs without processes named."""
    simulated = " [SIMULATED]" if listing.simulated else ""
    host = printable(listing.host, 64)
    lines = [
        f"{host}{simulated}: {counted(len(listing.rows), 'process', 'processes')} on {counted(len(listing.gpus), 'GPU')}"
    ]
    if not listing.gpus:
        reason = printable(listing.reason, 300) if listing.reason else "the agent reports none"
        lines.append(f"  no GPUs: {reason}")
        return "\n".join(lines)
    rows = [HEADER] + [
        (str(r.gpu), str(r.pid), r.kind_code, r.user_text, r.memory_text, r.owner_text or "-", r.command_text)
        for r in listing.rows
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    idle = sorted(set(listing.gpus) - {r.gpu for r in listing.rows})
    if idle:
        lines.append("no processes on GPU " + ", ".join(str(g) for g in idle))
    if listing.omitted:
        lines.append(f"{listing.omitted} more process(es) not listed (the agent sends at most 1024 per GPU)")
    return "\n".join(lines)
