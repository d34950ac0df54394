"""Slurm from `meshdeck launch`:

    meshdeck launch PROFILE --slurm CLUSTER [--partition P] [--account A] [--qos Q] [--time T] [--wait] [--json]
    meshdeck launch PROFILE --slurm CLUSTER --dry-run          # the batch script, verbatim; submits nothing
    meshdeck launch PROFILE --slurm-script [-o FILE] [...]     # the script for `sbatch` by hand; contacts nothing

launch/slurm_batch.py says what is in the script (one srun step, each node's argv by $SLURM_NODEID, an agent
beside it). `--slurm CLUSTER` (a host added with `hosts add NAME TARGET --slurm`) submits it through the login
node's agent with `sbatch --parsable`, prints each state Slurm reports (PENDING with its reason, RUNNING, ...),
reaches the agents the job starts on its nodes, and returns once the engine answers (or, with --wait, when the
job ends); `deployments list|logs|stop` follow it (stop is scancel). Its dry run asks the login node's agent only
how it runs there (the agent's command is part of the script) and submits nothing. The profile's `slurm:` section
gives defaults for the options; the command line's win.
"""

from __future__ import annotations

import argparse
import json
import sys

from meshdeck.commands._launch_artifact import write_artifact
from meshdeck.core.errors import InputError
from meshdeck.core.text import printable
from meshdeck.launch.profile import Profile, SlurmSettings
from meshdeck.launch.slurm_batch import build_batch_script
from meshdeck.launch.slurm_options import SlurmOptions, slurm_options
from meshdeck.services.deployments import hosts as deploy_hosts
from meshdeck.services.deployments.model import new_deployment_id
from meshdeck.services.fleet import FleetService
from meshdeck.services.slurm_jobs import SlurmDeployments, deployment_state, ssh_login
from meshdeck.store.database import Database
from meshdeck.store.hosts import get_host
from meshdeck.store.slurm_jobs import SlurmJobRecord

READY_TIMEOUT_S = 1800.0  # a job may wait in the queue; the operator can stop waiting (Ctrl-C) and it stays queued

# dest -> option, for "needs --slurm-script"
SLURM_ONLY = {
    "partition": "--partition",
    "account": "--account",
    "qos": "--qos",
    "time": "--time",
    "slurm_job_name": "--slurm-job-name",
    "slurm_output": "--slurm-output",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Slurm (submit to a cluster's login node, or write the batch script)")
    group.add_argument(
        "--slurm", metavar="CLUSTER", help="submit as one Slurm job through CLUSTER (a host added with --slurm)"
    )
    group.add_argument(
        "--slurm-script", action="store_true", help="write the plan as one sbatch script (one srun task per node)"
    )
    group.add_argument("--partition", metavar="P", help="#SBATCH --partition (default: the cluster's)")
    group.add_argument("--account", metavar="A", help="#SBATCH --account")
    group.add_argument("--qos", metavar="Q", help="#SBATCH --qos")
    group.add_argument("--time", metavar="T", help="#SBATCH --time, e.g. 4:00:00 or 2-00:00:00")
    group.add_argument("--slurm-job-name", metavar="NAME", help="#SBATCH --job-name (default: the profile's name)")
    group.add_argument(
        "--slurm-output", metavar="PATH", help="#SBATCH --output (default meshdeck-%%x-%%j.out; %%j: the job id)"
    )


def refuse_without_script(args: argparse.Namespace) -> None:
    """A Slurm option without --slurm-script or --slurm would be ignored silently: refuse it, naming it."""
    if getattr(args, "slurm", None) is not None:
        return
    for dest, option in SLURM_ONLY.items():
        if getattr(args, dest) is not None:
            raise InputError(option, "is for --slurm CLUSTER or --slurm-script only")


def options_from(args: argparse.Namespace, profile: Profile) -> SlurmOptions:
    """The job's options: the command line's, else the profile's `slurm:` section, else the cluster's defaults."""
    saved = profile.slurm or SlurmSettings()
    return slurm_options(
        job_name=args.slurm_job_name if args.slurm_job_name is not None else profile.name,
        job_name_field="--slurm-job-name" if args.slurm_job_name is not None else "name (the profile's)",
        partition=args.partition if args.partition is not None else saved.partition,
        account=args.account if args.account is not None else saved.account,
        qos=args.qos if args.qos is not None else saved.qos,
        time_limit=args.time if args.time is not None else saved.time,
        output=args.slurm_output,
    )


def write_script(args: argparse.Namespace, profile: Profile) -> int:
    def build() -> tuple[str, tuple[str, ...]]:
        script = build_batch_script(profile, options_from(args, profile), run_id=new_deployment_id(profile.name))
        return script.text, script.warnings

    return write_artifact(args, "--slurm-script", ["k8s_manifest"], build, "submit it on the login node with sbatch")


def submit(args: argparse.Namespace, db: Database, profile: Profile) -> int:
    """`launch --slurm CLUSTER`: submit, print each state, wait until the engine answers (or the job ends)."""
    record = get_host(db, args.slurm)
    if record.scheduler != "slurm":
        raise InputError("--slurm", f"host {record.name!r} is not a Slurm login node (`hosts add NAME TARGET --slurm`)")
    options = options_from(args, profile)
    with FleetService(deploy_hosts.query_settings()) as fleet:
        deploy_hosts.connect(fleet, [record.name], db)
        jobs = SlurmDeployments(fleet, db, ssh_login(record, fleet.settings))
        return follow_submit(jobs, profile, options, args)


def follow_submit(jobs: SlurmDeployments, profile: Profile, options: SlurmOptions, args: argparse.Namespace) -> int:
    """What `--slurm` does once the login node answers (the CLI's and the local benchmark's path)."""
    run_id = new_deployment_id(profile.name)
    if args.dry_run:
        sys.stdout.write(jobs.batch_script(profile, options, run_id=run_id))
        print(f"note: dry run; nothing was submitted to {jobs.login.name}", file=sys.stderr)
        return 0
    record = jobs.submit(profile, options, run_id=run_id)
    say(f"{record.deployment}: submitted as Slurm job {record.job_id} on {jobs.login.name}")
    try:
        record = jobs.wait_ready(record.deployment, timeout_s=READY_TIMEOUT_S, progress=say_state)
        if not record.final:
            problem = jobs.agents_problem.get(record.deployment)
            if problem:
                say(f"note: {problem}")
            say(f"{record.deployment}: serving" if record.serving_port else f"{record.deployment}: running")
        if args.wait and not record.final:
            record = jobs.watch(record.deployment, lambda r: r.final, timeout_s=10 * 365 * 86400, progress=say_state)
    except KeyboardInterrupt:
        say(f"{record.deployment}: stopped waiting; Slurm job {record.job_id} stays queued or running "
            f"(`meshdeck deployments stop {record.deployment}` cancels it)")  # fmt: skip
        raise
    if args.json:
        print(json.dumps(job_json(record), indent=2))
    else:
        print(printable(f"{record.deployment}: {deployment_state(record.state)} (Slurm job {record.job_id} "
                        f"{record.state}{' ' + record.reason if record.reason else ''})"))  # fmt: skip
    return 0 if record.state in ("RUNNING", "COMPLETED") else 1


def say(text: str) -> None:
    print(printable(text), file=sys.stderr, flush=True)


def say_state(record: SlurmJobRecord) -> None:
    because = f" ({record.reason})" if record.reason else ""
    say(f"Slurm job {record.job_id}: {record.state}{because}")


def job_json(record: SlurmJobRecord) -> dict[str, object]:
    return {
        "id": record.deployment,
        "state": deployment_state(record.state),
        "slurm": {
            "cluster": record.cluster,
            "job_id": record.job_id,
            "state": record.state,
            "reason": record.reason,
            "states_seen": list(record.states_seen),
            "nodes": list(record.node_names),
            "output": record.output,
            "options": dict(record.options),
        },
        "profile": record.profile,
        "engine": record.engine,
        "submitted_at": record.submitted_at,
        "ended_at": record.ended_at,
    }
