"""Host records (add / list / remove through the store) and a one-shot probe of a server.

`remote` may not import `store` (layer rule), so the CLI and the console reach host records
through here. A record is checked before it is saved: by `HostRecord` itself (its fields end up in an
ssh argv), by resolving it against the ssh config the way a connection would, and its `simulate` spec
by the agent's own parser (`meshdeck_agent.gpu.catalog.parse_simulate`, stored in its canonical form),
so a malformed jump, a missing key file, a spec the agent would refuse or a Prometheus exporter address
that is not HOST:PORT is an error at `hosts add` (the CLI and the console's add-host dialog alike), not at
the first connect.

`probe` connects once (host key, login, bootstrap, attach, hello, inventory) and reports what it
found; `attach` starts the agent daemon if none runs, and the daemon keeps running afterwards (with the
settings it was started with: the report says where its Prometheus exporter listens and, when that is
not what was asked, a note saying so).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from meshdeck_agent.gpu.catalog import SimulateSpecError, parse_simulate
from meshdeck_agent.protocol import DaemonSettings
from meshdeck_agent.wire_inventory import Inventory

from meshdeck.core.errors import InputError
from meshdeck.remote.connectors import say_hello
from meshdeck.remote.daemon_settings import exporter_note
from meshdeck.remote.errors import HostKeyChanged as HostKeyChanged  # what the console asks the user about
from meshdeck.remote.errors import HostKeyUnknown as HostKeyUnknown
from meshdeck.remote.hostkeys import HostKeyPrompt
from meshdeck.remote.inventory import decode_inventory
from meshdeck.remote.rpc import RpcClient
from meshdeck.remote.sshconfig import load_ssh_config
from meshdeck.services.fleet import FleetSettings, ssh_connector
from meshdeck.store import hosts as host_store
from meshdeck.store.database import Database
from meshdeck.store.hosts import HostRecord as HostRecord

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 60.0


def simulate_spec(text: str | None) -> str | None:
    """A `--simulate` spec checked by the agent's parser, in its canonical form ('8 x h200' -> '8xH200');
    None for none. InputError on `host.simulate` says what is wrong and the accepted form (COUNTxTYPE)."""
    if text is None:
        return None
    try:
        spec = parse_simulate(text)
    except SimulateSpecError as exc:
        raise InputError("host.simulate", str(exc).removeprefix("--simulate: ")) from None
    if spec is None:
        raise InputError("host.simulate", "is empty; give COUNTxTYPE such as 8xH200, or leave it out for real GPUs")
    return str(spec)


def add_host(
    db: Database,
    name: str,
    target: str,
    *,
    port: int | None = None,
    identity_file: str | None = None,
    jump: str | None = None,
    simulate: str | None = None,
    prometheus: str | None = None,
    settings: FleetSettings | None = None,
    scheduler: str | None = None,
    node_port: int | None = None,
) -> HostRecord:
    """Validate and store a host; raises InputError naming the field (bad target, jump, missing key file,
    exporter address, duplicate). `prometheus` (HOST:PORT) is where its agent serves Prometheus metrics;
    `scheduler="slurm"`: the login node of a Slurm cluster, its compute nodes reached through it at `node_port`."""
    if identity_file:
        identity_file = os.path.abspath(os.path.expanduser(identity_file))
    simulate = simulate_spec(simulate)
    record = HostRecord(
        name=name,
        target=target,
        port=port,
        identity_file=identity_file,
        jump=jump,
        simulate=simulate,
        prometheus=prometheus,
        scheduler=scheduler,
        node_port=node_port,
    )
    ssh_connector(
        settings or FleetSettings(), target, port=port, identity_file=identity_file, jump=jump
    )  # resolves the route: raises InputError now rather than at connect time
    return host_store.add_host(db, record)


def list_hosts(db: Database) -> list[HostRecord]:
    return host_store.list_hosts(db)


def get_host(db: Database, name: str) -> HostRecord:
    return host_store.get_host(db, name)


def find_host(db: Database, name: str) -> HostRecord | None:
    return host_store.find_host(db, name)


def remove_host(db: Database, name: str) -> HostRecord:
    return host_store.remove_host(db, name)


@dataclass(frozen=True)
class ProbeReport:
    """What one connection to a server showed."""

    target: str
    route: str
    host_key: str  # "ssh-ed25519 SHA256:..."
    auth: str
    python: str
    python_version: str
    machine: str
    agent_path: str
    uploaded: bool
    agent_version: str
    protocol: int
    inventory: Inventory
    seconds: float
    daemon: DaemonSettings | None = None  # how the agent runs, as its hello said (None: it did not say)
    note: str = ""  # how it runs otherwise than asked (daemon_settings.exporter_note), escaped

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "route": self.route,
            "host_key": self.host_key,
            "auth": self.auth,
            "python": self.python,
            "python_version": self.python_version,
            "machine": self.machine,
            "agent_path": self.agent_path,
            "uploaded": self.uploaded,
            "agent_version": self.agent_version,
            "protocol": self.protocol,
            "seconds": round(self.seconds, 3),
            "inventory": self.inventory.to_wire(),
            "daemon": None if self.daemon is None else self.daemon.to_wire(),
            "note": self.note,
        }


def probe(
    target: str,
    *,
    port: int | None = None,
    identity_file: str | None = None,
    jump: str | None = None,
    simulate: str | None = None,
    prometheus: str | None = None,
    settings: FleetSettings | None = None,
    host_key_prompt: HostKeyPrompt | None = None,
    progress: Callable[[str], None] | None = None,
    timeout: float = PROBE_TIMEOUT_S,
) -> ProbeReport:
    """Connect, bootstrap, attach, say hello and read the inventory; raises a RemoteError on failure
    (InventoryInvalid, naming the field, when the agent's inventory is malformed; InputError for a
    `simulate` spec the agent would refuse or an exporter address that is not HOST:PORT)."""
    simulate = simulate_spec(simulate)
    if prometheus is not None:
        host_store.check_exporter_address(target, prometheus)
    started = time.monotonic()
    connector = ssh_connector(
        settings or FleetSettings(),
        target,
        port=port,
        identity_file=identity_file,
        jump=jump,
        simulate=simulate,
        prometheus=prometheus,
        host_key_prompt=host_key_prompt,
    )
    link = connector.open(progress or (lambda message: None))
    try:
        client = RpcClient(link.stream, host=target)
        try:
            hello = say_hello(client, link, target, timeout)
            inventory = decode_inventory(target, client.call("inventory", {}, timeout))
        finally:
            client.close("probe done")
    finally:
        link.close()
    details = link.details
    return ProbeReport(
        target=target,
        route=details["route"],
        host_key=details["host_key"],
        auth=details["auth"],
        python=details["python"],
        python_version=details["python_version"],
        machine=details["machine"],
        agent_path=details["agent_path"],
        uploaded=details["uploaded"],
        agent_version=hello.agent,
        protocol=hello.protocol,
        inventory=inventory,
        seconds=time.monotonic() - started,
        daemon=hello.daemon,
        note=exporter_note(prometheus, hello),
    )


def ssh_config_aliases(settings: FleetSettings | None) -> list[str]:
    """The concrete host aliases of the ssh config the fleet reads (patterns left out), to offer when a host
    is added; a broken or missing config gives none (logged), never an error."""
    try:
        config = load_ssh_config(settings.ssh_config if settings else "~/.ssh/config")
    except Exception as exc:  # a broken ~/.ssh/config must not stop the stored hosts from showing
        log.warning("reading the ssh config: %s", exc)
        return []
    return sorted(name for name in config.get_hostnames() if not any(c in name for c in "*?!"))
