"""`meshdeck launch PROFILE.yaml [--dry-run] [--json] [--skip-preflight] [--force] [--wait]`

--dry-run       print every node's command (argv and env) and run nothing, contact nothing
--json          with --dry-run: {"nodes": [{"host", "argv", "env", ...}, ...], ...}; otherwise the outcome
--skip-preflight  launch without the pre-flight checks; --force launches even if one fails
--wait          stay until the deployment ends (a torch job) and print its result

Hosts are the names `meshdeck hosts add` stored; `local` is this machine's agent. The deployment keeps
running on the agents when this command returns; see `meshdeck deployments list|stop|logs`.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

from meshdeck.commands import Subparsers
from meshdeck.core.errors import InputError
from meshdeck.core.text import printable, printable_lines
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.plan import LaunchPlan
from meshdeck.launch.profile import Profile, load_profile
from meshdeck.launch.profile_secrets import refuse_references
from meshdeck.services.deployments import hosts as deploy_hosts
from meshdeck.services.deployments.model import LaunchProgress, new_deployment_id
from meshdeck.services.deployments.records import StoreRecorder
from meshdeck.services.deployments.registry import DeployService, LaunchFailed
from meshdeck.services.deployments.targets import SIMULATED_VLLM_NOTE, node_for_dry_run, prepare_launch
from meshdeck.services.fleet import FleetService
from meshdeck.services.preflight import run_preflight
from meshdeck.services.profiles import read_profile_file
from meshdeck.store.database import Database, default_database_path, open_database


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("launch", help="start a deployment profile on its hosts (vLLM or torchrun)")
    parser.add_argument("profile", help="profile YAML file")
    parser.add_argument("--dry-run", action="store_true", help="print each node's command; run and contact nothing")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--skip-preflight", action="store_true", help="do not run the pre-flight checks")
    parser.add_argument("--force", action="store_true", help="launch even when a pre-flight check fails")
    parser.add_argument("--wait", action="store_true", help="stay until the deployment ends and print its result")
    parser.set_defaults(func=run)


def read_profile(path_text: str) -> tuple[Profile, str]:
    """The profile in a file and its text, from one bounded read: what is validated is what is recorded."""
    data = read_profile_file(path_text)
    profile = load_profile(data, source=path_text)
    refuse_references(profile, path_text)
    return profile, data.decode("utf-8")


def _stored_db(args: argparse.Namespace) -> Database | None:
    """The host database if it exists (a dry run never creates one)."""
    path = Path(args.db) if args.db else default_database_path()
    return open_database(path) if path.exists() else None


def dry_run(profile: Profile, args: argparse.Namespace) -> int:
    db = _stored_db(args)
    try:
        addresses: dict[str, str] = {}
        for host in profile.hosts:
            try:
                addresses.update(deploy_hosts.addresses_for([host], db))
            except InputError:
                addresses[host] = host  # not stored yet: show it by name
    finally:
        if db is not None:
            db.close()
    nodes = [node_for_dry_run(host, addresses[host]) for host in profile.hosts]
    plan = build_launch_plan(profile, nodes, run_id=new_deployment_id(profile.name))
    notes = ["dry run: the agents were not asked, so per-node NIC presets (NCCL_IB_HCA, *_SOCKET_IFNAME) are omitted"]
    if args.json:
        document = plan.dry_run()
        document["warnings"] = [*document["warnings"], *notes]
        print(json.dumps(document, indent=2))
    else:
        print(render_plan(plan, notes))
    return 0


def render_plan(plan: LaunchPlan, notes: list[str] | tuple[str, ...] = ()) -> str:
    """The plan as text, from the commands that are launched: each one's `display()` (secrets masked, the
    inline workload named by the files inside it), every line escaped for the terminal."""
    lines = [f"{plan.name}: {plan.engine}, {plan.layout_class}, head {plan.head_host} ({plan.head_address})"]
    for command in plan.commands:
        lines += ["", f"[stage {command.stage}] {command.name} on {command.host} ({command.role})"]
        lines.append(f"  {command.display()}")
        if command.ready:
            lines.append(f"  ready when: {' or '.join(c.describe() for c in command.ready)}")
    if plan.ports:
        lines += ["", "ports on the head: " + ", ".join(f"{p.port} ({p.purpose})" for p in plan.ports)]
    for warning in (*plan.warnings, *notes):
        lines.append(f"warning: {warning}")
    return "\n".join(printable(line) for line in lines)


def run(args: argparse.Namespace) -> int:
    profile, profile_text = read_profile(args.profile)
    if args.dry_run:
        return dry_run(profile, args)
    with open_database(args.db) as db, FleetService() as fleet:
        deploy_hosts.connect(fleet, profile.hosts, db)
        addresses = deploy_hosts.addresses_for(profile.hosts, db)
        deployment_id = new_deployment_id(profile.name)
        prepared = prepare_launch(profile, fleet, addresses=addresses, run_id=deployment_id)
        if not args.json:
            print(render_plan(prepared.plan), file=sys.stderr)
            if prepared.planned_note:
                print(f"note: {printable(prepared.planned_note)}", file=sys.stderr)
            if prepared.simulated and profile.engine == "vllm":
                print(f"note: {SIMULATED_VLLM_NOTE}", file=sys.stderr)
        if not args.skip_preflight:
            report = run_preflight(fleet, prepared.plan, profile, inventories=prepared.inventories)
            for result in report.results:
                mark = "ok  " if result.passed else "FAIL"
                line = f"{mark} {result.check:<12} {result.host or 'cluster':<14} {result.reason}"
                print(printable(line), file=sys.stderr)
            if not report.passed and not args.force:
                if args.json:
                    print(json.dumps({"launched": False, "preflight": report.as_dict()}, indent=2))
                print("meshdeck: pre-flight failed; nothing was started (--force to launch anyway)", file=sys.stderr)
                return 1
        recorder = StoreRecorder(db, profile_name=profile.name, profile_yaml=profile_text)
        return _launch(fleet, prepared.plan, deployment_id, args, recorder)


def _launch(
    fleet: FleetService, plan: LaunchPlan, deployment_id: str, args: argparse.Namespace, recorder: StoreRecorder
) -> int:
    deploy = DeployService(fleet, recorder=recorder)

    def progress(update: LaunchProgress) -> None:
        print(printable(f"[{update.step}/{update.total}] {update.message}"), file=sys.stderr, flush=True)

    cancel = threading.Event()
    try:
        snapshot = deploy.launch(plan, deployment_id=deployment_id, progress=progress, cancel=cancel)
    except LaunchFailed as failed:
        if args.json:
            print(json.dumps(failed.snapshot.as_dict(), indent=2))
        reason = printable_lines(failed.snapshot.reason)  # a log tail from the servers
        print(f"meshdeck: launch {failed.snapshot.state}: {reason}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        cancel.set()
        deploy.stop(deployment_id, grace_s=5)
        raise
    if args.wait:
        while not snapshot.final:
            time.sleep(0.5)
            snapshot = deploy.get(snapshot.id)
    deploy.close()
    if args.json:
        print(json.dumps(snapshot.as_dict(), indent=2))
    else:
        url = f" at {snapshot.serving_url}" if snapshot.serving_url else ""
        print(printable(f"{snapshot.id}: {snapshot.state}{url}"))
        if snapshot.reason:
            print(printable_lines(snapshot.reason))
    return 0 if snapshot.state in ("running", "completed") else 1
