"""Which agents a launch or a `deployments` command talks to, and at which address the nodes meet.

A profile names hosts the way `meshdeck hosts add` stored them; `local` (or any name starting with
`local`) is this machine's own agent at its default socket (started on first use, then it stays, so
deployments outlive the command that launched them).

`connect` (launch) waits until every host is connected and fails on the first that is not: a launch
needs them all. `reach` (deployments list / stop / logs) gives each host one short try, all at once,
and returns the ones that could not be reached with why, so one dead host neither blocks nor hides the
others; `query_settings` shortens the SSH connect timeout for it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from meshdeck_agent.paths import default_socket_path

from meshdeck.core.errors import InputError
from meshdeck.core.text import printable
from meshdeck.remote.connectors import LocalConnector
from meshdeck.services.deployments.targets import LOCAL_ADDRESS, address_of_target
from meshdeck.services.fleet import FleetService, FleetSettings
from meshdeck.store.database import Database
from meshdeck.store.hosts import HostRecord, find_host, list_hosts

CONNECT_TIMEOUT_S = 120.0
QUERY_CONNECT_TIMEOUT_S = 5.0  # TCP connect + SSH banner, per hop, when only asking hosts (list / stop)
REACH_TIMEOUT_S = 30.0  # for a reachable host to be connected (login, agent upload if needed, hello)
_POLL_S = 0.1


def is_local(host: str) -> bool:
    return host == "local" or host.startswith("local-")


def addresses_for(hosts: Iterable[str], db: Database | None) -> dict[str, str]:
    """host -> the address its peers use: 127.0.0.1 for local, the SSH target's host part otherwise."""
    addresses: dict[str, str] = {}
    for host in hosts:
        if is_local(host):
            addresses[host] = LOCAL_ADDRESS
            continue
        record = find_host(db, host) if db is not None else None
        if record is None:
            raise InputError("hosts", f"{host!r} is not a known host; add it with `meshdeck hosts add {host} ...`")
        addresses[host] = address_of_target(record.target)
    return addresses


def fleet_addresses(fleet: FleetService, hosts: Iterable[str], db: Database | None) -> dict[str, str]:
    """As `addresses_for`, plus 127.0.0.1 for every host the fleet reaches through a local agent (the
    demo's simulated hosts run on this machine whatever they are called)."""
    names = list(hosts)
    supervised = set(fleet.hosts())
    local = {h for h in names if h in supervised and isinstance(fleet.supervisor(h).connector, LocalConnector)}
    return {h: LOCAL_ADDRESS for h in local} | addresses_for([h for h in names if h not in local], db)


def _supervise(fleet: FleetService, hosts: Iterable[str], db: Database | None) -> list[str]:
    """Add every host to the fleet (local ones at the default socket); an unknown name is an InputError."""
    records: dict[str, HostRecord | None] = {}
    for host in hosts:
        records[host] = None if is_local(host) else (find_host(db, host) if db is not None else None)
        if not is_local(host) and records[host] is None:
            raise InputError("hosts", f"{host!r} is not a known host; add it with `meshdeck hosts add {host} ...`")
    for host, record in records.items():
        if host in fleet.hosts():
            continue
        if record is None:
            fleet.add_local(host)
        else:
            fleet.add_record(record)
    return list(records)


def query_settings(settings: FleetSettings | None = None) -> FleetSettings:
    """`settings` with the short SSH connect timeout used when hosts are only asked (deployments list / stop)."""
    settings = settings or FleetSettings()
    return replace(settings, ssh=replace(settings.ssh, connect_timeout_s=QUERY_CONNECT_TIMEOUT_S))


def reach(
    fleet: FleetService, hosts: Iterable[str], db: Database | None, timeout_s: float = REACH_TIMEOUT_S
) -> dict[str, str]:
    """Add every host and wait, for all at once, until each is connected or its first try failed; returns
    host -> why (one line, escaped) for each host not connected, in the order given."""
    pending = _supervise(fleet, hosts, db)
    order = list(pending)
    unreached: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    while pending:
        for host in list(pending):
            status = fleet.status(host)
            if status.state == "connected":
                pending.remove(host)
            elif status.state == "failed" or (status.state == "disconnected" and status.reason):
                error = fleet.supervisor(host).error  # the first try's error, without "(retrying in ...)"
                unreached[host] = printable(str(error) if error is not None else status.reason)
                pending.remove(host)
        if pending and time.monotonic() > deadline:
            for host in pending:
                status = fleet.status(host)
                doing = f"{status.state}: {status.reason}" if status.reason else status.state
                unreached[host] = printable(f"not connected within {timeout_s:g} s ({doing})")
            break
        if pending:
            time.sleep(_POLL_S)
    return {host: unreached[host] for host in order if host in unreached}


def connect(
    fleet: FleetService, hosts: Iterable[str], db: Database | None, timeout_s: float = CONNECT_TIMEOUT_S
) -> None:
    """Add every host to the fleet (local ones at the default socket) and wait until each is connected."""
    records = _supervise(fleet, hosts, db)
    deadline = time.monotonic() + timeout_s
    for host in records:
        while True:
            status = fleet.status(host)
            if status.state == "connected":
                break
            if status.state == "failed" or time.monotonic() > deadline:
                raise InputError(f"host {host}", f"not connected ({status.state}): {status.reason or 'timed out'}")
            time.sleep(0.1)


def known_hosts(db: Database | None) -> list[str]:
    """Every stored host, plus `local` when this machine's agent is running (its socket exists)."""
    names = [record.name for record in list_hosts(db)] if db is not None else []
    if Path(default_socket_path()).exists():
        names.append("local")
    return names
