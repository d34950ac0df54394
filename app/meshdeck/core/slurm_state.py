"""Slurm's answers about jobs and partitions (`squeue`, `sacct`, `sinfo`), decoded once into typed records.

The JSON forms change by release (22.05's openapi v0.0.38 writes `"job_state": "RUNNING"` and plain numbers;
23.x+ write `["RUNNING"]` and `{"set": true, "number": 2}`), so each field is read by one small function that
takes either shape. The text forms are asked for with the formats below (`|`-separated, no header) so the
fields are known. Input is bounded; a bad value is an InputError naming the command and the field. Pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from meshdeck.core.errors import InputError
from meshdeck.core.text import quoted

MAX_OUTPUT_BYTES = 32 * 1024 * 1024
MAX_RECORDS = 100_000
MAX_TEXT_CHARS = 4096
# The states meshdeck shows by name (squeue's long names, as sacct and the JSON write them); Slurm has more.
FINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
     "PREEMPTED", "REVOKED", "SPECIAL_EXIT"}
)  # fmt: skip
LIVE_STATES = frozenset(
    {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING",
     "STOPPED", "STAGE_OUT", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
)  # fmt: skip
JOB_STATES = FINAL_STATES | LIVE_STATES
SQUEUE_FORMAT = "%i|%T|%r|%D|%N|%P|%j"  # `squeue -h -o SQUEUE_FORMAT`
SACCT_FIELDS = ("JobID", "State", "NNodes", "NodeList", "Partition", "JobName")  # `sacct -n -P -o ...`
SINFO_FORMAT = "%P|%a|%D|%G|%N"  # `sinfo -h -o SINFO_FORMAT`


@dataclass(frozen=True)
class SlurmJob:
    """One job as Slurm reports it. `reason`: why it waits (PENDING) or why it ended; None when Slurm says None."""

    job_id: int
    state: str
    reason: str | None = None
    node_list: str = ""  # Slurm's compact form, e.g. node[1-2]; empty while pending
    node_count: int | None = None
    partition: str | None = None
    name: str | None = None

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


@dataclass(frozen=True)
class SlurmPartition:
    """A partition: its nodes and how many GPUs each has (the fewest of its nodes' GRES), and whether it is up."""

    name: str
    node_list: str
    node_count: int
    gpus_per_node: int
    available: bool
    default: bool = False


def parse_squeue_json(text: str | bytes) -> tuple[SlurmJob, ...]:
    """`squeue --json` (any openapi version that has `jobs`) -> one record per job."""
    document = _load_json(text, "squeue --json")
    jobs = _field(document, "jobs", list, "squeue --json")
    return tuple(_job_from_json(job, f"squeue --json: jobs[{index}]") for index, job in enumerate(_bounded(jobs)))


def _job_from_json(job: Any, where: str) -> SlurmJob:
    if not isinstance(job, Mapping):
        raise InputError(where, "is not an object")
    job_id = _number(job.get("job_id"), f"{where}.job_id")
    if job_id is None:
        raise InputError(f"{where}.job_id", "is missing")
    raw_state = job.get("job_state")
    state = raw_state[0] if isinstance(raw_state, list) and raw_state else raw_state  # 23.x+: a list of flags
    reason = job.get("state_reason")
    return SlurmJob(
        job_id=job_id,
        state=_state(state, f"{where}.job_state"),
        reason=_reason(reason, f"{where}.state_reason"),
        node_list=_text(job.get("nodes") or "", f"{where}.nodes"),
        node_count=_number(job.get("node_count"), f"{where}.node_count"),
        partition=_text(job.get("partition"), f"{where}.partition") or None,
        name=_text(job.get("name"), f"{where}.name") or None,
    )


def parse_squeue_text(text: str | bytes) -> tuple[SlurmJob, ...]:
    """`squeue -h -o SQUEUE_FORMAT` lines -> records (for releases or sites without --json)."""
    jobs = []
    for number, fields in _rows(text, "squeue", 7):
        where = f"squeue line {number}"
        jobs.append(
            SlurmJob(
                job_id=_job_id(fields[0], f"{where}: job id"),
                state=_state(fields[1], f"{where}: state"),
                reason=_reason(fields[2], f"{where}: reason"),
                node_list=fields[4],
                node_count=_count(fields[3], f"{where}: nodes"),
                partition=fields[5] or None,
                name=fields[6] or None,
            )
        )
    return tuple(jobs)


def parse_sacct(text: str | bytes) -> tuple[SlurmJob, ...]:
    """`sacct -n -P -o JobID,State,NNodes,NodeList,Partition,JobName` -> one record per job (steps such as
    `12.batch` or `12.0` are left out; `CANCELLED by 0` is CANCELLED, the rest kept as the reason)."""
    jobs = []
    for number, fields in _rows(text, "sacct", len(SACCT_FIELDS)):
        if fields[0] == "JobID" or "." in fields[0]:  # a header line, or a step of a job
            continue
        where = f"sacct line {number}"
        state, _, detail = fields[1].partition(" ")
        jobs.append(
            SlurmJob(
                job_id=_job_id(fields[0], f"{where}: JobID"),
                state=_state(state, f"{where}: State"),
                reason=detail or None,
                node_list="" if fields[3] in ("None assigned", "(null)") else fields[3],
                node_count=_count(fields[2], f"{where}: NNodes"),
                partition=fields[4] or None,
                name=fields[5] or None,
            )
        )
    return tuple(jobs)


def parse_sinfo_json(text: str | bytes) -> tuple[SlurmPartition, ...]:
    """`sinfo --json` -> partitions, gathered from its `nodes` (22.05 lists nodes with their partitions)."""
    document = _load_json(text, "sinfo --json")
    nodes = _field(document, "nodes", list, "sinfo --json")
    members: dict[str, list[tuple[str, int, bool]]] = {}
    for index, node in enumerate(_bounded(nodes)):
        where = f"sinfo --json: nodes[{index}]"
        if not isinstance(node, Mapping):
            raise InputError(where, "is not an object")
        name = _text(node.get("name"), f"{where}.name")
        raw_state = node.get("state")
        state = raw_state[0] if isinstance(raw_state, list) and raw_state else raw_state
        up = isinstance(state, str) and state.lower() not in ("down", "drained", "fail", "future", "unknown")
        gpus = gres_gpus(_text(node.get("gres") or "", f"{where}.gres"))
        for partition in _field(node, "partitions", list, where):
            members.setdefault(_text(partition, f"{where}.partitions"), []).append((name, gpus, up))
    return tuple(
        SlurmPartition(
            name=name,
            node_list=",".join(n for n, _, _ in entries),
            node_count=len(entries),
            gpus_per_node=min(g for _, g, _ in entries),
            available=any(up for _, _, up in entries),
        )
        for name, entries in members.items()
    )


def parse_sinfo_text(text: str | bytes) -> tuple[SlurmPartition, ...]:
    """`sinfo -h -o SINFO_FORMAT` lines -> partitions (a partition on several lines: its node groups)."""
    partitions: dict[str, SlurmPartition] = {}
    for number, fields in _rows(text, "sinfo", 5):
        where = f"sinfo line {number}"
        name = fields[0].rstrip("*")
        if not name:
            raise InputError(f"{where}: partition", "is empty")
        count = _count(fields[2], f"{where}: nodes") or 0
        part = SlurmPartition(name, fields[4], count, gres_gpus(fields[3]), fields[1] == "up", fields[0].endswith("*"))
        if name in partitions:
            seen = partitions[name]
            part = SlurmPartition(name, f"{seen.node_list},{part.node_list}", seen.node_count + count,
                                  min(seen.gpus_per_node, part.gpus_per_node), seen.available or part.available,
                                  seen.default or part.default)  # fmt: skip
        partitions[name] = part
    return tuple(partitions.values())


def gres_gpus(gres: str) -> int:
    """GPUs in a node's GRES string: `gpu:8`, `gpu:h100:8(S:0-1)`, `gpu:a100:4,gpu:h100:2`; `(null)` -> 0."""
    total = 0
    for entry in re.sub(r"\([^)]*\)", "", gres).split(","):
        parts = entry.strip().split(":")
        if parts[0] != "gpu":
            continue
        if len(parts) == 1 or not parts[-1].isdigit():
            total += 1  # `gpu` or `gpu:TYPE` alone: one of them
        else:
            total += int(parts[-1])
    return total


def _load_json(text: str | bytes, command: str) -> Mapping[str, Any]:
    if len(text) > MAX_OUTPUT_BYTES:
        raise InputError(command, f"output is over {MAX_OUTPUT_BYTES} bytes")
    try:
        document = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(command, f"is not JSON: {exc}") from None
    if not isinstance(document, Mapping):
        raise InputError(command, "is not a JSON object")
    errors = document.get("errors")
    if isinstance(errors, list) and errors:
        raise InputError(f"{command}: errors", quoted(errors))
    return document


def _field(document: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = document.get(key)
    if not isinstance(value, kind):
        raise InputError(f"{where}.{key}", f"is missing or not a {kind.__name__}")
    return value


def _bounded(items: list[Any]) -> list[Any]:
    if len(items) > MAX_RECORDS:
        raise InputError("slurm output", f"{len(items)} records; at most {MAX_RECORDS} are read")
    return items


def _rows(text: str | bytes, command: str, width: int) -> Iterable[tuple[int, list[str]]]:
    if len(text) > MAX_OUTPUT_BYTES:
        raise InputError(command, f"output is over {MAX_OUTPUT_BYTES} bytes")
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    lines = text.splitlines()
    if len(lines) > MAX_RECORDS:
        raise InputError(command, f"{len(lines)} lines; at most {MAX_RECORDS} are read")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != width:
            raise InputError(f"{command} line {number}", f"has {len(fields)} '|'-separated fields, not {width}")
        yield number, [_text(f, f"{command} line {number}") for f in fields]


def _text(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_TEXT_CHARS or not value.isprintable():
        raise InputError(where, f"{quoted(value)} is not a short printable string")
    return value


def _state(value: Any, where: str) -> str:
    text = _text(value, where).upper()
    if text.rstrip("+") not in JOB_STATES:  # sacct marks "CANCELLED+" when the line is cut short
        raise InputError(where, f"{quoted(value)} is not a Slurm job state")
    return text.rstrip("+")


def _reason(value: Any, where: str) -> str | None:
    text = _text(value, where)
    return None if text in ("", "None", "(null)") else text


def _number(value: Any, where: str) -> int | None:
    if isinstance(value, Mapping):  # 23.x+: {"set": bool, "infinite": bool, "number": n}
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise InputError(where, f"{quoted(value)} is not a non-negative integer")
    return value


def _job_id(text: str, where: str) -> int:
    base = text.split("_")[0].split("+")[0]  # array (12_3) and heterogeneous (12+0) jobs: the job's own id
    if not base.isdigit() or len(base) > 19:
        raise InputError(where, f"{quoted(text)} is not a Slurm job id")
    return int(base)


def _count(text: str, where: str) -> int | None:
    if text in ("", "N/A"):
        return None
    if not text.isdigit() or len(text) > 9:
        raise InputError(where, f"{quoted(text)} is not a node count")
    return int(text)


# `scontrol show job -o`, `scontrol show node -o` and jobcomp/filetxt lines: `Key=value` words on one line. A value
# with spaces (a job name, a comment) would spill into the next word; the keys read here have none.
_KEY_VALUE = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:]*)=(\S*)")


def key_values(line: str, where: str) -> dict[str, str]:
    """`Key=value` words of one line (the first of a repeated key wins), each value a short printable string."""
    if len(line) > MAX_OUTPUT_BYTES:
        raise InputError(where, f"line is over {MAX_OUTPUT_BYTES} bytes")
    found: dict[str, str] = {}
    for key, value in _KEY_VALUE.findall(line):
        found.setdefault(key, _text(value[:MAX_TEXT_CHARS], f"{where}: {key}"))
    return found


def parse_scontrol_job(text: str | bytes) -> tuple[SlurmJob, str | None]:
    """`scontrol show job -o ID` -> the job and its output file (`StdOut`, absolute, Slurm's patterns filled)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise InputError("scontrol show job", "printed nothing")
    fields = key_values(lines[0], "scontrol show job")
    job = _job_from_fields(fields, "scontrol show job")
    output = fields.get("StdOut") or None
    return job, output


def parse_jobcomp(text: str | bytes, job_id: int) -> SlurmJob | None:
    """The completion record of `job_id` in a `JobCompType=jobcomp/filetxt` file (one `Key=value` line per job
    that ended; the last line for the id wins, a requeued job has several), or None when it has none yet."""
    if len(text) > MAX_OUTPUT_BYTES:
        raise InputError("jobcomp", f"file is over {MAX_OUTPUT_BYTES} bytes")
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    found = None
    marker = f"JobId={job_id} "
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith(marker):
            found = _job_from_fields(key_values(line, f"jobcomp line {number}"), f"jobcomp line {number}")
    return found


def _job_from_fields(fields: Mapping[str, str], where: str) -> SlurmJob:
    if "JobId" not in fields or "JobState" not in fields:
        raise InputError(where, "has no JobId or JobState")
    count = fields.get("NumNodes") or fields.get("NodeCnt") or ""
    nodes = fields.get("NodeList", "")
    return SlurmJob(
        job_id=_job_id(fields["JobId"], f"{where}: JobId"),
        state=_state(fields["JobState"], f"{where}: JobState"),
        reason=_reason(fields.get("Reason"), f"{where}: Reason"),
        node_list="" if nodes in ("(null)", "None") else nodes,
        node_count=_count(count.split("-")[0], f"{where}: NumNodes") if count else None,
        partition=fields.get("Partition") or None,
        name=fields.get("JobName") or fields.get("Name") or None,
    )


def parse_hostnames(text: str | bytes) -> tuple[str, ...]:
    """`scontrol show hostnames LIST` -> the node names in the allocation's order (SLURM_NODEID's order)."""
    names = []
    for number, fields in _rows(text, "scontrol show hostnames", 1):
        name = fields[0].strip()
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", name):
            raise InputError(f"scontrol show hostnames line {number}", f"{quoted(name)} is not a node name")
        names.append(name)
    return tuple(names)


def parse_node_addresses(text: str | bytes) -> dict[str, str]:
    """`scontrol show node -o [NAMES]` -> node name -> the address slurmctld reaches it by (`NodeAddr`)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    found = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = key_values(line, f"scontrol show node line {number}")
        name, address = fields.get("NodeName"), fields.get("NodeAddr") or fields.get("NodeName")
        if name and address:
            found[name] = address
    return found


def parse_associations(text: str | bytes) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`sacctmgr -n -P show assoc user=U format=Account,QOS` -> (accounts, QOS names), each once, in order."""
    accounts: list[str] = []
    qos: list[str] = []
    for _number, fields in _rows(text, "sacctmgr", 2):
        if fields[0] and fields[0] not in accounts:
            accounts.append(fields[0])
        for name in fields[1].split(","):
            if name and name not in qos:
                qos.append(name)
    return tuple(accounts), tuple(qos)


def parse_version(text: str | bytes) -> str:
    """`sinfo --version` (`slurm 22.05.8`) -> `22.05.8`."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    match = re.search(r"slurm(?:-wlm)?\s+(\d+\.\d+(?:\.\d+)?\S*)", text[:4096])
    if match is None:
        raise InputError("sinfo --version", f"{quoted(text[:200])} names no Slurm version")
    return match.group(1)
