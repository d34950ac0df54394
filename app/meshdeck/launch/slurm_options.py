"""What the operator picks for a Slurm batch job (`--partition/--account/--qos/--time/...`), checked once.

Each value becomes an `#SBATCH` line that sbatch parses; we hold it to Slurm's own rules first, so a typo is an
error naming the option here and nothing odd (a space, a newline, a quote) ever reaches the script. Past
`slurm_options()` the values are trusted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from meshdeck.core.errors import InputError
from meshdeck.core.text import quoted

# Partition, account and QOS names: Slurm stores them as plain words (slurm.conf, sacctmgr); a partition may be
# a comma-separated list, which sbatch tries in turn.
_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}")
_PARTITIONS = re.compile(r"[A-Za-z0-9_.+-]{1,64}(,[A-Za-z0-9_.+-]{1,64}){0,15}")
# sbatch's --time (man sbatch): "minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours",
# "days-hours:minutes", "days-hours:minutes:seconds"; UNLIMITED / INFINITE lift the limit to the partition's.
_TIME = re.compile(r"\d{1,7}(:\d{1,2}){0,2}|\d{1,5}-\d{1,2}(:\d{1,2}){0,2}|UNLIMITED|INFINITE|unlimited|infinite")
# The job name and the output path stay one shell-free word: sbatch reads #SBATCH lines itself, and a path
# may carry Slurm's filename patterns (%j job id, %x job name, %N node, %%).
_JOB_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,128}")
_OUTPUT = re.compile(r"[A-Za-z0-9_.+/%@=-]{1,4096}")
DEFAULT_OUTPUT = "meshdeck-%x-%j.out"


@dataclass(frozen=True)
class SlurmOptions:
    """The job's settings beyond the profile. None: left to the cluster's defaults (no #SBATCH line)."""

    job_name: str
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit: str | None = None
    output: str = DEFAULT_OUTPUT


def slurm_options(
    *,
    job_name: str,
    job_name_field: str = "--slurm-job-name",
    partition: str | None = None,
    account: str | None = None,
    qos: str | None = None,
    time_limit: str | None = None,
    output: str | None = None,
) -> SlurmOptions:
    """The options, each checked by Slurm's rule for its kind of value; InputError names the option."""
    _check(job_name, _JOB_NAME, job_name_field, "a job name: letters, digits, '_', '.', '+', '-' (at most 128)")
    if partition is not None:
        _check(partition, _PARTITIONS, "--partition", "a partition name, or a comma-separated list of them")
    if account is not None:
        _check(account, _NAME, "--account", "an account name (letters, digits, '_', '.', '+', '-')")
    if qos is not None:
        _check(qos, _NAME, "--qos", "a QOS name (letters, digits, '_', '.', '+', '-')")
    if time_limit is not None:
        _check(
            time_limit,
            _TIME,
            "--time",
            "a Slurm time limit: MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED",
        )
        if time_limit.strip("0:-") == "":
            raise InputError("--time", f"{quoted(time_limit)} is no time at all; Slurm reads 0 as no limit")
    if output is not None:
        _check(output, _OUTPUT, "--slurm-output", "a file path (Slurm patterns such as %j allowed), no spaces")
    return SlurmOptions(
        job_name=job_name,
        partition=partition,
        account=account,
        qos=qos,
        time_limit=time_limit,
        output=output or DEFAULT_OUTPUT,
    )


def _check(value: str, pattern: re.Pattern[str], field: str, what: str) -> None:
    if not pattern.fullmatch(value):
        raise InputError(field, f"{quoted(value)} is not {what}")
