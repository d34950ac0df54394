"""`meshdeck launch PROFILE [--stored] [--dry-run] [--json] [--skip-preflight] [--force] [--wait]`
`meshdeck launch PROFILE --k8s-manifest [-o FILE] [--k8s-* ...]` (commands/_launch_k8s.py)
`meshdeck launch PROFILE --slurm CLUSTER [--partition P] [--time T] [--dry-run] ...` (commands/_launch_slurm.py)
`meshdeck launch PROFILE --slurm-script [-o FILE] [--partition P] [--time T] ...` (commands/_launch_slurm.py)

PROFILE         a profile YAML file, or the name of a stored profile (`meshdeck profiles list`); a name that is
                both a file here and a stored profile is refused: write ./NAME for the file, --stored for the other
--dry-run       print every node's command (argv and env) and run nothing, contact nothing
--json          with --dry-run: {"nodes": [{"host", "argv", "env", ...}, ...], ...}; otherwise the outcome
--skip-preflight  launch without the pre-flight checks; --force launches even if one fails (both are
                recorded in the deployment's events, as the console's "Launch anyway" is)
--wait          stay until the deployment ends (a torch job) and print its result

The pre-flight runs inside the launch (`DeployService.launch_profile`, as in the console): a failed check
starts nothing and exits 1 unless --force.

Hosts are the names `meshdeck hosts add` stored; `local` is this machine's agent. The deployment keeps
running on the agents when this command returns; see `meshdeck deployments list|stop|logs`.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from meshdeck.commands import Subparsers, _launch_k8s, _launch_slurm
from meshdeck.core.errors import InputError
from meshdeck.core.text import printable, printable_lines
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.plan import LaunchPlan
from meshdeck.launch.preflight_rules import PreflightReport
from meshdeck.launch.profile import Profile, load_profile
from meshdeck.launch.profile_secrets import refuse_references
from meshdeck.services import profiles as profile_service
from meshdeck.services.deployments import hosts as deploy_hosts
from meshdeck.services.deployments.model import LaunchProgress, new_deployment_id
from meshdeck.services.deployments.preflight_gate import FORCE_CLI, SKIP_CLI, PreflightBlocked
from meshdeck.services.deployments.records import StoreRecorder
from meshdeck.services.deployments.registry import DeployService, LaunchFailed
from meshdeck.services.deployments.targets import (
    SIMULATED_VLLM_NOTE,
    PreparedLaunch,
    node_for_dry_run,
    prepare_launch,
)
from meshdeck.services.fleet import FleetService
from meshdeck.services.profiles import read_profile_file
from meshdeck.services.writer_claim import history_status
from meshdeck.store.database import Database, default_database_path, open_database
from meshdeck.store.profiles import find_profile


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("launch", help="start a deployment profile on its hosts (vLLM or torchrun)")
    parser.add_argument("profile", help="profile YAML file, or a stored profile's name")
    parser.add_argument("--stored", action="store_true", help="PROFILE is a stored profile's name, never a file")
    parser.add_argument("--dry-run", action="store_true", help="print each node's command; run and contact nothing")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--skip-preflight", action="store_true", help="do not run the pre-flight checks")
    parser.add_argument("--force", action="store_true", help="launch even when a pre-flight check fails")
    parser.add_argument("--wait", action="store_true", help="stay until the deployment ends and print its result")
    _launch_k8s.add_arguments(parser)
    _launch_slurm.add_arguments(parser)
    parser.set_defaults(func=run)


def read_profile(path_text: str) -> tuple[Profile, str]:
    """The profile in a file and its text, from one bounded read: what is validated is what is recorded."""
    data = read_profile_file(path_text)
    profile = load_profile(data, source=path_text)
    refuse_references(profile, path_text)
    return profile, data.decode("utf-8")


@dataclass(frozen=True)
class LaunchedProfile:
    """The profile a launch runs, and what its record keeps of where it came from."""

    profile: Profile
    text: str  # the YAML as read (a file) or stored (secrets are masked when recorded)
    stored_version: int | None = None  # a stored profile's version; None: a file


def resolve_profile(args: argparse.Namespace, db: Database | None, *, for_launch: bool) -> LaunchedProfile:
    """PROFILE as a file or as a stored profile's name (`--stored`: only the latter). A name that is both is
    refused, naming both; a stored profile's secrets come from the OS keyring only when it is launched."""
    text = args.profile
    stored = _find_stored(db, text) if db is not None and "/" not in text else None
    is_file = not args.stored and Path(text).exists()
    if args.stored and stored is None:
        known = ", ".join(p.name for p in profile_service.list_profiles(db)) if db is not None else ""
        raise InputError("profile", f"no stored profile named {text!r} (stored: {known or 'none'})")
    if stored is not None and is_file:
        raise InputError(
            "profile",
            f"{text!r} is both a file here and a stored profile (v{stored.version.version}); write ./{text} to "
            f"launch the file, or --stored to launch the stored profile",
        )
    if stored is None:
        if not is_file and "/" not in text and not text.endswith((".yaml", ".yml")):
            known = ", ".join(p.name for p in profile_service.list_profiles(db)) if db is not None else ""
            raise InputError("profile", f"{text!r} is neither a file nor a stored profile (stored: {known or 'none'})")
        profile, yaml_text = read_profile(text)
        return LaunchedProfile(profile, yaml_text)
    assert db is not None  # a stored profile was found in it
    profile = profile_service.profile_for_launch(db, text, stored.version.version) if for_launch else stored.profile
    return LaunchedProfile(profile, stored.version.yaml, stored.version.version)


def _find_stored(db: Database, name: str) -> profile_service.StoredProfile | None:
    return profile_service.get_profile(db, name) if find_profile(db, name) is not None else None


def _stored_db(args: argparse.Namespace) -> Database | None:
    """The host database if it exists (a dry run never creates one)."""
    path = Path(args.db) if args.db else default_database_path()
    return open_database(path) if path.exists() else None


def profile_to_write(args: argparse.Namespace) -> Profile:
    """The profile (a file, or a stored one read and not launched), for what writes it elsewhere and runs nothing:
    a Kubernetes manifest, a Slurm batch script."""
    db = _stored_db(args)
    try:
        return resolve_profile(args, db, for_launch=False).profile
    finally:
        if db is not None:
            db.close()


def dry_run(args: argparse.Namespace) -> int:
    db = _stored_db(args)
    try:
        profile = resolve_profile(args, db, for_launch=False).profile
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
        if all(p.host == plan.head_host for p in plan.ports):
            lines += ["", "ports on the head: " + ", ".join(f"{p.port} ({p.purpose})" for p in plan.ports)]
        else:
            lines.append("")
            for host in dict.fromkeys(p.host for p in plan.ports):
                used = ", ".join(f"{p.port} ({p.purpose})" for p in plan.ports if p.host == host)
                lines.append(f"ports on {host}: {used}")
    for warning in (*plan.warnings, *notes):
        lines.append(f"warning: {warning}")
    return "\n".join(printable(line) for line in lines)


def run(args: argparse.Namespace) -> int:
    if args.k8s_manifest:
        _launch_slurm.refuse_without_script(args)
        return _launch_k8s.write_manifest(args, profile_to_write(args))
    if args.slurm_script:
        if args.slurm is not None:
            raise InputError("--slurm", "submits the job; --slurm-script only writes it: pick one")
        _launch_k8s.refuse_without_manifest(args, output_too=False)
        return _launch_slurm.write_script(args, profile_to_write(args))
    _launch_k8s.refuse_without_manifest(args)
    _launch_slurm.refuse_without_script(args)
    if args.slurm is not None:
        with open_database(args.db) as db:
            return _launch_slurm.submit(args, db, resolve_profile(args, db, for_launch=True).profile)
    if args.dry_run:
        return dry_run(args)
    # a path is read (and validated) before anything else is opened; a bare name may be a stored profile
    path = resolve_profile(args, None, for_launch=True) if "/" in args.profile and not args.stored else None
    with open_database(args.db) as db, FleetService() as fleet:
        launched = path or resolve_profile(args, db, for_launch=True)
        profile = launched.profile
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
        recorder = StoreRecorder(
            db, profile_name=profile.name, profile_version=launched.stored_version, profile_yaml=launched.text
        )
        return _launch(fleet, profile, prepared, deployment_id, args, recorder)


def print_preflight(report: PreflightReport) -> None:
    for result in report.results:
        mark = "ok  " if result.passed else "FAIL"
        line = f"{mark} {result.check:<12} {result.host or 'cluster':<14} {result.reason}"
        print(printable(line), file=sys.stderr)


def _launch(
    fleet: FleetService,
    profile: Profile,
    prepared: PreparedLaunch,
    deployment_id: str,
    args: argparse.Namespace,
    recorder: StoreRecorder,
) -> int:
    deploy = DeployService(fleet, recorder=recorder)

    def progress(update: LaunchProgress) -> None:
        print(printable(f"[{update.step}/{update.total}] {update.message}"), file=sys.stderr, flush=True)

    cancel = threading.Event()
    try:
        snapshot = deploy.launch_profile(
            profile,
            prepared,
            deployment_id=deployment_id,
            override=FORCE_CLI if args.force else "",
            skip_preflight=SKIP_CLI if args.skip_preflight else "",
            on_preflight=print_preflight,
            progress=progress,
            cancel=cancel,
        )
    except PreflightBlocked as blocked:
        deploy.close()
        if args.json:
            print(json.dumps({"launched": False, "preflight": blocked.report.as_dict()}, indent=2))
        print("meshdeck: pre-flight failed; nothing was started (--force to launch anyway)", file=sys.stderr)
        return 1
    except LaunchFailed as failed:
        if args.json:
            print(json.dumps(failed.snapshot.as_dict(), indent=2))
        reason = printable_lines(failed.snapshot.reason)  # a log tail from the servers
        print(f"meshdeck: launch {failed.snapshot.state}: {reason}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        cancel.set()
        if any(d.id == deployment_id for d in deploy.list()):  # past its pre-flight: stop what was started
            deploy.stop(deployment_id, grace_s=5)
        raise
    if args.wait:  # this command does not store samples: say whether a recorder (or a console) does
        print(f"note: {printable(history_status(recorder.db.path).note_for_cli())}", file=sys.stderr, flush=True)
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
