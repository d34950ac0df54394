"""FleetService: one queue, fan-out to subscribers, calls routed by host, host keys accepted from a UI."""

from __future__ import annotations

import base64
import threading
from pathlib import Path
from typing import Any

import meshdeck_agent
import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from meshdeck.core.errors import InputError
from meshdeck.remote.agent_zipapp import build_agent_zipapp
from meshdeck.remote.bootstrap import RUN_VERIFIED
from meshdeck.remote.connectors import RUN_AGENT_FROM
from meshdeck.remote.errors import HostKeyUnknown, NotConnected, RpcError
from meshdeck.remote.events import HostStateChanged, SamplesReceived
from meshdeck.services.fleet import FleetService, FleetSettings, ssh_connector
from remote_fake_agent import FakeConnector


class Waiter:
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.cond = threading.Condition()

    def __call__(self, event: Any) -> None:
        with self.cond:
            self.events.append(event)
            self.cond.notify_all()

    def wait(self, predicate, timeout: float = 60.0) -> None:
        with self.cond:
            assert self.cond.wait_for(predicate, timeout), self.events[-5:]


def test_every_subscriber_sees_every_event_in_order_until_it_unsubscribes(fleet: FleetService):
    first, second = Waiter(), Waiter()
    fleet.subscribe(first)
    unsubscribe_second = fleet.subscribe(second)
    connector = FakeConnector()
    fleet.add_host("gpu-a", connector)
    first.wait(lambda: fleet.status("gpu-a").state == "connected")
    assert connector.agent.subscribed.wait(10)
    connector.agent.emit(3)
    first.wait(lambda: sum(len(e.batch) for e in first.events if isinstance(e, SamplesReceived)) == 3)
    second.wait(lambda: len(second.events) == len(first.events))
    assert second.events == first.events
    unsubscribe_second()
    connector.agent.emit(1)
    first.wait(lambda: fleet.status("gpu-a").last_seq == 4)
    first.wait(lambda: any(isinstance(e, SamplesReceived) and e.batch.seqs[-1] == 4 for e in first.events))
    assert len(second.events) < len(first.events)


def test_a_failing_subscriber_does_not_stop_the_others(fleet: FleetService):
    def broken(event: Any) -> None:
        raise RuntimeError("subscriber bug")

    good = Waiter()
    fleet.subscribe(broken)
    fleet.subscribe(good)
    fleet.add_host("gpu-a", FakeConnector())
    good.wait(lambda: any(isinstance(e, HostStateChanged) and e.state == "connected" for e in good.events))


def test_calls_are_routed_to_the_named_host(fleet: FleetService):
    states = Waiter()
    fleet.subscribe(states)
    fleet.add_host("gpu-a", FakeConnector(inventory={"hostname": "a"}))
    fleet.add_host("gpu-b", FakeConnector(inventory={"hostname": "b"}))
    states.wait(lambda: all(fleet.status(h).state == "connected" for h in ("gpu-a", "gpu-b")))
    assert fleet.call("gpu-b", "inventory") == {"hostname": "b"}
    assert fleet.call_async("gpu-a", "inventory").result(10) == {"hostname": "a"}
    with pytest.raises(RpcError) as failed:
        fleet.call("gpu-a", "workers.nonsense")
    assert failed.value.code == "unknown_method"
    with pytest.raises(NotConnected, match="gpu-c: not in the fleet"):
        fleet.call("gpu-c", "inventory")
    with pytest.raises(InputError, match="already in the fleet"):
        fleet.add_host("gpu-a", FakeConnector())
    fleet.remove_host("gpu-a")
    assert fleet.hosts() == ["gpu-b"]


def test_accepting_an_unknown_host_key_saves_it_and_reconnects(fleet: FleetService, tmp_path: Path):
    key = _public_key()
    unknown = HostKeyUnknown("[10.0.0.5]:2222", key.get_name(), key.fingerprint, (), key.get_base64())
    connector = FakeConnector()
    connector.failures.append(unknown)
    states = Waiter()
    fleet.subscribe(states)
    fleet.add_host("gpu-a", connector)
    states.wait(lambda: any(isinstance(e, HostStateChanged) and e.state == "failed" for e in states.events))
    failed = next(e for e in states.events if isinstance(e, HostStateChanged) and e.state == "failed")
    assert failed.error is unknown and key.fingerprint in failed.reason
    info = fleet.accept_host_key("gpu-a", failed.error)
    assert info.fingerprint == key.fingerprint
    assert (tmp_path / "known_hosts").read_text() == f"[10.0.0.5]:2222 ssh-ed25519 {key.get_base64()}\n"
    states.wait(lambda: fleet.status("gpu-a").state == "connected")


def test_ssh_connector_resolves_the_route_and_remote_paths(tmp_path: Path):
    settings = FleetSettings(
        known_hosts=str(tmp_path / "kh"), ssh_config=None, remote_cache_dir="/scratch/md", agent_socket="/run/md.sock"
    )
    connector = ssh_connector(settings, "ops@10.0.0.5", port=2222, jump="bastion:2200", simulate="8xH200")
    assert connector.route.describe().endswith("-> ops@10.0.0.5:2222")
    assert [hop.port for hop in connector.route.hops] == [2200, 2222]
    assert connector.cache_dir == "/scratch/md"
    assert connector.attach_argv("/usr/bin/python3", "/scratch/md/agent-x.pyz", "ab" * 32) == [
        "/usr/bin/python3",
        "-I",
        "-c",
        RUN_VERIFIED,
        "/scratch/md/agent-x.pyz",
        "ab" * 32,
        "attach",
        "--socket",
        "/run/md.sock",
        "--simulate",
        "8xH200",
    ]


def _public_key() -> paramiko.PKey:
    """A fresh ed25519 public key as paramiko holds a server's host key."""
    public = ed25519.Ed25519PrivateKey.generate().public_key()
    line = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return paramiko.PKey.from_type_string("ssh-ed25519", base64.b64decode(line.split()[1]))


def test_local_connector_runs_the_package_or_in_a_frozen_app_the_zipapp(tmp_path: Path, monkeypatch):
    from meshdeck.remote.connectors import AgentOptions, LocalConnector

    options = AgentOptions(socket="/tmp/md/a.sock", simulate="8xH200", interval_s=0.5)
    connector = LocalConnector("demo-a", options, python="/venv/bin/python")
    agent_folder = str(Path(meshdeck_agent.__file__).absolute().parent.parent)
    assert connector.argv() == [
        "/venv/bin/python", "-I", "-S", "-c", RUN_AGENT_FROM, agent_folder, "attach",
        "--socket", "/tmp/md/a.sock", "--simulate", "8xH200", "--interval", "0.5",
    ]  # fmt: skip
    pyz = build_agent_zipapp(tmp_path / "meshdeck-agent.pyz")  # only this app's agent version is run
    monkeypatch.setattr("sys.frozen", True, raising=False)
    frozen = LocalConnector("demo-a", options, agent_pyz=str(pyz)).argv()
    assert frozen[1:4] == ["-I", str(pyz), "attach"] and frozen[0].endswith("python3")


def test_a_local_simulated_agent_gets_the_seed_it_is_given(fleet: FleetService, monkeypatch):
    started: dict[str, Any] = {}
    monkeypatch.setattr(fleet, "add_host", lambda name, connector, **_kw: started.setdefault(name, connector))
    fleet.add_local("sim-007", simulate="8xH200", socket="/tmp/md/7.sock", seed=7)
    fleet.add_local("sim-000", simulate="8xH200", socket="/tmp/md/0.sock")
    assert started["sim-007"].argv()[-2:] == ["--seed", "7"]  # its own simulated GPUs, ECC errors included
    assert "--seed" not in started["sim-000"].argv()  # the agent's default


def test_a_stored_host_that_cannot_be_resolved_shows_failed_instead_of_raising(fleet: FleetService, tmp_path: Path):
    from meshdeck.store.hosts import HostRecord

    record = HostRecord(name="gpu-a", target="ops@10.0.0.5", identity_file=str(tmp_path / "deleted_key"))
    states = Waiter()
    fleet.subscribe(states)
    supervisor = fleet.add_record(record)
    states.wait(lambda: any(isinstance(e, HostStateChanged) and e.state == "failed" for e in states.events))
    assert supervisor.reason == f"gpu-a: identity_file: {tmp_path / 'deleted_key'}: no such file"
