"""`meshdeck hosts add|list|remove|probe`: the servers meshdeck manages, and a one-shot connection check.

    meshdeck hosts add gpu-a ubuntu@10.0.0.5 -J bastion -i ~/.ssh/id_ed25519 [--prometheus 10.0.0.5:9400]
    meshdeck hosts add gpu-a ubuntu@10.0.0.5 --accept-new  # and connect once now, pinning its host key
    meshdeck hosts add hpc login.hpc.example --slurm      # a Slurm cluster, by its login node
    meshdeck hosts list [--connect] [--json]              # STATE: recorded (console / record), or asked now;
                                                          # --connect: a Slurm cluster's partitions, accounts, QOS
    meshdeck hosts remove gpu-a
    meshdeck hosts probe gpu-a [--accept-new] [--json]     # a stored name, an ssh alias or user@host
    meshdeck hosts processes gpu-a [--json]                # which processes hold each GPU (_host_processes.py)

`probe` connects (host key, login), uploads the agent if the server lacks this version, attaches
and prints the inventory with the host key fingerprint and the agent version. An unknown host key
(without --accept-new), a changed key, an auth failure or an unreachable host each end with one
`meshdeck: error: ...` line and exit status 2. `add --accept-new` stores the host, then probes it as
`probe NAME --accept-new` does (trust on first use); when that fails the host stays added and the
error says to probe it again. What a server reports (its inventory, paths, versions)
and what is stored is printed escaped: no raw control character reaches the terminal.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from meshdeck.commands import Subparsers, _host_processes
from meshdeck.core.errors import InputError
from meshdeck.core.text import printable
from meshdeck.remote.errors import RemoteError
from meshdeck.remote.hostkeys import HostKeyInfo
from meshdeck.remote.sshconfig import parse_port
from meshdeck.services import host_states
from meshdeck.services import hosts as host_service
from meshdeck.services.deployments import hosts as deploy_hosts
from meshdeck.services.fleet import FleetService, FleetSettings, with_overrides
from meshdeck.services.hosts import HostRecord
from meshdeck.services.slurm import SlurmClient, SlurmClusterInfo, cluster_info, cluster_lines
from meshdeck.services.slurm_jobs import login_user
from meshdeck.store.database import Database, default_database_path, open_database

Result = TypeVar("Result")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("hosts", help="add, list, remove and probe GPU servers (SSH)")
    commands = parser.add_subparsers(dest="hosts_command", metavar="ACTION", required=True)

    add = commands.add_parser("add", help="remember a server: NAME TARGET ([user@]host or an ~/.ssh/config alias)")
    add.add_argument("name", help="short name, e.g. gpu-a")
    add.add_argument("target", help="[user@]host or an alias from ~/.ssh/config")
    _connection_options(add)
    add.add_argument(
        "--slurm",
        action="store_true",
        help="the login node of a Slurm cluster: `launch --slurm NAME` submits jobs there, and the cluster's "
        "compute nodes are reached through it",
    )
    add.add_argument(
        "--node-port", metavar="PORT", help="with --slurm: SSH port of the compute nodes (default: ssh config, else 22)"
    )
    add.add_argument(
        "--accept-new",
        action="store_true",
        help="then connect once, as `hosts probe NAME --accept-new`: accept and save its unknown host key "
        "(trust on first use), upload the agent and print what the server has",
    )

    listing = commands.add_parser(
        "list",
        help="list the servers with their state",
        description="STATE is what the console or `meshdeck record` last recorded (unknown when that is over "
        "a minute old); --connect asks every host now instead, all at once, for at most "
        f"{host_states.ASK_TIMEOUT_S:g} s (a host with no verdict by then is unknown).",
    )
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.add_argument(
        "--connect", action="store_true", help="ask every host now (all at once, bounded; may start its agent)"
    )
    listing.set_defaults(func=_list)

    remove = commands.add_parser("remove", help="forget a server (its recorded history stays)")
    remove.add_argument("name")
    remove.set_defaults(func=_remove)

    probe = commands.add_parser(
        "probe", help="connect once: host key, login, agent upload, inventory (GPUs, links, NICs)"
    )
    probe.add_argument("target", help="a stored host name, an ~/.ssh/config alias or [user@]host")
    _connection_options(probe)
    probe.add_argument("--known-hosts", metavar="FILE", help="meshdeck's known_hosts file (read and written)")
    probe.add_argument("--accept-new", action="store_true", help="accept and save an unknown host key")
    probe.add_argument("--json", action="store_true", help="print the report as JSON")
    probe.add_argument("--ssh-config", metavar="FILE", help="ssh config to read (default ~/.ssh/config)")
    probe.add_argument(
        "--agent-pyz",
        metavar="FILE",
        help="agent zipapp to upload (default: $MESHDECK_AGENT_PYZ, else the bundled one, else one built from this "
        "meshdeck's agent into your cache folder; never a dist/ one)",
    )
    probe.add_argument("--remote-cache-dir", metavar="DIR", help="where the agent goes (default ~/.cache/meshdeck)")
    probe.add_argument("--agent-socket", metavar="PATH", help="the agent's socket on the server")
    probe.add_argument("--agent-state-dir", metavar="DIR", help="the agent's state dir (default: next to its socket)")
    probe.add_argument("--python", metavar="PATH", help="python3 on the server (default: python3 on its PATH)")
    probe.add_argument("--timeout", default="60", metavar="S", help="seconds to wait for the agent (default 60)")
    probe.set_defaults(func=_probe)
    add.set_defaults(func=lambda args: _add(args, probe))  # --accept-new probes the host as `probe` would
    _host_processes.register(commands)


def _connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-p", "--port", help="SSH port (default: from ssh config, else 22)")
    parser.add_argument("-i", "--identity-file", metavar="KEY", help="private key file")
    parser.add_argument("-J", "--jump", metavar="JUMP", help="jump host(s): [user@]host[:port][,...]")
    parser.add_argument("--simulate", metavar="SPEC", help="run the agent's simulated GPUs, e.g. 8xH200")
    parser.add_argument(
        "--prometheus",
        metavar="HOST:PORT",
        help="the agent also serves Prometheus metrics there, on the server (e.g. 10.0.0.5:9400; applies when "
        "meshdeck starts the agent: one already running keeps its own settings)",
    )


def _port(args: argparse.Namespace) -> int | None:
    return None if args.port is None else parse_port(args.port, "port")


def _with_db(args: argparse.Namespace, action: Callable[[Database], Result]) -> Result:
    with open_database(args.db) as db:
        return action(db)


def _add(args: argparse.Namespace, probe_parser: argparse.ArgumentParser) -> int:
    record = _with_db(
        args,
        lambda db: host_service.add_host(
            db,
            args.name,
            args.target,
            port=_port(args),
            identity_file=args.identity_file,
            jump=args.jump,
            simulate=args.simulate,
            prometheus=args.prometheus,
            scheduler="slurm" if args.slurm else None,
            node_port=None if args.node_port is None else parse_port(args.node_port, "node-port"),
        ),
    )
    via = f" via {record.jump}" if record.jump else ""
    port = f" port {record.port}" if record.port else ""
    simulated = f" (simulated {record.simulate})" if record.simulate else ""
    exporter = f" (Prometheus exporter on {record.prometheus})" if record.prometheus else ""
    slurm = " (Slurm login node)" if record.scheduler == "slurm" else ""
    print(f"added {record.name}: {record.target}{port}{via}{simulated}{exporter}{slurm}")
    if not args.accept_new:
        return 0
    probe_args = probe_parser.parse_args([record.name, "--accept-new"])  # its defaults: the stored host's settings
    probe_args.db = args.db
    code = _probe(probe_args)
    if code:
        print(
            f"meshdeck: {record.name} stays added; once it is reachable run "
            f"`meshdeck hosts probe {record.name} --accept-new`",
            file=sys.stderr,
        )
    return code


def _states(
    args: argparse.Namespace, db: Database, records: list[HostRecord]
) -> tuple[dict[str, host_states.HostState], dict[str, SlurmClusterInfo]]:
    names = [r.name for r in records]
    if not args.connect or not names:
        return host_states.recorded_states(db, names), {}
    with FleetService(deploy_hosts.query_settings()) as fleet:
        states = host_states.asked_states(fleet, names, db, timeout_s=host_states.ASK_TIMEOUT_S)
        clusters = {
            r.name: cluster_info(SlurmClient(fleet, r.name), login_user(r, fleet.settings))
            for r in records
            if r.scheduler == "slurm" and states[r.name].state == "connected"
        }
        return states, clusters


def _list(args: argparse.Namespace) -> int:
    with open_database(args.db) as db:
        records = host_service.list_hosts(db)
        states, clusters = _states(args, db, records)
    if args.json:
        listed = []
        for r in records:
            entry = _record_json(r, states[r.name])
            if r.name in clusters:
                entry["slurm"] = clusters[r.name].as_dict()
            listed.append(entry)
        print(json.dumps(listed, indent=2))
        return 0
    if not records:
        print("no hosts yet; add one with `meshdeck hosts add NAME [user@]host`")
        return 0
    rows: list[tuple[str, ...]] = [
        ("NAME", "STATE", "TARGET", "PORT", "JUMP", "KEY", "SIMULATE", "PROMETHEUS", "SCHEDULER", "NOTE")
    ]
    rows += [
        (
            r.name,
            states[r.name].state,
            r.target,
            str(r.port or ""),
            r.jump or "",
            r.identity_file or "",
            r.simulate or "",
            r.prometheus or "",
            r.scheduler or "",
            printable(states[r.name].reason, 100),
        )
        for r in records
    ]
    rows = [tuple(printable(cell) for cell in row) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    for record in records:
        if record.scheduler == "slurm":
            print()
            print(render_cluster(record.name, clusters.get(record.name)))
    return 0


def render_cluster(name: str, info: SlurmClusterInfo | None) -> str:
    """A Slurm cluster under the hosts table: its partitions (nodes, GPUs per node, up), accounts and QOS."""
    if info is None:
        return f"{name}: Slurm cluster (login node); partitions, accounts and QOS: `hosts list --connect` asks it"
    header = printable(f"{name}: Slurm {info.version or '?'} cluster (login node)", PROBE_LINE_LIMIT)
    return "\n".join([header, *(f"  {line}" for line in cluster_lines(info, limit=PROBE_LINE_LIMIT))])


def _record_json(record: HostRecord, state: host_states.HostState) -> dict[str, Any]:
    return {
        "state": state.state,
        "state_reason": state.reason,
        "state_seen_at": state.seen_at,
        "name": record.name,
        "target": record.target,
        "port": record.port,
        "identity_file": record.identity_file,
        "jump": record.jump,
        "simulate": record.simulate,
        "prometheus": record.prometheus,
        "scheduler": record.scheduler,
        "node_port": record.node_port,
        "added_at": record.added_at,
    }


def _remove(args: argparse.Namespace) -> int:
    record = _with_db(args, lambda db: host_service.remove_host(db, args.name))
    print(f"removed {record.name} ({record.target})")
    return 0


def _stored_host(args: argparse.Namespace) -> HostRecord | None:
    """The stored host called TARGET, if a database exists (probe never creates one)."""
    path = Path(args.db).expanduser() if args.db else default_database_path()
    if not path.exists():
        return None
    return _with_db(args, lambda db: host_service.find_host(db, args.target))


def _probe(args: argparse.Namespace) -> int:
    try:
        timeout = float(args.timeout)
    except ValueError:
        raise InputError("timeout", f"{args.timeout!r} is not a number of seconds") from None
    if not 1 <= timeout <= 3600:
        raise InputError("timeout", f"{timeout:g} must be between 1 and 3600 seconds")
    settings = with_overrides(
        FleetSettings(),
        known_hosts=args.known_hosts,
        agent_pyz=args.agent_pyz,
        remote_cache_dir=args.remote_cache_dir,
        agent_socket=args.agent_socket,
        agent_state_dir=args.agent_state_dir,
        pythons=(args.python,) if args.python else None,
    )
    if args.ssh_config:
        settings = with_overrides(settings, ssh_config=args.ssh_config)
    target, port, identity, jump, simulate = args.target, _port(args), args.identity_file, args.jump, args.simulate
    prometheus = args.prometheus
    stored = _stored_host(args)
    if stored is not None:
        target = stored.target
        port = port if port is not None else stored.port
        identity = identity or stored.identity_file
        jump = jump or stored.jump
        simulate = simulate or stored.simulate
        prometheus = prometheus or stored.prometheus

    def accept(info: HostKeyInfo) -> bool:
        if args.accept_new:
            print(
                f"meshdeck: accepted new host key for {info.known_hosts_name}: {info.key_type} {info.fingerprint}",
                file=sys.stderr,
            )
        return bool(args.accept_new)

    try:
        report = host_service.probe(
            target,
            port=port,
            identity_file=identity,
            jump=jump,
            simulate=simulate,
            prometheus=prometheus,
            settings=settings,
            host_key_prompt=accept,
            timeout=timeout,
        )
    except RemoteError as exc:
        print(f"meshdeck: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        print(render_probe(args.target, report))
    return 0


PROBE_LINE_LIMIT = 400  # characters of one line of `hosts probe` (an inventory field may be megabytes)


def render_probe(name: str, report: host_service.ProbeReport) -> str:
    inv = report.inventory
    simulated = " [SIMULATED]" if inv.simulated else ""
    lines = [
        f"{name} ({report.route})",
        f"  host key  {report.host_key}",
        f"  login     {report.auth}",
        f"  python    {report.python} {report.python_version} on {report.machine}",
        f"  agent     meshdeck-agent {report.agent_version} (protocol {report.protocol}) at {report.agent_path}"
        f" ({'uploaded' if report.uploaded else 'already there'})",
        f"  server    {inv.hostname or '?'}{simulated}, driver {inv.driver or '-'}, CUDA {inv.cuda or '-'}",
    ]
    if report.daemon is not None:
        exporter = report.daemon.prometheus
        lines.append(f"  exporter  {'Prometheus on ' + exporter if exporter else 'off'}")
    if report.note:
        lines.append(f"  note      {report.note}")
    if inv.gpus:
        lines.append(f"  GPUs      {len(inv.gpus)}{simulated}")
        for gpu in inv.gpus:
            total = gpu.memory_total_bytes or 0
            lines.append(f"    GPU{gpu.index} {gpu.name} {total / 2**30:.0f} GiB {gpu.pci_bus_id or ''}")
    else:
        lines.append(f"  GPUs      none ({inv.gpu_reason or 'not reported'})")
    for nic in inv.nics:
        lines.append(f"  NIC       {nic.name} {nic.kind} {nic.rate_gbps} Gb/s {nic.state}")
    lines.append(f"  took      {report.seconds:.1f} s")
    return "\n".join(printable(line, PROBE_LINE_LIMIT) for line in lines)  # each line as the server said it, escaped
