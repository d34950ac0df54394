"""`meshdeck hosts list` has a STATE column: what the console / `meshdeck record` recorded, without connecting
(unknown once that is over a minute old), or with --connect every host asked now, all at once and bounded
(a host with no verdict in time is "unknown", never waited for). Before, there was no state at all."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from meshdeck.cli import main
from meshdeck.store.database import open_database
from meshdeck.store.events import EventRecord, record_event
from meshdeck.store.hosts import HostRecord, add_host
from meshdeck.store.writer import SampleWriter


def _listed(capsys: pytest.CaptureFixture[str], db: str, *extra: str) -> tuple[int, dict[str, dict], str]:
    code = main(["--db", db, "hosts", "list", "--json", *extra])
    out, err = capsys.readouterr()
    return code, {h["name"]: h for h in json.loads(out or "[]")}, err


def test_hosts_list_says_what_was_recorded_of_each_host_without_connecting(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from meshdeck.commands import hosts as hosts_command

    db = str(tmp_path / "m.db")
    now = time.time()
    with open_database(db) as database:
        for name in ("gpu-a", "gpu-b", "gpu-c", "gpu-d"):
            add_host(database, HostRecord(name, f"ops@{name}"))
        with SampleWriter(database) as writer:  # gpu-a's samples arrive (the console or `meshdeck record` runs)
            writer.submit_rows("gpu-a", [(s, now - 10 + s, "gpu0", "power_w", 300.0) for s in range(1, 6)])
        record_event(database, EventRecord("host_state", now - 20, host="gpu-b",
                                           data={"state": "failed", "reason": "gpu-b:22: connection refused"}))  # fmt: skip
        record_event(database, EventRecord("host_state", now - 3 * 3600, host="gpu-c", data={"state": "connected"}))
    monkeypatch.setattr(hosts_command, "FleetService", None)  # connecting would fail the test

    code, hosts, _err = _listed(capsys, db)

    assert code == 0
    assert hosts["gpu-a"]["state"] == "connected" and hosts["gpu-a"]["state_seen_at"] == pytest.approx(now - 5, abs=1)
    assert (hosts["gpu-b"]["state"], hosts["gpu-b"]["state_reason"]) == ("unreachable", "gpu-b:22: connection refused")
    assert (
        hosts["gpu-c"]["state"] == "unknown" and hosts["gpu-c"]["state_reason"] == "last recorded 3 h ago (connected)"
    )
    assert hosts["gpu-d"]["state"] == "unknown" and "nothing recorded" in hosts["gpu-d"]["state_reason"]

    assert main(["--db", db, "hosts", "list"]) == 0
    table = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()[1:]}
    assert table == {"gpu-a": "connected", "gpu-b": "unreachable", "gpu-c": "unknown", "gpu-d": "unknown"}


@pytest.fixture
def silent_port() -> Iterator[int]:
    """Accepts TCP connections and never says anything (no SSH banner): a hung server."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def test_hosts_list_connect_asks_every_host_at_once_and_says_unknown_rather_than_wait(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, silent_port: int
) -> None:
    from meshdeck.services import host_states
    from sshd import free_port

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # meshdeck's own known_hosts: this test's
    monkeypatch.setattr(host_states, "ASK_TIMEOUT_S", 2.0)  # below the 5 s SSH connect timeout the silent host waits
    db = str(tmp_path / "m.db")
    with open_database(db) as database:
        add_host(database, HostRecord(name="gpu-closed", target="127.0.0.1", port=free_port()))
        add_host(database, HostRecord(name="gpu-silent", target="127.0.0.1", port=silent_port))

    started = time.monotonic()
    code, hosts, _err = _listed(capsys, db, "--connect")

    assert code == 0 and time.monotonic() - started < 15  # bounded: not 5 s of connect timeout per host in turn
    assert hosts["gpu-closed"]["state"] == "unreachable" and "127.0.0.1" in hosts["gpu-closed"]["state_reason"]
    assert hosts["gpu-silent"]["state"] == "unknown" and "no answer within 2 s" in hosts["gpu-silent"]["state_reason"]
