"""`meshdeck record` over a real sshd with the real (simulated) agent, as real processes: it stores every
stored host's samples without the console (before, history was stored only while the window was open:
`history hosts` said "no history recorded yet" after a CLI session), stops cleanly on SIGTERM and SIGINT
with what it held committed, and hands the history to a console and takes it back without losing a sample."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from meshdeck.services.console import ConsoleServices
from meshdeck.services.writer_claim import history_status
from remote_agent_fixtures import RemoteAgentSetup
from sshd import SshdServer

pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.timeout(400)]

HOSTS = ("gpu-a", "gpu-b")
LINE_TIMEOUT_S = 120  # a loaded 2-core machine may take a while to upload and start the agent


@dataclass(frozen=True)
class Setup:
    env: dict[str, str]
    db: str
    options: list[str]  # the recorder's connection options: this test's known_hosts and agent paths


@pytest.fixture
def setup(tmp_path: Path, sshd: SshdServer, ssh_client_key: Path, remote_agent: RemoteAgentSetup) -> Setup:
    """An environment of this test's own (HOME, data dirs, no ssh-agent, no keyring), the database with the
    hosts stored, and the recorder's connection options pointing at this test's agent paths."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env |= {
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring",
        "OMP_NUM_THREADS": "1",
    }
    sshd.write_known_hosts(remote_agent.known_hosts)
    settings = remote_agent.settings
    options = [
        "--known-hosts", settings.known_hosts, "--ssh-config", str(tmp_path / "no_ssh_config"),
        "--agent-pyz", str(settings.agent_pyz), "--remote-cache-dir", settings.remote_cache_dir,
        "--agent-socket", str(remote_agent.socket),
    ]  # fmt: skip
    db = str(tmp_path / "meshdeck.db")
    for name in HOSTS:
        added = _meshdeck(env, "--db", db, "hosts", "add", name, "127.0.0.1", "-p", str(sshd.port),
                          "-i", str(ssh_client_key), "--simulate", "8xH200")  # fmt: skip
        assert added.returncode == 0, added.stderr
    return Setup(env, db, options)


def _meshdeck(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "meshdeck", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def _stored_rows(setup: Setup) -> dict[str, int]:
    listed = _meshdeck(setup.env, "--db", setup.db, "history", "hosts", "--json")
    assert listed.returncode == 0, listed.stderr
    return {row["host"]: row["raw_rows"] for row in json.loads(listed.stdout)}


class _Recorder:
    """`meshdeck record` running, its stderr lines collected as they come."""

    def __init__(self, setup: Setup) -> None:
        command = [sys.executable, "-m", "meshdeck", "--db", setup.db, "record", *setup.options]
        self.process = subprocess.Popen(
            command, env=setup.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.put(line)

    def wait_for(self, *texts: str, count: int = 1) -> None:
        """Until every text has been in `count` lines (counted from the start)."""
        deadline = time.monotonic() + LINE_TIMEOUT_S
        while not all(sum(text in line for line in self.seen) >= count for text in texts):
            try:
                self.seen.append(self.lines.get(timeout=max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                pytest.fail(f"no {texts} within {LINE_TIMEOUT_S} s: {''.join(self.seen[-20:])}")

    def stop(self, signum: int) -> tuple[int, str]:
        self.process.send_signal(signum)
        code = self.process.wait(timeout=180)
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return code, "".join(self.seen)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


@contextlib.contextmanager
def _recording(setup: Setup) -> Iterator[_Recorder]:
    """A recorder that has connected every host and recorded for a few seconds; killed if still running after."""
    recorder = _Recorder(setup)
    try:
        recorder.wait_for(*(f"{name}: connected" for name in HOSTS))
        time.sleep(3)  # some samples wait in the writer (it commits every 2 s at this size)
        yield recorder
    finally:
        recorder.kill()


def test_record_for_20_seconds_stores_every_stored_hosts_samples(setup: Setup) -> None:
    recorded = _meshdeck(setup.env, "--db", setup.db, "record", "--seconds", "20", *setup.options)
    assert recorded.returncode == 0, recorded.stderr
    for name in HOSTS:
        assert f"{name}: connected" in recorded.stderr
    rows = _stored_rows(setup)
    assert set(rows) == set(HOSTS), recorded.stderr
    assert all(count > 0 for count in rows.values()), rows


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_recorder_cleanly_with_what_it_held_committed(setup: Setup, signum: signal.Signals) -> None:
    with _recording(setup) as recorder:
        code, said = recorder.stop(signum)
    assert code == 0, said
    assert "stopped: " in said and "Traceback" not in said
    rows = _stored_rows(setup)
    assert all(rows.get(name, 0) > 0 for name in HOSTS), rows
    assert history_status(Path(setup.db)).writer is None  # the lock went with it


def _gaps_ms(db: str, host: str) -> tuple[int, list[int]]:
    """(points, the steps between consecutive samples) of the host's most sampled series."""
    with sqlite3.connect(db) as connection:
        (series_id,) = connection.execute(
            "SELECT r.id FROM series r JOIN samples s ON s.series_id = r.id WHERE r.host = ? "
            "GROUP BY r.id ORDER BY count(*) DESC LIMIT 1",
            (host,),
        ).fetchone()
        times = [
            ts for (ts,) in connection.execute("SELECT ts FROM samples WHERE series_id = ? ORDER BY ts", (series_id,))
        ]
    return len(times), [b - a for a, b in itertools.pairwise(times)]


def test_the_recorder_hands_the_history_to_a_console_and_takes_it_back_without_losing_a_sample(
    setup: Setup, remote_agent: RemoteAgentSetup
) -> None:
    with _recording(setup) as recorder:
        services = ConsoleServices.start(db_path=setup.db, fleet_settings=remote_agent.settings)
        try:
            assert services.claim.writes and services.claim.yielded_by == recorder.process.pid
            recorder.wait_for("paused: a console records this database")
            status = history_status(Path(setup.db))
            assert status.writer is not None and status.writer.pid == os.getpid()
            assert (
                status.text()
                == f"history: recorded by this console; meshdeck record (pid {recorder.process.pid}) waits"
            )
            services.connect_hosts()
            time.sleep(6)
        finally:
            services.shutdown()
        recorder.wait_for(*(f"{name}: connected" for name in HOSTS), count=2)
        time.sleep(3)
        code, said = recorder.stop(signal.SIGTERM)
    assert code == 0, said
    for host in HOSTS:
        points, steps = _gaps_ms(setup.db, host)
        assert points > 10 and steps, (host, points)
        usual = sorted(steps)[len(steps) // 2]
        assert max(steps) <= 1.5 * usual, (host, usual, max(steps))  # no span missing across both handovers
    with sqlite3.connect(setup.db) as connection:
        assert connection.execute("SELECT sum(dropped) FROM ingest_state").fetchone()[0] == 0
