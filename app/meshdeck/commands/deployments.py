"""`meshdeck deployments list|stop|logs`: what meshdeck started, as the agents see it right now.

    meshdeck deployments list [--hosts gpu-a,gpu-b] [--json]
    meshdeck deployments stop DEPLOYMENT [--grace 10]          # parts in reverse start order
    meshdeck deployments logs DEPLOYMENT [--command vllm-node0] [--lines 50]

DEPLOYMENT is an id from `list`, or a profile name when exactly one of its deployments is active.
The hosts asked are every stored host plus this machine's agent when it runs (or --hosts), all at once
with a short connect timeout (`deployments.hosts.reach`). Listing, stopping and reading logs go through the
deployment registry (`services.deployments.registry.DeployService`), as the console's do: the deployments the agents
run are adopted with what the store kept of them (the planner's numbers beside the measured ones, in
`list --json`), and a stop closes the deployment's stored record.

A host that cannot be asked (unreachable, no answer, a malformed answer) is named on stderr
(`meshdeck: HOST could not be asked: WHY`) and in `list --json` (`"unreachable": [{"host", "reason"}]`
beside `"deployments"`); the others are shown, and stopped. Exit status: 0 when every host answered;
1 when a part could not be stopped or its log read (named on stderr); 3 (EXIT_HOSTS_UNREACHABLE) when
some hosts could not be asked, so what is shown may be incomplete — `stop` then leaves the deployment's
stored record open when parts may still run there (a host its stored plan names; any such host when its
plan is not stored); 2 for bad input. Everything an agent said is printed escaped (no raw
control characters reach the terminal); logs keep their newlines and tabs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from meshdeck.commands import Subparsers
from meshdeck.core.errors import InputError
from meshdeck.core.text import printable
from meshdeck.services.deployments import hosts as deploy_hosts
from meshdeck.services.deployments.found import DeploymentSurvey
from meshdeck.services.deployments.model import PartStopped
from meshdeck.services.deployments.records import StoreRecorder
from meshdeck.services.deployments.registry import DeployService
from meshdeck.services.fleet import FleetService
from meshdeck.store.database import Database, open_database

EXIT_PART_FAILED = 1  # a part could not be stopped, or its log read
EXIT_HOSTS_UNREACHABLE = 3
_EXIT_STATUS = """exit status: 0 every host answered; 1 a part could not be stopped or its log read; 2 bad input;
3 some hosts could not be asked (named on stderr and in --json): what is shown may be incomplete"""


def register(subparsers: Subparsers) -> None:
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


def _gather(args: argparse.Namespace, fleet: FleetService, db: Database, deploy: DeployService) -> DeploymentSurvey:
    """Every host asked at once; each that could not be asked is named on stderr (and in the result)."""
    hosts = [h for h in (args.hosts or "").split(",") if h] or deploy_hosts.known_hosts(db)
    if not hosts:
        raise InputError("--hosts", "no hosts are stored and no local agent runs; add one with `meshdeck hosts add`")
    unreached = deploy_hosts.reach(fleet, hosts, db)
    found = deploy.survey([h for h in hosts if h not in unreached], unreachable=unreached)
    problems = {**found.unanswered, **unreached}
    unanswered = {h: problems[h] for h in dict.fromkeys(hosts) if h in problems}
    for host, why in unanswered.items():
        print(f"meshdeck: {host} could not be asked: {why}", file=sys.stderr)
    return DeploymentSurvey(found.deployments, unanswered)


def _fleet() -> FleetService:
    return FleetService(deploy_hosts.query_settings())


@contextmanager
def _registry(args: argparse.Namespace) -> Iterator[tuple[FleetService, Database, DeployService]]:
    with _fleet() as fleet, open_database(args.db) as db:
        deploy = DeployService(fleet, recorder=StoreRecorder(db))
        try:
            yield fleet, db, deploy
        finally:
            deploy.close()


def _list(args: argparse.Namespace) -> int:
    with _registry(args) as (fleet, db, deploy):
        found = _gather(args, fleet, db, deploy)
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

    with _registry(args) as (fleet, db, deploy):
        found = _gather(args, fleet, db, deploy)
        deployment = deploy.find(args.deployment)
        outcome = deploy.stop(deployment.id, grace_s=args.grace, on_part=say)
    for part in outcome.failures:
        line = f"meshdeck: {part.worker.command} on {part.worker.host} was not stopped: {part.error}"
        print(printable(line), file=sys.stderr)
    if outcome.unsure_hosts:
        hosts = ", ".join(outcome.unsure_hosts)
        print(f"meshdeck: {deployment.id} may have parts on {hosts}; its record stays open", file=sys.stderr)
    if outcome.failures:
        return EXIT_PART_FAILED
    return EXIT_HOSTS_UNREACHABLE if found.unanswered else 0


def _logs(args: argparse.Namespace) -> int:
    with _registry(args) as (fleet, db, deploy):
        found = _gather(args, fleet, db, deploy)
        deployment = deploy.find(args.deployment)
        try:
            parts = deploy.logs(deployment.id, args.command, lines=max(1, args.lines))
        except InputError as exc:
            raise InputError("--command", exc.problem) from None
    unread = []
    for part in parts:
        worker = part.worker
        if part.error:  # this part's agent is gone or talks nonsense: say so
            unread.append(printable(f"meshdeck: {worker.command} on {worker.host}: cannot read its log: {part.error}"))
            continue
        print(printable(f"==> {worker.command} on {worker.host} ({worker.state}) <=="))
        print(part.text)
    for line in unread:
        print(line, file=sys.stderr)
    if unread:
        return EXIT_PART_FAILED
    return EXIT_HOSTS_UNREACHABLE if found.unanswered else 0
