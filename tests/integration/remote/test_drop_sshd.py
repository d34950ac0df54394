"""The connection drops for 20 s (server-side session killed, sshd down) while the agent samples at 1 Hz
and a worker runs: the supervisor reconnects by itself, the worker still runs, and the samples the client
holds have contiguous seq — none lost, none duplicated."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from meshdeck.remote.events import HostStateChanged
from meshdeck.services.fleet import FleetService, ssh_connector
from meshdeck_agent.protocol import WorkerSpec
from remote_agent_fixtures import RemoteAgentSetup
from remote_fake_agent import Recorder  # tests/fakes is on sys.path (tests/conftest.py)
from sshd import SshdFactory

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

OUTAGE_S = 20.0


def test_twenty_second_drop_loses_no_sample_and_keeps_the_worker(
    sshd_factory: SshdFactory, ssh_client_key: Path, remote_agent: RemoteAgentSetup, monkeypatch
):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    server = sshd_factory.start(authorize=ssh_client_key)
    server.write_known_hosts(remote_agent.known_hosts)
    got = Recorder()
    with FleetService(remote_agent.settings) as fleet:
        fleet.subscribe(got)
        connector = ssh_connector(
            remote_agent.settings,
            "127.0.0.1",
            port=server.port,
            identity_file=str(ssh_client_key),
            simulate="8xH200",
            host_keys=fleet.host_keys,
        )
        supervisor = fleet.add_host("gpu-a", connector)
        got.wait_for(lambda: len(got.seqs("gpu-a")) >= 3, timeout=90)
        # read by the one read hub (issue 14: a reader thread per host): the host's own thread is its supervisor
        assert [t.name for t in threading.enumerate() if t.name.endswith("-gpu-a")] == ["meshdeck-host-gpu-a"]
        spec = WorkerSpec(argv=("sleep", "600"), id="steady").to_wire()
        assert fleet.call("gpu-a", "workers.start", {"spec": spec})["state"] in ("starting", "running")
        worker = _wait_running(fleet, "steady")

        sessions = server.session_pids()
        assert sessions, "the fleet's SSH session should be a child of the listener"
        server.stop_listener()  # unreachable from now on: connection refused
        server.kill_sessions(sessions)  # the server-side session process dies: the client sees a drop
        dropped_at = time.monotonic()
        got.wait_for(lambda: supervisor.state == "disconnected", timeout=30)
        seq_at_drop = supervisor.last_seq
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - dropped_at)))  # the outage itself: the host stays down
        assert supervisor.state == "disconnected" and supervisor.connects == 1
        server.start()  # the host is back; nobody tells the supervisor

        got.wait_for(lambda: supervisor.connects >= 2 and supervisor.state == "connected", timeout=60)
        resumed = supervisor.last_seq or 0
        got.wait_for(lambda: (supervisor.last_seq or 0) >= resumed + 3, timeout=30)

        seqs = got.seqs("gpu-a")
        assert seqs == list(range(seqs[0], seqs[-1] + 1)), "seq must be contiguous: nothing lost or repeated"
        backfilled = [seq for e in got.samples_events() if e.host == "gpu-a" and e.backfill for seq in e.batch.seqs]
        assert len(backfilled) >= OUTAGE_S * 0.75, "the ~20 samples taken during the outage come back as backfill"
        assert backfilled[0] == seq_at_drop + 1
        assert sum(e.dropped for e in got.samples_events()) == 0
        workers = {w["id"]: w for w in fleet.call("gpu-a", "workers.list")["workers"]}
        assert workers["steady"]["state"] == "running" and workers["steady"]["pid"] == worker["pid"]
        assert workers["steady"]["restarts"] == 0
        states = [e.state for e in got.events if isinstance(e, HostStateChanged) and e.host == "gpu-a"]
        assert states.index("disconnected") < len(states) - 1 and states[-1] == "connected"


def _wait_running(fleet: FleetService, worker_id: str, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = {w["id"]: w for w in fleet.call("gpu-a", "workers.list")["workers"]}
        if workers.get(worker_id, {}).get("state") == "running" and workers[worker_id].get("pid"):
            return workers[worker_id]
        time.sleep(0.2)
    raise AssertionError(f"worker {worker_id} did not reach running: {workers.get(worker_id)}")
