"""`meshdeck launch PROFILE --slurm-script [-o FILE] [--partition P] [--account A] [--qos Q] [--time T] ...`:
the profile's plan as one Slurm batch script, for `sbatch` on the cluster's login node; run nowhere.

launch/slurm_batch.py says what is in the script (one srun step, each node's argv by $SLURM_NODEID). Like
`--dry-run` it contacts nothing: a stored profile is only read, no database is created, no host is asked.
Submitting it from meshdeck (a Slurm cluster as a target, agents inside the allocation) is not built yet: the
operator runs `sbatch FILE` on the login node. The plan's warnings go to stderr.
"""

from __future__ import annotations

import argparse

from meshdeck.commands._launch_artifact import write_artifact
from meshdeck.core.errors import InputError
from meshdeck.launch.profile import Profile
from meshdeck.launch.slurm_batch import build_batch_script
from meshdeck.launch.slurm_options import SlurmOptions, slurm_options
from meshdeck.services.deployments.model import new_deployment_id

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
    group = parser.add_argument_group("Slurm (write a batch script for sbatch; start nothing)")
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
    """A Slurm option without --slurm-script would be ignored silently: refuse it, naming it."""
    for dest, option in SLURM_ONLY.items():
        if getattr(args, dest) is not None:
            raise InputError(option, "is for --slurm-script only")


def options_from(args: argparse.Namespace, profile: Profile) -> SlurmOptions:
    return slurm_options(
        job_name=args.slurm_job_name if args.slurm_job_name is not None else profile.name,
        job_name_field="--slurm-job-name" if args.slurm_job_name is not None else "name (the profile's)",
        partition=args.partition,
        account=args.account,
        qos=args.qos,
        time_limit=args.time,
        output=args.slurm_output,
    )


def write_script(args: argparse.Namespace, profile: Profile) -> int:
    def build() -> tuple[str, tuple[str, ...]]:
        script = build_batch_script(profile, options_from(args, profile), run_id=new_deployment_id(profile.name))
        return script.text, script.warnings

    return write_artifact(args, "--slurm-script", ["k8s_manifest"], build, "submit it on the login node with sbatch")
