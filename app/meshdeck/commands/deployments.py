"""`meshdeck deployments list|stop|logs`: what meshdeck started, as the agents see it right now.

    meshdeck deployments list [--hosts gpu-a,gpu-b] [--json]
    meshdeck deployments stop DEPLOYMENT [--grace 10]          # parts in reverse start order
    meshdeck deployments logs DEPLOYMENT [--command vllm-node0] [--lines 50]

DEPLOYMENT is an id from `list`, or a profile name when exactly one of its deployments is active.
The hosts asked are every stored host plus this machine's agent when it runs (or --hosts), all at once
with a short connect timeout (`deploy_hosts.reach`). Finding and stopping are `services.deploy_found`,
which the console uses too: a stop closes the deployment's stored record.

A host that cannot be asked (unreachable, no answer, a malformed answer) is named on stderr
(`meshdeck: HOST could not be asked: WHY`) and in `list --json` (`"unreachable": [{"host", "reason"}]`
beside `"deployments"`); the others are shown, and stopped. Exit status: 0 when every host answered;
1 when a part could not be stopped or its log read (named on stderr); 3 (EXIT_HOSTS_UNREACHABLE) when some hosts could not be asked, so
what is shown may be incomplete — `stop` then leaves the deployment's stored record open, since parts
on those hosts may still run; 2 for bad input. Everything an agent said is printed escaped (no raw
control characters reach the terminal); logs keep their newlines and tabs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from meshdeck_agent.protocol import ProtocolError

from meshdeck.core.errors import InputError
from meshdeck.core.text import printable, printable_lines
from meshdeck.remote.errors import RemoteError
from meshdeck.services import deploy_hosts
from meshdeck.services.deploy_found import DeploymentSurvey, PartStopped, stop_found, survey_deployments
from meshdeck.services.deploy_model import find
from meshdeck.services.deploy_waits import read_log
from meshdeck.services.fleet import FleetService
from meshdeck.store.database import Database, open_database

EXIT_PART_FAILED = 1  # a part could not be stopped, or its log read
EXIT_HOSTS_UNREACHABLE = 3
_EXIT_STATUS = """exit status: 0 every host answered; 1 a part could not be stopped or its log read; 2 bad input;
3 some hosts could not be asked (named on stderr and in --json): what is shown may be incomplete"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "deployments",
        help="list, stop and read the logs of running deployments",
        epilog=_EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="deployments_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="deployments on the hosts, with each part's state", epilog=_EXIT_STATUS)
    listing.add_argument("--json", action="store_true")
    stop = actions.add_parser("stop", help="stop every part, in reverse start order", epilog=_EXIT_STATUS)
    stop.add_argument("deployment")
    stop.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL (default 10)")
    logs = actions.add_parser("logs", help="the last lines of each part's log", epilog=_EXIT_STATUS)
    logs.add_argument("deployment")
    logs.add_argument("--command", help="only this part (e.g. vllm-node0)")
    logs.add_argument("--lines", type=int, default=50)
    for sub in (listing, stop, logs):
        sub.add_argument("--hosts", help="comma-separated hosts to ask (default: all stored + local)")
    listing.set_defaults(func=_list)
    stop.set_defaults(func=_stop)
    logs.set_defaults(func=_logs)


def _gather(args: argparse.Namespace, fleet: FleetService, db: Database) -> DeploymentSurvey:
    """Every host asked at once; each that could not be asked is named on stderr (and in the result)."""
    hosts = [h for h in (args.hosts or "").split(",") if h] or deploy_hosts.known_hosts(db)
    if not hosts:
        raise InputError("--hosts", "no hosts are stored and no local agent runs; add one with `meshdeck hosts add`")
    unreached = deploy_hosts.reach(fleet, hosts, db)
    found = survey_deployments(fleet, [h for h in hosts if h not in unreached])
    problems = {**found.unanswered, **unreached}
    unanswered = {h: problems[h] for h in dict.fromkeys(hosts) if h in problems}
    for host, why in unanswered.items():
        print(f"meshdeck: {host} could not be asked: {why}", file=sys.stderr)
    return DeploymentSurvey(found.deployments, unanswered)


def _fleet() -> FleetService:
    return FleetService(deploy_hosts.query_settings())


def _list(args: argparse.Namespace) -> int:
    with _fleet() as fleet, open_database(args.db) as db:
        found = _gather(args, fleet, db)
    status = EXIT_HOSTS_UNREACHABLE if found.unanswered else 0
    if args.json:
        unreachable = [{"host": host, "reason": why} for host, why in found.unanswered.items()]
        print(
            json.dumps({"deployments": [d.as_dict() for d in found.deployments], "unreachable": unreachable}, indent=2)
        )
        return status
    if not found.deployments:
        print("no deployments" + (" on the hosts that answered" if found.unanswered else ""))
    for deployment in found.deployments:
        print(printable(f"{deployment.id}  {deployment.state}  ({deployment.engine})"))
        for worker in deployment.workers:
            restarts = f", {worker.restarts} restart(s)" if worker.restarts else ""
            why = f" — {worker.reason}" if worker.reason and worker.state != "running" else ""
            line = f"  [{worker.stage}] {worker.command:<16} {worker.host:<14} {worker.state}{restarts}{why}"
            print(printable(line))
    return status


def _stop(args: argparse.Namespace) -> int:
    def say(part: PartStopped) -> None:
        print(printable(f"{part.worker.command} on {part.worker.host}: {part.state or 'not stopped: ' + part.error}"))

    with _fleet() as fleet, open_database(args.db) as db:
        found = _gather(args, fleet, db)
        deployment = find(found.deployments, args.deployment)
        # parts on a host that could not be asked may still run: its record is closed only when all answered
        outcome = stop_found(fleet, deployment, db=None if found.unanswered else db, grace_s=args.grace, on_part=say)
    for part in outcome.failures:
        line = f"meshdeck: {part.worker.command} on {part.worker.host} was not stopped: {part.error}"
        print(printable(line), file=sys.stderr)
    if found.unanswered:
        hosts = ", ".join(found.unanswered)
        print(f"meshdeck: {deployment.id} may have parts on {hosts}; its record stays open", file=sys.stderr)
    if outcome.failures:
        return EXIT_PART_FAILED
    return EXIT_HOSTS_UNREACHABLE if found.unanswered else 0


def _logs(args: argparse.Namespace) -> int:
    with _fleet() as fleet, open_database(args.db) as db:
        found = _gather(args, fleet, db)
        deployment = find(found.deployments, args.deployment)
        workers = [w for w in deployment.workers if not args.command or w.command == args.command]
        if not workers:
            names = ", ".join(w.command for w in deployment.workers)
            raise InputError("--command", f"{args.command!r} is not a part of {deployment.id} ({names})")
        unread = []
        for worker in workers:
            try:
                text = read_log(lambda *a: fleet.call(*a, timeout=60), worker.host, worker.worker_id)
            except (ProtocolError, RemoteError) as exc:  # this part's agent is gone or talks nonsense: say so
                why = exc.message if isinstance(exc, ProtocolError) else str(exc)
                unread.append(printable(f"meshdeck: {worker.command} on {worker.host}: cannot read its log: {why}"))
                continue
            print(printable(f"==> {worker.command} on {worker.host} ({worker.state}) <=="))
            print(printable_lines("\n".join(text.splitlines()[-max(1, args.lines) :])))
    for line in unread:
        print(line, file=sys.stderr)
    if unread:
        return EXIT_PART_FAILED
    return EXIT_HOSTS_UNREACHABLE if found.unanswered else 0
