"""The servers the operator added: how to reach each one over SSH (never a secret: keys stay in
~/.ssh or ssh-agent, passwords in the keyring).

`HostRecord` validates itself, because its fields end up in an ssh argv: a target or jump host
starting with '-' would be read by ssh as an option, so it is refused here, naming the field. Its
`prometheus` (the agent's exporter address, `attach --prometheus HOST:PORT`) is exactly HOST:PORT
(core.host_address); a host stored before it existed (schema version 6) has none. `scheduler: slurm` marks a
Slurm cluster's login node (schema version 7): its agent runs Slurm's client commands and the cluster's compute
nodes are reached through it as a jump host (at `node_port`, else SSH's default).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Row, delete, insert, select
from sqlalchemy.exc import IntegrityError

from meshdeck.core.errors import InputError
from meshdeck.core.host_address import parse_listen_address
from meshdeck.store import schema
from meshdeck.store.database import Database

HOST_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# [user@]host — a DNS name, an IPv4 address or a bracketed IPv6 address; no spaces, no leading '-'.
_TARGET_PATTERN = re.compile(
    r"^(?:[A-Za-z0-9._][A-Za-z0-9._+-]*@)?(?:[A-Za-z0-9_][A-Za-z0-9._-]*|\[[0-9A-Fa-f:.%\w]+\])$"
)
# ssh -J syntax: comma-separated [user@]host[:port]
_JUMP_HOP_PATTERN = re.compile(
    r"^(?:[A-Za-z0-9._][A-Za-z0-9._+-]*@)?(?:[A-Za-z0-9_][A-Za-z0-9._-]*|\[[0-9A-Fa-f:.%\w]+\])(?::\d{1,5})?$"
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
SCHEDULERS = (None, "slurm")


@dataclass(frozen=True)
class HostRecord:
    """One server: `target` is `[user@]address` for ssh; `simulate` names a simulated GPU set
    (e.g. "8xH200") for a host that runs the agent's simulated backend instead of NVML; `prometheus` is
    where its agent serves Prometheus metrics (HOST:PORT on the server; None: no exporter)."""

    name: str
    target: str
    port: int | None = None
    identity_file: str | None = None
    jump: str | None = None
    simulate: str | None = None
    added_at: float = field(default_factory=time.time)
    prometheus: str | None = None
    scheduler: str | None = None  # "slurm": the login node of a Slurm cluster (jobs are submitted there)
    node_port: int | None = None  # SSH port of the cluster's compute nodes, reached through this host

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not HOST_NAME_PATTERN.match(self.name):
            raise InputError(
                "host.name",
                f"{self.name!r} must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
            )
        if not isinstance(self.target, str) or not _TARGET_PATTERN.match(self.target):
            raise InputError(
                "host.target",
                f"{self.target!r} must be [user@]address (a host name or IP, no spaces, not starting with '-')",
            )
        if self.port is not None and (
            isinstance(self.port, bool) or not isinstance(self.port, int) or not 1 <= self.port <= 65535
        ):
            raise InputError("host.port", f"{self.port!r} must be an integer from 1 to 65535")
        if self.identity_file is not None and (
            not isinstance(self.identity_file, str) or not self.identity_file or _CONTROL.search(self.identity_file)
        ):
            raise InputError("host.identity_file", "must be a non-empty path without control characters")
        if self.jump is not None and (
            not isinstance(self.jump, str) or not all(_JUMP_HOP_PATTERN.match(hop) for hop in self.jump.split(","))
        ):
            raise InputError("host.jump", f"{self.jump!r} must be [user@]host[:port], comma-separated for several hops")
        if self.simulate is not None and (
            not isinstance(self.simulate, str) or not self.simulate or _CONTROL.search(self.simulate)
        ):
            raise InputError("host.simulate", "must be a non-empty name without control characters")
        if self.prometheus is not None:
            check_exporter_address(self.name, self.prometheus)
        if self.scheduler not in SCHEDULERS:
            raise InputError("host.scheduler", f"{self.scheduler!r} must be none or 'slurm'")
        if self.node_port is not None and (
            isinstance(self.node_port, bool) or not isinstance(self.node_port, int) or not 1 <= self.node_port <= 65535
        ):
            raise InputError("host.node_port", f"{self.node_port!r} must be an integer from 1 to 65535")
        if self.node_port is not None and self.scheduler is None:
            raise InputError("host.node_port", "is the SSH port of a cluster's compute nodes: only for --slurm hosts")
        if (
            isinstance(self.added_at, bool)
            or not isinstance(self.added_at, int | float)
            or not math.isfinite(self.added_at)
            or self.added_at < 0
        ):
            raise InputError("host.added_at", f"{self.added_at!r} must be a Unix time in seconds")


def check_exporter_address(host: str, address: str) -> str:
    """A host's Prometheus exporter address (HOST:PORT, core.host_address) or InputError on `host.prometheus`
    naming the host, what is wrong and the form expected."""
    try:
        parse_listen_address(address, "host.prometheus")
    except InputError as exc:
        raise InputError("host.prometheus", f"host {host}: {exc.problem}") from None
    return address


def add_host(db: Database, record: HostRecord) -> HostRecord:
    """Store a new host. A name already in use is refused (InputError on `host.name`)."""
    values = asdict(record)
    values["added_at"] = float(record.added_at)
    try:
        with db.write() as connection:
            connection.execute(insert(schema.hosts).values(**values))
    except IntegrityError:
        raise InputError(
            "host.name", f"a host named {record.name!r} already exists; remove it first or pick another name"
        ) from None
    return record


def _row_to_record(row: Row[Any]) -> HostRecord:
    return HostRecord(**row._asdict())


def find_host(db: Database, name: str) -> HostRecord | None:
    """The host called `name`, or None."""
    with db.read() as connection:
        row = connection.execute(select(schema.hosts).where(schema.hosts.c.name == name)).first()
    return None if row is None else _row_to_record(row)


def get_host(db: Database, name: str) -> HostRecord:
    """The host called `name`; a missing one raises InputError listing the known names."""
    record = find_host(db, name)
    if record is None:
        raise InputError("host", _missing(db, name))
    return record


def list_hosts(db: Database) -> list[HostRecord]:
    """Every host, in the order they were added."""
    with db.read() as connection:
        rows = connection.execute(select(schema.hosts).order_by(schema.hosts.c.added_at, schema.hosts.c.name))
        return [_row_to_record(row) for row in rows]


def remove_host(db: Database, name: str) -> HostRecord:
    """Delete a host and return what it was; its recorded history stays. A missing name raises InputError."""
    with db.write() as connection:
        row = connection.execute(select(schema.hosts).where(schema.hosts.c.name == name)).first()
        if row is None:
            known = [r[0] for r in connection.execute(select(schema.hosts.c.name).order_by(schema.hosts.c.name))]
            raise InputError("host", _missing_message(name, known))
        connection.execute(delete(schema.hosts).where(schema.hosts.c.name == name))
    return _row_to_record(row)


def _missing(db: Database, name: str) -> str:
    with db.read() as connection:
        known = [r[0] for r in connection.execute(select(schema.hosts.c.name).order_by(schema.hosts.c.name))]
    return _missing_message(name, known)


def _missing_message(name: str, known: list[str]) -> str:
    listed = ", ".join(known) if known else "none yet; add one with `meshdeck hosts add`"
    return f"no host named {name!r} (known: {listed})"
