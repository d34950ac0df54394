"""The recorder's hosts (services/recorder.py): a host stored after it started is recorded, a removed one is
dropped, and a failed one (an unknown key: nobody is there to accept it) says where to accept its key and is
tried again later instead of staying failed until a restart."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from meshdeck.remote.errors import HostKeyUnknown
from meshdeck.services.events import HostStateChanged
from meshdeck.services.recorder import Recorder
from meshdeck.store.database import open_database
from meshdeck.store.hosts import HostRecord, add_host


class FakeFleet:
    def __init__(self, hosts: list[str]) -> None:
        self.states = dict.fromkeys(hosts, "connected")
        self.retried: list[str] = []
        self.added: list[tuple[str, Any]] = []

    def hosts(self) -> list[str]:
        return list(self.states)

    def status(self, name: str) -> SimpleNamespace:
        return SimpleNamespace(state=self.states[name])

    def retry(self, name: str) -> None:
        self.retried.append(name)

    def remove_host(self, name: str) -> None:
        del self.states[name]

    def add_record(self, record: HostRecord, **resume: Any) -> None:
        self.states[record.name] = "connecting"
        self.added.append((record.name, resume))


def test_hosts_added_removed_and_failed_while_recording_are_followed(tmp_path: Path) -> None:
    lines: list[str] = []
    recorder = Recorder(tmp_path / "m.db", say=lines.append, failed_retry_s=0)
    with open_database(tmp_path / "m.db") as db:
        for name in ("gpu-a", "gpu-b"):
            add_host(db, HostRecord(name=name, target=f"root@{name}"))
        fleet = FakeFleet(["gpu-a", "gone"])
        services = SimpleNamespace(db=db, fleet=fleet)
        unknown = HostKeyUnknown("gpu-a", "ssh-ed25519", "SHA256:abc")
        fleet.states["gpu-a"] = "failed"
        recorder._tell(HostStateChanged("gpu-a", "failed", str(unknown), error=unknown))
        assert "accept it with `meshdeck hosts probe gpu-a --accept-new`" in lines[-1]
        assert lines[-1].startswith("gpu-a: failed: gpu-a: unknown host key") and "tried again every" in lines[-1]
        recorder._rescan(services)  # type: ignore[arg-type]
    assert fleet.retried == ["gpu-a"]
    assert set(fleet.states) == {"gpu-a", "gpu-b"}
    assert fleet.added == [("gpu-b", {})]  # no history yet: from the agent's oldest
    assert "gone: removed from the stored hosts; no longer recorded" in lines
    assert "gpu-b: added; recording it" in lines
