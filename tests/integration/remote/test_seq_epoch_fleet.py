"""A real agent whose state dir is replaced (a wiped ~/.cache, a reinstalled server): its sequence starts
at 1 under a new epoch; the fleet resets its gate instead of dropping every sample, and the store's
resume point follows the new epoch."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from integration.agent.agent_harness import Client, agent_env, wait_for
from meshdeck.remote.events import SamplesReceived
from meshdeck.remote.supervisor import Backoff, SupervisorSettings
from meshdeck.services.fleet import FleetService, FleetSettings
from meshdeck.services.history import HistoryRecorder, history_hosts, resume_points
from meshdeck.store.database import open_database
from meshdeck.store.events import list_events
from meshdeck.store.writer import SampleWriter, WriterSettings
from remote_fake_agent import Recorder  # tests/fakes is on sys.path (tests/conftest.py)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="mde-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _agent_last_seq(socket_path: Path) -> int:
    client = Client.connect(socket_path)
    try:
        return int(client.call("samples.read", {"since_seq": 0, "limit": 1})["last_seq"])
    finally:
        client.close()


@pytest.mark.slow
def test_a_replaced_state_dir_resets_the_gate_and_the_resume_point_follows_the_new_epoch(
    short_dir: Path, tmp_path: Path
):
    settings = FleetSettings(
        known_hosts=str(tmp_path / "known_hosts"),
        supervisor=SupervisorSettings(backoff=Backoff(initial_s=0.2, max_s=2.0)),
    )
    db = open_database(tmp_path / "history.sqlite")
    writer = SampleWriter(db, settings=WriterSettings(commit_interval_s=0.5)).start()
    socket_path, state = short_dir / "a.sock", short_dir / "a.state"
    options = {"simulate": "1xH100", "socket": str(socket_path), "state_dir": str(state), "interval_s": 0.1}
    fleet = FleetService(settings)
    daemon: subprocess.Popen[bytes] | None = None
    try:
        fleet.subscribe(HistoryRecorder(writer).handle)
        first = Recorder()
        fleet.subscribe(first)
        supervisor = fleet.add_local("gpu-a", **options)
        first.wait_for(lambda: len(first.seqs("gpu-a")) >= 10)
        old_epoch = supervisor.epoch
        assert old_epoch and {e.epoch for e in first.samples_events()} == {old_epoch}
        fleet.call("gpu-a", "agent.shutdown", timeout=30)  # the app goes away, the server is reinstalled
        fleet.remove_host("gpu-a")
        assert wait_for(lambda: not socket_path.exists(), timeout=30)
        assert writer.flush(60)
        point = resume_points(db)["gpu-a"]
        assert point.epoch == old_epoch and point.seq >= 10

        shutil.rmtree(state)
        serve = ["serve", "--socket", str(socket_path), "--state-dir", str(state), "--simulate", "1xH100"]
        daemon = subprocess.Popen(  # the new agent runs on a fresh state dir well past the stored seq
            [sys.executable, "-m", "meshdeck_agent", *serve, "--interval", "0.05"],
            env=agent_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert wait_for(lambda: socket_path.exists(), timeout=60)
        assert wait_for(lambda: _agent_last_seq(socket_path) > point.seq + 10, timeout=120, interval=0.2)

        second = Recorder()
        fleet.subscribe(second)
        supervisor = fleet.add_local("gpu-a", since_seq=point.seq, since_epoch=point.epoch, **options)
        second.wait_for(lambda: second.resets() and len(second.seqs("gpu-a")) > point.seq + 10, timeout=120)
        (reset,) = second.resets()
        assert reset.previous_epoch == old_epoch and reset.epoch not in (None, old_epoch)
        assert reset.previous_seq == point.seq and supervisor.epoch == reset.epoch
        seqs = second.seqs("gpu-a")
        assert seqs[: point.seq + 1] == list(range(1, point.seq + 2))  # the seqs an old gate would have dropped
        assert seqs == list(range(1, len(seqs) + 1))
        delivered = [e for e in second.events if isinstance(e, SamplesReceived)]
        assert {e.epoch for e in delivered} == {reset.epoch} and sum(e.dropped for e in delivered) == 0
        assert second.events.index(reset) < second.events.index(delivered[0])

        new_last = seqs[-1]
        assert writer.flush(60)
        stored = resume_points(db)["gpu-a"]
        assert stored.epoch == reset.epoch and stored.seq >= new_last
        kinds = [e.kind for e in list_events(db, host="gpu-a")]
        assert "seq_reset" in kinds and "samples_dropped" not in kinds
        assert history_hosts(db)[0].dropped == 0
    finally:
        for name in fleet.hosts():
            try:
                fleet.call(name, "agent.shutdown", timeout=10)
            except Exception as exc:  # already down when the test failed early
                print(f"shutdown of {name}: {exc}")
        fleet.close()
        if daemon is not None:
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        writer.stop()
        db.close()
