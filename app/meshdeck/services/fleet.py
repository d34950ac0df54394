"""The fleet: every host's supervisor, and the fan-out of their events to its consumers.

    fleet = FleetService(FleetSettings())
    unsubscribe = fleet.subscribe(recorder.handle)           # called on the host's thread or the sample pump
    point = resume_points(db)["gpu-a"]                      # services/history.py: last seq + its epoch
    fleet.add_record(get_host(db, "gpu-a"), since_seq=point.seq, since_epoch=point.epoch)
    fleet.add_local("demo-a", simulate="8xH200", socket="/tmp/meshdeck-demo/a.sock", prometheus="127.0.0.1:9400")
    fleet.call("gpu-a", "workers.list")                      # or call_async -> Future
    fleet.close()

Supervisors (one thread per host, meshdeck.remote.supervisor) hand HostStateChanged,
InventoryReceived, SamplesReceived, SequenceReset and AgentEvent values to every subscriber, in that
host's order: a connected host's samples and agent events on the process's one sample pump thread (every
host's), the rest on the host's own thread. A subscriber must be thread-safe, quick, and must not call
back into the host it is told about (the pump would wait on it with every host). Waiting happens in one
place: the store writer's bounded inbox (`SampleWriter.submit_samples` blocks while the writer is
behind). The pump then stops taking events, SSH flow control holds the agent back, and the agent's ring (2 h) keeps the samples
until the writer catches up — memory never grows with the backlog. The console's bridge never
blocks (it keeps a bounded inbox of its own). No Qt here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import platformdirs

from meshdeck.core.errors import InputError
from meshdeck.remote.bootstrap import DEFAULT_CACHE_DIR, DEFAULT_PYTHONS
from meshdeck.remote.connectors import AgentLink, AgentOptions, Connector, LocalConnector, SshConnector
from meshdeck.remote.errors import HostConfigError, HostKeyUnknown, NotConnected
from meshdeck.remote.events import FleetEvent
from meshdeck.remote.hostkeys import HostKeyInfo, HostKeyPrompt, HostKeyStore
from meshdeck.remote.ssh import SshOptions
from meshdeck.remote.sshconfig import resolve_route
from meshdeck.remote.supervisor import ConnectSlots, HostSupervisor, SupervisorSettings
from meshdeck.services.subscribers import Subscribers
from meshdeck.store.hosts import HostRecord

Subscriber = Callable[[FleetEvent], None]


def default_known_hosts_path() -> str:
    """meshdeck's own known_hosts (keys the user accepted in meshdeck), in the platform data dir."""
    return str(platformdirs.user_data_path("meshdeck", appauthor=False) / "known_hosts")


@dataclass(frozen=True)
class FleetSettings:
    """Where keys and configs live, and where the agent goes on the servers (overridable for tests)."""

    known_hosts: str = field(default_factory=default_known_hosts_path)
    user_known_hosts: tuple[str, ...] = ("~/.ssh/known_hosts",)
    ssh_config: str | None = "~/.ssh/config"
    # None: find_agent_package() ($MESHDECK_AGENT_PYZ, a bundled one, else one built into the cache)
    agent_pyz: str | None = None
    remote_cache_dir: str = DEFAULT_CACHE_DIR
    agent_socket: str | None = None  # remote agent socket; None: the agent's default
    agent_state_dir: str | None = None
    pythons: tuple[str, ...] = DEFAULT_PYTHONS
    ssh: SshOptions = field(default_factory=SshOptions)
    supervisor: SupervisorSettings = field(default_factory=SupervisorSettings)
    # hosts bringing a connection up at once (connect, start the agent, hello, inventory); the rest wait
    # their turn before their hello timer starts (remote/supervisor.py ConnectSlots)
    max_concurrent_connects: int = 32

    def host_key_store(self) -> HostKeyStore:
        return HostKeyStore(Path(self.known_hosts).expanduser(), self.user_known_hosts)


def ssh_connector(
    settings: FleetSettings,
    target: str,
    *,
    port: int | None = None,
    identity_file: str | None = None,
    jump: str | None = None,
    simulate: str | None = None,
    prometheus: str | None = None,
    host_keys: HostKeyStore | None = None,
    host_key_prompt: HostKeyPrompt | None = None,
) -> SshConnector:
    """An SSH connector for TARGET resolved through the ssh config; raises InputError for bad input.
    `prometheus` (HOST:PORT) starts the agent's exporter there, if attach starts the daemon."""
    route = resolve_route(target, port=port, identity_file=identity_file, jump=jump, config_path=settings.ssh_config)
    return SshConnector(
        route=route,
        host_keys=host_keys or settings.host_key_store(),
        agent_pyz=settings.agent_pyz,
        options=settings.ssh,
        agent=AgentOptions(
            socket=settings.agent_socket, state_dir=settings.agent_state_dir, simulate=simulate, prometheus=prometheus
        ),
        cache_dir=settings.remote_cache_dir,
        pythons=settings.pythons,
        host_key_prompt=host_key_prompt,
    )


@dataclass
class RecordConnector:
    """Connects to a stored host: resolves its route through the ssh config on each open()."""

    record: HostRecord
    settings: FleetSettings
    host_keys: HostKeyStore
    host_key_prompt: HostKeyPrompt | None = None
    force_upload: bool = False

    def describe(self) -> str:
        return self.record.target

    def reinstall(self) -> None:
        """Upload the agent again at the next open (its answer was in another protocol)."""
        self.force_upload = True

    def connector(self) -> SshConnector:
        try:
            return ssh_connector(
                self.settings,
                self.record.target,
                port=self.record.port,
                identity_file=self.record.identity_file,
                jump=self.record.jump,
                simulate=self.record.simulate,
                prometheus=self.record.prometheus,
                host_keys=self.host_keys,
                host_key_prompt=self.host_key_prompt,
            )
        except InputError as exc:
            raise HostConfigError(f"{self.record.name}: {exc}") from None

    def open(self, progress: Callable[[str], None]) -> AgentLink:
        connector = self.connector()
        connector.force_upload = self.force_upload
        link = connector.open(progress)
        self.force_upload = False
        return link


@dataclass(frozen=True)
class HostStatus:
    name: str
    state: str
    reason: str
    last_seq: int | None
    agent_version: str | None
    details: dict[str, Any]
    epoch: str | None = None  # the agent's sequence epoch last_seq belongs to


class FleetService:
    """Owns the host supervisors and hands their events to subscribers; see the module doc. Thread-safe."""

    def __init__(self, settings: FleetSettings | None = None) -> None:
        self.settings = settings or FleetSettings()
        self.host_keys = self.settings.host_key_store()
        self._supervisors: dict[str, HostSupervisor] = {}
        self._connect_slots = ConnectSlots(self.settings.max_concurrent_connects)
        self._subscribers = Subscribers[FleetEvent]("fleet")
        self._lock = threading.Lock()
        self._closed = False

    # -- subscribers -------------------------------------------------------------------------------

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call `callback(event)` for every event from now on (on the host's thread or the sample pump's); returns unsubscribe."""
        return self._subscribers.add(callback)

    def _publish(self, event: FleetEvent) -> None:
        self._subscribers.publish(event)

    # -- hosts -------------------------------------------------------------------------------------

    def add_host(
        self, name: str, connector: Connector, *, since_seq: int | None = None, since_epoch: str | None = None
    ) -> HostSupervisor:
        """Start supervising `name` through `connector`; `since_seq` resumes after a stored last seq, which
        belongs to the agent's sequence epoch `since_epoch` (None: not known; then only seqs are compared)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the fleet is closed")
            if name in self._supervisors:
                raise InputError("host", f"{name!r} is already in the fleet")
            supervisor = HostSupervisor(
                name,
                connector,
                self._publish,
                since_seq=since_seq,
                since_epoch=since_epoch,
                settings=self.settings.supervisor,
                connect_slots=self._connect_slots,
            )
            self._supervisors[name] = supervisor
        supervisor.start()
        return supervisor

    def add_record(
        self,
        record: HostRecord,
        *,
        since_seq: int | None = None,
        since_epoch: str | None = None,
        host_key_prompt: HostKeyPrompt | None = None,
    ) -> HostSupervisor:
        """Supervise a stored host over SSH. Its route is resolved at every connect (so an edited
        ~/.ssh/config applies on retry); one that cannot be resolved shows as failed, naming why."""
        connector = RecordConnector(record, self.settings, self.host_keys, host_key_prompt)
        return self.add_host(record.name, connector, since_seq=since_seq, since_epoch=since_epoch)

    def add_local(
        self,
        name: str,
        *,
        simulate: str | None = None,
        socket: str | None = None,
        state_dir: str | None = None,
        since_seq: int | None = None,
        since_epoch: str | None = None,
        interval_s: float | None = None,
        prometheus: str | None = None,
        seed: int | None = None,
    ) -> HostSupervisor:
        """Supervise an agent on this machine, run as a subprocess (`--demo` runs two simulated ones);
        `prometheus` (HOST:PORT) starts its exporter there if no daemon runs on that socket yet; `seed`: of
        a simulated agent's numbers (None: the agent's default, 0)."""
        options = AgentOptions(
            socket=socket,
            state_dir=state_dir,
            simulate=simulate,
            seed=seed,
            interval_s=interval_s,
            prometheus=prometheus,
        )
        return self.add_host(name, LocalConnector(name, options), since_seq=since_seq, since_epoch=since_epoch)

    def remove_host(self, name: str) -> None:
        """Stop supervising `name` (the agent and its workers keep running on the server)."""
        with self._lock:
            supervisor = self._supervisors.pop(name, None)
        if supervisor is None:
            raise InputError("host", f"{name!r} is not in the fleet (known: {', '.join(self.hosts()) or 'none'})")
        supervisor.stop()

    def hosts(self) -> list[str]:
        with self._lock:
            return list(self._supervisors)

    def supervisor(self, name: str) -> HostSupervisor:
        with self._lock:
            supervisor = self._supervisors.get(name)
        if supervisor is None:
            raise NotConnected(f"{name}: not in the fleet (known: {', '.join(self.hosts()) or 'none'})")
        return supervisor

    def status(self, name: str) -> HostStatus:
        sup = self.supervisor(name)
        return HostStatus(name, sup.state, sup.reason, sup.last_seq, sup.agent_version, dict(sup.details), sup.epoch)

    def retry(self, name: str) -> None:
        self.supervisor(name).retry()

    def accept_host_key(self, name: str, unknown: HostKeyUnknown) -> HostKeyInfo:
        """Save the key the user was shown (from a failed state's HostKeyUnknown) and reconnect."""
        info = self.host_keys.accept(unknown.known_hosts_name, unknown.key_type, unknown.key_base64)
        self.retry(name)
        return info

    # -- calls -------------------------------------------------------------------------------------

    def call(self, host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        """Ask `host`'s agent; raises NotConnected, RpcError (the agent's code/message), RpcTimeout, ConnectionLost."""
        return self.supervisor(host).call(method, params, timeout)

    def call_async(self, host: str, method: str, params: dict[str, Any] | None = None) -> Future[Any]:
        return self.supervisor(host).call_async(method, params)

    # -- lifecycle ---------------------------------------------------------------------------------

    def close(self, timeout: float = 15.0) -> None:
        """Stop every supervisor (the agents and their workers keep running). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            supervisors = list(self._supervisors.values())
            self._supervisors.clear()
        stoppers = [threading.Thread(target=s.stop, args=(timeout,)) for s in supervisors]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join(timeout + 1)

    def __enter__(self) -> FleetService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def with_overrides(settings: FleetSettings, **changes: Any) -> FleetSettings:
    """A copy of `settings` with some fields replaced (None values are ignored)."""
    return replace(settings, **{k: v for k, v in changes.items() if v is not None})
