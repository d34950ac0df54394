"""Samples are checked once where they arrive: a bad one is refused, named and counted; the rest flow on.

A sample with a time stamp of 1e17 or a seq of 2**70 used to reach the store, where converting it to
SQLite's integers raised OverflowError on every commit: no host's history was stored while it lasted.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path

import pytest
from meshdeck.remote.events import HostStateChanged
from meshdeck.services.fleet import FleetService
from meshdeck.services.history import HistoryRecorder
from meshdeck.store.database import Database, open_database
from meshdeck.store.writer import SampleWriter, WriterSettings
from meshdeck_agent import protocol
from remote_fake_agent import FakeConnector, Recorder, make_sample


@pytest.fixture
def db(tmp_path: Path):
    database = open_database(tmp_path / "meshdeck.db")
    yield database
    database.close()


def _stored(db: Database, host: str) -> list[int]:
    """Distinct sample times (ms) stored for host's gpu0 memory series."""
    connection = sqlite3.connect(db.path)
    try:
        rows = connection.execute(
            "SELECT s.ts FROM samples s JOIN series r ON r.id = s.series_id "
            "WHERE r.host = ? AND r.device = 'gpu0' AND r.metric = 'memory_used_bytes' ORDER BY s.ts",
            (host,),
        ).fetchall()
    finally:
        connection.close()
    return [row[0] for row in rows]


def _poison(seq: int) -> list[dict[str, object]]:
    now = time.time()
    far_future = make_sample(seq, ts=1e17)
    huge_seq = make_sample(seq + 1, ts=now)
    huge_seq["seq"] = 2**70
    wrong_type = make_sample(seq + 2, ts=now)
    wrong_type["gpus"][0]["memory_used_bytes"] = "lots"  # type: ignore[index]
    return [far_future, huge_seq, wrong_type]


def test_one_hosts_out_of_range_samples_are_refused_and_every_other_sample_is_stored(
    fleet: FleetService, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    events = Recorder()
    fleet.subscribe(events)
    with SampleWriter(db, settings=WriterSettings(commit_interval_s=0.2, retry_s=0.2)) as writer:
        fleet.subscribe(HistoryRecorder(writer).handle)
        good, bad = FakeConnector(), FakeConnector()
        fleet.add_host("good", good)
        fleet.add_host("bad", bad)
        events.wait_for(lambda: good.agents and bad.agents and good.agent.subscribed.is_set())
        events.wait_for(lambda: bad.agent.subscribed.is_set())
        with caplog.at_level(logging.WARNING, logger="meshdeck.remote.sample_gate"):
            bad.agent.send(protocol.event("samples", {"samples": _poison(1), "dropped": 0}))
            bad.agent.send(protocol.event("samples", {"samples": [make_sample(1)], "dropped": 0}))
            now = time.time()
            good.agent.send(protocol.event("samples", {"samples": [make_sample(s, now + s) for s in range(1, 6)]}))
            events.wait_for(lambda: len(events.seqs("good")) == 5 and events.seqs("bad") == [1])
            assert writer.flush(30)
        assert writer.stats().failures == 0
    assert len(_stored(db, "good")) == 5
    assert len(_stored(db, "bad")) == 1  # its one good sample
    assert sum(e.refused for e in events.samples_events() if e.host == "bad") == 3
    refusals = [r.getMessage() for r in caplog.records if "refused a sample" in r.getMessage()]
    assert any("bad" in m and "ts: must be a number from" in m for m in refusals)
    assert any("seq: must be an integer" in m for m in refusals)
    assert any("gpus[0].memory_used_bytes: must be a number, got 'lots'" in m for m in refusals)


def test_a_flood_of_bad_samples_logs_a_few_warnings_not_thousands(
    fleet: FleetService, caplog: pytest.LogCaptureFixture
) -> None:
    events = Recorder()
    fleet.subscribe(events)
    bad = FakeConnector()
    fleet.add_host("bad", bad)
    events.wait_for(lambda: bool(bad.agents) and bad.agent.subscribed.is_set())
    flood = [make_sample(seq, ts=1e17) for seq in range(1, 2001)]
    with caplog.at_level(logging.WARNING, logger="meshdeck.remote.sample_gate"):
        for start in range(0, len(flood), 200):
            bad.agent.send(protocol.event("samples", {"samples": flood[start : start + 200], "dropped": 0}))
        bad.agent.send(protocol.event("samples", {"samples": [make_sample(1)], "dropped": 0}))
        events.wait_for(lambda: events.seqs("bad") == [1])
    assert sum(e.refused for e in events.samples_events()) == 2000
    assert len([r for r in caplog.records if "refused a sample" in r.getMessage()]) <= 5


def test_a_samples_read_page_of_the_wrong_shape_drops_the_connection_naming_the_host(fleet: FleetService) -> None:
    events = Recorder()
    fleet.subscribe(events)
    connector = FakeConnector(handlers={"samples.read": lambda params: {"samples": "none", "last_seq": "x"}})
    connector.emit_offline(3)
    fleet.add_host("gpu-a", connector, since_seq=1)

    def reasons() -> list[str]:
        return [e.reason for e in events.events if isinstance(e, HostStateChanged) and "samples.read" in e.reason]

    events.wait_for(lambda: bool(reasons()))
    assert reasons()[0].startswith("gpu-a: ") and "samples: must be a list" in reasons()[0]
