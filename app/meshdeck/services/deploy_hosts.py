"""Which agents a launch or a `deployments` command talks to, and at which address the nodes meet.

A profile names hosts the way `meshdeck hosts add` stored them; `local` (or any name starting with
`local`) is this machine's own agent at its default socket (started on first use, then it stays, so
deployments outlive the command that launched them).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from meshdeck_agent.paths import default_socket_path

from meshdeck.core.errors import InputError
from meshdeck.remote.connectors import LocalConnector
from meshdeck.services.deploy_targets import LOCAL_ADDRESS, address_of_target
from meshdeck.services.fleet import FleetService
from meshdeck.store.database import Database
from meshdeck.store.hosts import HostRecord, find_host, list_hosts

CONNECT_TIMEOUT_S = 120.0


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


def connect(
    fleet: FleetService, hosts: Iterable[str], db: Database | None, timeout_s: float = CONNECT_TIMEOUT_S
) -> None:
    """Add every host to the fleet (local ones at the default socket) and wait until each is connected."""
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
