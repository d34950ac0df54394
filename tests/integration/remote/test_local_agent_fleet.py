"""The fleet with the real agent as a local subprocess (the `--demo` path): two simulated 8xH200 agents."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from meshdeck.remote.events import HostStateChanged, InventoryReceived, SamplesReceived
from meshdeck.remote.supervisor import Backoff, SupervisorSettings
from meshdeck.services.fleet import FleetService, FleetSettings
from remote_fake_agent import Recorder  # tests/fakes is on sys.path (tests/conftest.py)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Agent sockets need short paths (sun_path is 108 bytes); pytest's tmp_path can be too long."""
    path = Path(tempfile.mkdtemp(prefix="mdf-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[FleetService]:
    settings = FleetSettings(
        known_hosts=str(tmp_path / "known_hosts"),
        supervisor=SupervisorSettings(backoff=Backoff(initial_s=0.2, max_s=2.0)),
    )
    service = FleetService(settings)
    yield service
    for name in service.hosts():  # leave no daemon behind
        try:
            service.call(name, "agent.shutdown", timeout=10)
        except Exception as exc:  # the test may have broken it on purpose
            print(f"shutdown of {name}: {exc}")
    service.close()


@pytest.mark.slow
def test_two_local_simulated_agents_stream_samples_in_order(fleet: FleetService, short_dir: Path):
    got = Recorder()
    fleet.subscribe(got)
    for name in ("demo-a", "demo-b"):
        fleet.add_local(name, simulate="8xH200", socket=str(short_dir / f"{name}.sock"), interval_s=0.2)
    got.wait_for(lambda: all(len(got.seqs(h)) >= 5 for h in ("demo-a", "demo-b")), timeout=60)
    for name in ("demo-a", "demo-b"):
        seqs = got.seqs(name)
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        inventory = next(e.inventory for e in got.events if isinstance(e, InventoryReceived) and e.host == name)
        assert inventory.simulated is True and len(inventory.gpus) == 8
        assert inventory.gpu_names == ("NVIDIA H200",)
        states = [e.state for e in got.events if isinstance(e, HostStateChanged) and e.host == name]
        assert states[:2] == ["connecting", "connected"]
        assert fleet.status(name).agent_version
    batch = next(e.batch for e in got.events if isinstance(e, SamplesReceived))
    assert batch.simulated is True
    assert {device.index for device, metric in batch.series if metric == "memory_used_bytes"} == set(range(8))
    assert fleet.call("demo-a", "workers.list", timeout=30) == {"workers": []}
    assert (short_dir / "demo-a.sock").exists() and (short_dir / "demo-b.sock").exists()


@pytest.mark.slow
def test_local_agent_reattaches_after_its_attach_process_dies(fleet: FleetService, short_dir: Path):
    got = Recorder()
    fleet.subscribe(got)
    supervisor = fleet.add_local("demo-a", simulate="2xH100", socket=str(short_dir / "a.sock"), interval_s=0.2)
    got.wait_for(lambda: len(got.seqs("demo-a")) >= 3)
    first_pid = supervisor.details["pid"]
    import os
    import signal

    os.kill(first_pid, signal.SIGKILL)  # the relay dies; the daemon keeps sampling
    got.wait_for(lambda: supervisor.connects >= 2 and len(got.seqs("demo-a")) >= 15)
    seqs = got.seqs("demo-a")
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    assert supervisor.details["pid"] != first_pid


@pytest.mark.slow
def test_each_local_host_costs_one_thread_its_supervisor_the_reading_is_shared(fleet: FleetService, short_dir: Path):
    """Issue 14: three threads per host (supervisor, RPC reader, stderr pump) were 838 threads at 278 hosts."""
    import threading

    got = Recorder()
    fleet.subscribe(got)
    hosts = [f"demo-{i}" for i in range(4)]
    for name in hosts:
        fleet.add_local(name, simulate="1xH100", socket=str(short_dir / f"{name}.sock"), interval_s=0.2)
    got.wait_for(lambda: all(len(got.seqs(h)) >= 3 for h in hosts), timeout=120)
    names = [t.name for t in threading.enumerate()]
    per_host = {h: [n for n in names if n.endswith(f"-{h}")] for h in hosts}
    assert per_host == {h: [f"meshdeck-host-{h}"] for h in hosts}
    assert fleet.call("demo-0", "workers.list", timeout=30) == {"workers": []}  # calls are still answered
