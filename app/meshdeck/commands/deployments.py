"""`meshdeck deployments list|stop|logs`: what meshdeck started, as the agents see it right now.

    meshdeck deployments list [--hosts gpu-a,gpu-b] [--json]
    meshdeck deployments stop DEPLOYMENT [--grace 10] [--yes]  # parts in reverse start order; asks first
    meshdeck deployments logs DEPLOYMENT [--command vllm-node0] [--lines 50] [-f]

DEPLOYMENT is an id from `list`, or a profile name when exactly one of its deployments is active.

`stop` asks before it stops anything, on a terminal: the deployment, each part and its host, and that the
engines' in-flight requests are dropped. `--yes` stops without asking; it is required when stdin is not a
terminal (a script, cron, CI): without it such a stop stops nothing and exits 2, naming --yes.
`logs -f` (`--follow`) prints each part's last lines, then its new lines as they come (one bounded read per
part a second, as the console's log tab reads), until Ctrl+C or the deployment ends (stopped, failed,
completed); with several parts each line is prefixed with its part.
The hosts asked are every stored host plus this machine's agent when it runs (or --hosts), all at once
with a short connect timeout (`deployments.hosts.reach`). Listing, stopping and reading logs go through the
deployment registry (`services.deployments.registry.DeployService`), as the console's do: the deployments the agents
run are adopted with what the store kept of them (the planner's numbers beside the measured ones, in
`list --json`), and a stop closes the deployment's stored record.

Deployments submitted to a Slurm cluster (`launch --slurm`) are listed from their stored job records, each
asked of its cluster's login node once (squeue, then sacct or the completion record): meshdeck's state, the
job's own (PENDING with Slurm's reason, RUNNING, TIMEOUT, ...) and its nodes. `stop` cancels such a job
(scancel) and waits for its final state; `logs` prints the end of the job's output file (every node's tasks
write there). `logs -f` is for deployments on the agents.

A host that cannot be asked (unreachable, no answer, a malformed answer) is named on stderr
(`meshdeck: HOST could not be asked: WHY`) and in `list --json` (`"unreachable": [{"host", "reason"}]`
beside `"deployments"`); the others are shown, and stopped. Exit status: 0 when every host answered;
1 when a part could not be stopped or its log read (named on stderr), or a stop was not confirmed;
3 (EXIT_HOSTS_UNREACHABLE) when some hosts could not be asked, so what is shown may be incomplete;
2 for bad input. `stop` exits 3 only when hosts the deployment may have parts on could not be asked (a host
its stored plan names; any such host when its plan is not stored) — its stored record then stays open; a
host that could not be asked but has no part of it is a warning on stderr (exit 0). Everything an agent
said is printed escaped (no raw control characters reach the terminal); logs keep their newlines and tabs.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from meshdeck.commands import Subparsers
from meshdeck.commands._launch_slurm import job_json
from meshdeck.core.errors import InputError
from meshdeck.core.plural import counted
from meshdeck.core.text import printable, printable_lines
from meshdeck.remote.errors import RemoteError
from meshdeck.services.deployments import hosts as deploy_hosts
from meshdeck.services.deployments.events import DeploymentChanged, DeploymentEvent, DeploymentLogLines
from meshdeck.services.deployments.found import DeploymentSurvey
from meshdeck.services.deployments.model import DeploymentSnapshot, PartStopped, stop_question
from meshdeck.services.deployments.records import StoreRecorder
from meshdeck.services.deployments.registry import DeployService
from meshdeck.services.deployments.watch import LOG_POLL_S
from meshdeck.services.fleet import FleetService
from meshdeck.services.slurm_jobs import SlurmDeployments, deployment_state, ssh_login
from meshdeck.store.database import Database, open_database
from meshdeck.store.hosts import find_host
from meshdeck.store.slurm_jobs import SlurmJobRecord, find_slurm_job, list_slurm_jobs

EXIT_PART_FAILED = 1  # a part could not be stopped, or its log read (or a stop was not confirmed)
EXIT_HOSTS_UNREACHABLE = 3
FOLLOW_LAST_READ_S = LOG_POLL_S + 1.0  # after the deployment ended, how long its logs are still read
FOLLOW_QUEUE = 1000  # events waiting to be printed by `logs -f`; past it the oldest log text is dropped (said)
_EXIT_STATUS = """exit status: 0 every host answered; 1 a part could not be stopped or its log read, or a stop was
not confirmed; 2 bad input (also: `stop` without --yes when stdin is not a terminal); 3 some hosts could not
be asked (named on stderr and in --json): what is shown may be incomplete — for `stop`, only when hosts the
deployment may run on could not be asked (others are a warning)"""


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
    stop.add_argument(
        "-y", "--yes", action="store_true", help="stop without asking (required when stdin is not a terminal)"
    )
    logs = actions.add_parser("logs", help="the last lines of each part's log", epilog=_EXIT_STATUS)
    logs.add_argument("deployment")
    logs.add_argument("--command", help="only this part (e.g. vllm-node0)")
    logs.add_argument("--lines", type=int, default=50)
    logs.add_argument(
        "-f", "--follow", action="store_true", help="then print new lines as they come, until Ctrl+C or it ends"
    )
    for sub in (listing, stop, logs):
        sub.add_argument("--hosts", help="comma-separated hosts to ask (default: all stored + local)")
    listing.set_defaults(func=_list)
    stop.set_defaults(func=_stop)
    logs.set_defaults(func=_logs)


def _gather(
    args: argparse.Namespace, fleet: FleetService, db: Database, deploy: DeployService, *, warning: bool = False
) -> DeploymentSurvey:
    """Every host asked at once; each that could not be asked is named on stderr (and in the result), as a
    `warning:` when that alone does not decide the exit status (`stop`)."""
    hosts = [h for h in (args.hosts or "").split(",") if h] or deploy_hosts.known_hosts(db)
    if not hosts:
        raise InputError("--hosts", "no hosts are stored and no local agent runs; add one with `meshdeck hosts add`")
    unreached = deploy_hosts.reach(fleet, hosts, db)
    found = deploy.survey([h for h in hosts if h not in unreached], unreachable=unreached)
    problems = {**found.unanswered, **unreached}
    unanswered = {h: problems[h] for h in dict.fromkeys(hosts) if h in problems}
    for host, why in unanswered.items():
        print(f"meshdeck: {'warning: ' if warning else ''}{host} could not be asked: {why}", file=sys.stderr)
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


def _slurm_jobs(fleet: FleetService, db: Database, unanswered: dict[str, str]) -> list[SlurmJobRecord]:
    """The Slurm jobs meshdeck submitted, the open ones asked of their login node now (one that cannot be
    asked keeps its last state, and the cluster is named in `unanswered`)."""
    jobs = list_slurm_jobs(db, limit=100)
    fresh = []
    clients: dict[str, SlurmDeployments | None] = {}
    for job in jobs:
        if job.final:
            fresh.append(job)
            continue
        if job.cluster not in clients:
            clients[job.cluster] = _slurm_client(fleet, db, job.cluster, unanswered)
        client = clients[job.cluster]
        try:
            fresh.append(client.refresh(job.deployment) if client else job)
        except (InputError, RemoteError) as exc:
            unanswered.setdefault(job.cluster, str(exc))
            fresh.append(job)
    return fresh


def _slurm_client(
    fleet: FleetService, db: Database, cluster: str, unanswered: dict[str, str]
) -> SlurmDeployments | None:
    record = find_host(db, cluster)
    if record is None:
        unanswered.setdefault(cluster, "this Slurm cluster's login node is no longer stored")
        return None
    if cluster not in fleet.hosts():
        reached = deploy_hosts.reach(fleet, [cluster], db)
        if cluster in reached:
            unanswered.setdefault(cluster, reached[cluster])
            return None
    return SlurmDeployments(fleet, db, ssh_login(record, fleet.settings))


def _find_slurm_job(db: Database, key: str) -> SlurmJobRecord | None:
    """The Slurm job of deployment `key`, or of profile `key` when exactly one of its jobs is open."""
    found = find_slurm_job(db, key)
    if found is not None:
        return found
    open_jobs = [job for job in list_slurm_jobs(db, open_only=True) if job.profile == key]
    return open_jobs[0] if len(open_jobs) == 1 else None


def _slurm_line(job: SlurmJobRecord) -> str:
    because = f" ({job.reason})" if job.reason else ""
    nodes = f" on {','.join(job.node_names)}" if job.node_names else ""
    return (f"{job.deployment}  {deployment_state(job.state)}  ({job.engine}, Slurm job {job.job_id} on "
            f"{job.cluster}: {job.state}{because}{nodes})")  # fmt: skip


def _list(args: argparse.Namespace) -> int:
    with _registry(args) as (fleet, db, deploy):
        found = _gather(args, fleet, db, deploy)
        unanswered = dict(found.unanswered)
        jobs = _slurm_jobs(fleet, db, unanswered)
    status = EXIT_HOSTS_UNREACHABLE if unanswered else 0
    if args.json:
        unreachable = [{"host": host, "reason": why} for host, why in unanswered.items()]
        listed = [d.as_dict() for d in found.deployments] + [job_json(job) for job in jobs]
        print(json.dumps({"deployments": listed, "unreachable": unreachable}, indent=2))
        return status
    for job in jobs:
        print(printable(_slurm_line(job)))
    if not found.deployments and not jobs:
        print("no deployments" + (" on the hosts that answered" if found.unanswered else ""))
    for deployment in found.deployments:
        print(printable(f"{deployment.id}  {deployment.state}  ({deployment.engine})"))
        for worker in deployment.workers:
            restarts = f", {counted(worker.restarts, 'restart')}" if worker.restarts else ""
            why = f" — {worker.reason}" if worker.reason and worker.state != "running" else ""
            line = f"  [{worker.stage}] {worker.command:<16} {worker.host:<14} {worker.state}{restarts}{why}"
            print(printable(line))
    return status


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):  # closed or replaced by something without a terminal
        return False


def confirmed(snapshot: DeploymentSnapshot, grace_s: float) -> bool:
    """Ask on the terminal (the question on stderr, the answer from stdin); only y/yes stops."""
    print(stop_question(snapshot, grace_s), file=sys.stderr)
    print("Stop it? [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        answer = sys.stdin.readline(16)
    except (OSError, ValueError):
        return False
    return answer.strip().lower() in ("y", "yes")


def _stop(args: argparse.Namespace) -> int:
    if not args.yes and not _stdin_is_terminal():  # before any host is asked: a script learns at once
        raise InputError(
            "--yes",
            f"stopping {args.deployment} asks for confirmation and stdin is not a terminal; nothing was stopped: "
            "add --yes to stop without asking",
        )

    def say(part: PartStopped) -> None:
        print(printable(f"{part.worker.command} on {part.worker.host}: {part.state or 'not stopped: ' + part.error}"))

    with open_database(args.db) as db:
        job = _find_slurm_job(db, args.deployment)
        if job is not None:
            return _stop_slurm(args, db, job)

    with _registry(args) as (fleet, db, deploy):
        _gather(args, fleet, db, deploy, warning=True)
        deployment = deploy.find(args.deployment)
        if not args.yes and not confirmed(deployment, args.grace):
            print(f"meshdeck: {printable(deployment.id)} was not stopped (not confirmed)", file=sys.stderr)
            return EXIT_PART_FAILED
        outcome = deploy.stop(deployment.id, grace_s=args.grace, on_part=say)
    for part in outcome.failures:
        line = f"meshdeck: {part.worker.command} on {part.worker.host} was not stopped: {part.error}"
        print(printable(line), file=sys.stderr)
    if outcome.unsure_hosts:
        hosts = ", ".join(outcome.unsure_hosts)
        print(f"meshdeck: {deployment.id} may have parts on {hosts}; its record stays open", file=sys.stderr)
    if outcome.failures:
        return EXIT_PART_FAILED
    return EXIT_HOSTS_UNREACHABLE if outcome.unsure_hosts else 0


def _stop_slurm(args: argparse.Namespace, db: Database, job: SlurmJobRecord) -> int:
    """scancel the deployment's job (after asking, as for agents' deployments) and wait for its final state."""
    if job.final:
        print(printable(f"{job.deployment}: Slurm job {job.job_id} already ended {job.state}"))
        return 0
    if not args.yes:
        print(printable(f"Stop {job.deployment}? scancel Slurm job {job.job_id} on {job.cluster} "
                        f"({job.nodes} nodes); the engines' in-flight requests are dropped."), file=sys.stderr)  # fmt: skip
        print("Stop it? [y/N] ", end="", file=sys.stderr, flush=True)
        if sys.stdin.readline(16).strip().lower() not in ("y", "yes"):
            print(f"meshdeck: {printable(job.deployment)} was not stopped (not confirmed)", file=sys.stderr)
            return EXIT_PART_FAILED

    def stop(client: SlurmDeployments) -> int:
        ended = client.stop(job.deployment, timeout_s=max(30.0, args.grace * 3))
        print(printable(f"{ended.deployment}: Slurm job {ended.job_id} {ended.state}"))
        return 0

    return _on_cluster(db, job, stop)


def _on_cluster(db: Database, job: SlurmJobRecord, action: Callable[[SlurmDeployments], int]) -> int:
    """`action` with the job's cluster reached; its login node named on stderr (exit 3) when it cannot be."""
    with _fleet() as fleet:
        unanswered: dict[str, str] = {}
        client = _slurm_client(fleet, db, job.cluster, unanswered)
        if client is None:
            print(printable(f"meshdeck: {job.cluster} could not be asked: {unanswered[job.cluster]}"), file=sys.stderr)
            return EXIT_HOSTS_UNREACHABLE
        return action(client)


def _logs_slurm(args: argparse.Namespace, db: Database, job: SlurmJobRecord) -> int:
    if args.follow or args.command:
        raise InputError("--follow" if args.follow else "--command", "is for deployments on the agents; a Slurm "
                         "job has one output file")  # fmt: skip

    def show(client: SlurmDeployments) -> int:
        text = client.logs(job.deployment, lines=max(1, args.lines))
        print(printable(f"==> Slurm job {job.job_id} on {job.cluster} ({job.state}): {job.output or '?'} <=="))
        print(printable_lines(text))
        return 0

    return _on_cluster(db, job, show)


def _logs(args: argparse.Namespace) -> int:
    with open_database(args.db) as db:
        job = _find_slurm_job(db, args.deployment)
        if job is not None:
            return _logs_slurm(args, db, job)
    with _registry(args) as (fleet, db, deploy):
        found = _gather(args, fleet, db, deploy)
        deployment = deploy.find(args.deployment)
        if args.follow:
            _follow(deploy, deployment, args)
            return EXIT_HOSTS_UNREACHABLE if found.unanswered else 0
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


def _follow(deploy: DeployService, deployment: DeploymentSnapshot, args: argparse.Namespace) -> None:
    """`logs -f`: the registry watches each part's log (its last `--lines`, then one bounded read a second)
    and says when the deployment changes; printed as it comes until Ctrl+C (status 0) or the deployment
    ends. The events wait in a bounded queue: a terminal that cannot keep up loses the oldest text, and is
    told so."""
    commands = [w.command for w in deployment.workers if args.command is None or w.command == args.command]
    if not commands:
        names = ", ".join(w.command for w in deployment.workers)
        raise InputError("--command", f"{args.command!r} is not a part of {deployment.id} ({names})")
    events: queue.Queue[DeploymentEvent] = queue.Queue(FOLLOW_QUEUE)
    dropped = 0

    def heard(event: DeploymentEvent) -> None:  # the registry's threads: quick, never blocks
        nonlocal dropped
        if isinstance(event, DeploymentChanged) and event.snapshot.id != deployment.id:
            return
        try:
            events.put_nowait(event)
        except queue.Full:
            dropped += 1

    prefix = len(commands) > 1
    unsubscribe = deploy.subscribe(heard)
    unwatch = [deploy.watch_log(deployment.id, command, lines=max(1, args.lines)) for command in commands]
    ended: DeploymentSnapshot | None = deployment if deployment.final else None
    last_read = time.monotonic() + FOLLOW_LAST_READ_S  # once it ended: the parts' last lines are read by then
    try:
        while True:
            try:
                event = events.get(timeout=0.2)
            except queue.Empty:
                if ended is not None and time.monotonic() > last_read:
                    break
                continue
            if dropped:
                print(f"meshdeck: {dropped} log update(s) dropped: the terminal fell behind", file=sys.stderr)
                dropped = 0
            if isinstance(event, DeploymentLogLines):
                _print_follow(event, prefix)
            elif event.snapshot.final and ended is None:
                ended = event.snapshot  # the next poll reads what the parts wrote last
                last_read = time.monotonic() + FOLLOW_LAST_READ_S
    except KeyboardInterrupt:
        return
    finally:
        for stop_watching in unwatch:
            stop_watching()
        unsubscribe()
    reason = f" — {ended.reason.splitlines()[0]}" if ended.reason else ""
    print(printable(f"meshdeck: {ended.id} {ended.state}{reason}"), file=sys.stderr)


def _print_follow(event: DeploymentLogLines, prefix: bool) -> None:
    """New text of one part (escaped by the registry, newlines kept); `prefix`: each line names its part."""
    text = event.text
    if prefix:
        text = "".join(f"{event.command} | {line}" for line in text.splitlines(keepends=True))
    print(text, end="" if text.endswith("\n") or not text else "\n", flush=True)
