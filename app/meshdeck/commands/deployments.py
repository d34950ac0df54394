"""`meshdeck deployments list|stop|logs`: what meshdeck started, as the agents see it right now.

    meshdeck deployments list [--hosts gpu-a,gpu-b] [--json]
    meshdeck deployments stop DEPLOYMENT [--grace 10]          # parts in reverse start order
    meshdeck deployments logs DEPLOYMENT [--command vllm-node0] [--lines 50]

DEPLOYMENT is an id from `list`, or a profile name when exactly one of its deployments is active.
The hosts asked are every stored host plus this machine's agent when it runs (or --hosts). Finding
and stopping are `services.deploy_found`, which the console uses too: a stop closes the deployment's
stored record. A part that cannot be stopped is named on stderr and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from meshdeck.core.errors import InputError
from meshdeck.services import deploy_hosts
from meshdeck.services.deploy_found import PartStopped, find_deployments, stop_found
from meshdeck.services.deploy_model import DeploymentSnapshot, find
from meshdeck.services.deploy_waits import read_log
from meshdeck.services.fleet import FleetService
from meshdeck.store.database import Database, open_database


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("deployments", help="list, stop and read the logs of running deployments")
    actions = parser.add_subparsers(dest="deployments_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="deployments on the hosts, with each part's state")
    listing.add_argument("--json", action="store_true")
    stop = actions.add_parser("stop", help="stop every part, in reverse start order")
    stop.add_argument("deployment")
    stop.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL (default 10)")
    logs = actions.add_parser("logs", help="the last lines of each part's log")
    logs.add_argument("deployment")
    logs.add_argument("--command", help="only this part (e.g. vllm-node0)")
    logs.add_argument("--lines", type=int, default=50)
    for sub in (listing, stop, logs):
        sub.add_argument("--hosts", help="comma-separated hosts to ask (default: all stored + local)")
    listing.set_defaults(func=_list)
    stop.set_defaults(func=_stop)
    logs.set_defaults(func=_logs)


def _gather(args: argparse.Namespace, fleet: FleetService, db: Database) -> list[DeploymentSnapshot]:
    hosts = [h for h in (args.hosts or "").split(",") if h] or deploy_hosts.known_hosts(db)
    if not hosts:
        raise InputError("--hosts", "no hosts are stored and no local agent runs; add one with `meshdeck hosts add`")
    deploy_hosts.connect(fleet, hosts, db)
    return find_deployments(fleet, hosts)


def _list(args: argparse.Namespace) -> int:
    with FleetService() as fleet, open_database(args.db) as db:
        deployments = _gather(args, fleet, db)
    if args.json:
        print(json.dumps([d.as_dict() for d in deployments], indent=2))
        return 0
    if not deployments:
        print("no deployments")
    for deployment in deployments:
        print(f"{deployment.id}  {deployment.state}  ({deployment.engine})")
        for worker in deployment.workers:
            restarts = f", {worker.restarts} restart(s)" if worker.restarts else ""
            why = f" — {worker.reason}" if worker.reason and worker.state != "running" else ""
            print(f"  [{worker.stage}] {worker.command:<16} {worker.host:<14} {worker.state}{restarts}{why}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    def say(part: PartStopped) -> None:
        print(f"{part.worker.command} on {part.worker.host}: {part.state or 'not stopped: ' + part.error}")

    with FleetService() as fleet, open_database(args.db) as db:
        deployment = find(_gather(args, fleet, db), args.deployment)
        outcome = stop_found(fleet, deployment, db=db, grace_s=args.grace, on_part=say)
    for part in outcome.failures:
        print(f"meshdeck: {part.worker.command} on {part.worker.host} was not stopped: {part.error}", file=sys.stderr)
    return 1 if outcome.failures else 0


def _logs(args: argparse.Namespace) -> int:
    with FleetService() as fleet, open_database(args.db) as db:
        deployment = find(_gather(args, fleet, db), args.deployment)
        workers = [w for w in deployment.workers if not args.command or w.command == args.command]
        if not workers:
            names = ", ".join(w.command for w in deployment.workers)
            raise InputError("--command", f"{args.command!r} is not a part of {deployment.id} ({names})")
        for worker in workers:
            text = read_log(lambda *a: fleet.call(*a, timeout=60), worker.host, worker.worker_id)
            print(f"==> {worker.command} on {worker.host} ({worker.state}) <==")
            print("\n".join(text.splitlines()[-max(1, args.lines) :]))
    return 0
