"""The history service: fleet events recorded, times parsed, exports streamed and written atomically."""

from __future__ import annotations

import csv
import io
import json
import logging
from pathlib import Path

import pytest
from meshdeck.core.errors import InputError
from meshdeck.remote.events import AgentEvent, HostStateChanged, InventoryReceived, SamplesReceived, SequenceReset
from meshdeck.services.files import atomic_output
from meshdeck.services.history import (
    HistoryRecorder,
    chart,
    export_history,
    history_hosts,
    host_metrics,
    parse_time,
    resume_points,
)
from meshdeck.services.synthetic_samples import sample_batch, wire_sample
from meshdeck.store.database import Database
from meshdeck.store.events import list_events
from meshdeck.store.writer import SampleWriter

HOUR_START = 1_764_482_400.0


def test_fleet_events_become_samples_and_history_events(db: Database) -> None:
    with SampleWriter(db) as writer:
        recorder = HistoryRecorder(writer)
        recorder.handle(HostStateChanged("gpu-a", "connected", ts=HOUR_START))
        recorder.handle(
            SamplesReceived("gpu-a", sample_batch([wire_sample(s, HOUR_START + s, gpus=1) for s in (1, 2, 3)]))
        )
        recorder.handle(
            SamplesReceived("gpu-a", sample_batch([wire_sample(9, HOUR_START + 9, gpus=1)]), dropped=5, backfill=True)
        )
        worker = {"id": "d1.vllm-node0", "state": "running", "pid": 4242, "exit_code": None, "ts": HOUR_START + 4}
        recorder.handle(AgentEvent("gpu-a", "worker", worker))
        xid = {"kind": "xid", "gpu": 3, "xid": 79, "ts": HOUR_START + 5}
        recorder.handle(AgentEvent("gpu-a", "alert", xid))
        nccl = {"worker": "d1.vllm-node0", "kind": "nccl_transport", "fields": {"transport": "NET/IB"}, "ts": 6.0}
        recorder.handle(AgentEvent("gpu-a", "log", nccl))
        plain_line = {"worker": "d1.vllm-node0", "kind": "other", "fields": {}, "line": "INFO hello"}
        recorder.handle(AgentEvent("gpu-a", "log", plain_line))
        recorder.handle(InventoryReceived("gpu-a", {"gpus": []}))
        assert writer.flush(30)
    events = [(e.kind, e.subject) for e in list_events(db, host="gpu-a")]
    assert events == [
        ("nccl_transport", "d1.vllm-node0"),
        ("host_state", None),
        ("worker_state", "d1.vllm-node0"),
        ("xid", "gpu3"),
        ("samples_dropped", None),
    ]
    assert {h: p.seq for h, p in resume_points(db).items()} == {"gpu-a": 9}
    assert host_metrics(db, "gpu-a")["power_w"] == ["gpu0"]
    assert len(host_metrics(db, "gpu-a")) == 12
    (host,) = history_hosts(db)
    assert (host.host, host.series, host.samples, host.dropped, host.last_seq) == ("gpu-a", 12, 4, 5, 9)


def test_a_sequence_reset_is_an_event_and_the_resume_point_carries_the_new_epoch(db: Database) -> None:
    with SampleWriter(db) as writer:
        recorder = HistoryRecorder(writer)
        old = tuple(wire_sample(s, HOUR_START + s, gpus=1) for s in range(1, 41))
        recorder.handle(SamplesReceived("gpu-a", sample_batch(old), epoch="e1"))
        reason = "the agent's sample sequence restarted (epoch e1 -> e2: a new agent state dir)"
        recorder.handle(SequenceReset("gpu-a", "e2", "e1", 40, reason, ts=HOUR_START + 50))
        new = tuple(wire_sample(s, HOUR_START + 50 + s, gpus=1) for s in (1, 2))
        recorder.handle(SamplesReceived("gpu-a", sample_batch(new), backfill=True, epoch="e2"))
        assert writer.flush(30)
    (event,) = list_events(db, host="gpu-a")
    assert event.kind == "seq_reset" and event.data["previous_seq"] == 40 and event.data["epoch"] == "e2"
    assert resume_points(db)["gpu-a"].seq == 2 and resume_points(db)["gpu-a"].epoch == "e2"
    assert {h: p.seq for h, p in resume_points(db).items()} == {"gpu-a": 2}
    (host,) = history_hosts(db)
    assert host.dropped == 0  # a reset is not a loss


def test_a_stopped_writer_makes_the_recorder_drop_quietly(db: Database, caplog: pytest.LogCaptureFixture) -> None:
    writer = SampleWriter(db)  # never started: it refuses every submission
    with caplog.at_level(logging.DEBUG, logger="meshdeck.services.history"):
        HistoryRecorder(writer).handle(HostStateChanged("gpu-a", "failed"))
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "meshdeck.services.history"]
    assert said == [(logging.DEBUG, "history writer stopped; dropped HostStateChanged")]
    assert list_events(db) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1764482400", HOUR_START),
        ("1764482400.5", HOUR_START + 0.5),
        ("2025-11-30T06:00:00Z", HOUR_START),
        ("2025-11-30 06:00", HOUR_START),
        ("2025-11-30T07:00:00+01:00", HOUR_START),
        ("now", HOUR_START + 7200),
        ("2h", HOUR_START),
        ("-120m", HOUR_START),
        ("0.5d", HOUR_START + 7200 - 43200),
    ],
)
def test_times_are_read_in_every_documented_form(text: str, expected: float) -> None:
    assert parse_time(text, field="--since", now=HOUR_START + 7200) == pytest.approx(expected)


def test_a_time_that_is_none_of_them_names_the_flag() -> None:
    with pytest.raises(InputError, match="--until: 'yesterday-ish' is not a time"):
        parse_time("yesterday-ish", field="--until")


def _feed(db: Database) -> None:
    rows = [(s + 1, HOUR_START + s, d, "power_w", float(s)) for s in range(150) for d in ("gpu0", "gpu1")]
    with SampleWriter(db) as writer:
        writer.submit_rows("gpu-a", rows)


def test_raw_export_as_csv_has_one_row_per_sample_in_range(db: Database) -> None:
    _feed(db)
    out = io.StringIO()
    count = export_history(db, out, host="gpu-a", device="gpu1", since=HOUR_START + 10, until=HOUR_START + 20)
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    assert rows[0] == ["time", "ts", "host", "device", "metric", "unit", "value"]
    assert count == 10 and len(rows) == 11
    assert rows[1] == ["2025-11-30T06:00:10.000Z", str(HOUR_START + 10), "gpu-a", "gpu1", "power_w", "W", "10.0"]


def test_minute_export_as_json_has_min_mean_max_count_per_bucket(db: Database) -> None:
    _feed(db)
    out = io.StringIO()
    export_history(db, out, host="gpu-a", metric="power_w", fmt="json", tier="1m", since=HOUR_START + 30)
    document = json.loads(out.getvalue())
    gpu0 = [row for row in document if row["device"] == "gpu0"]
    assert [(r["min"], r["max"], r["count"]) for r in gpu0] == [(0.0, 59.0, 60), (60.0, 119.0, 60), (120.0, 149.0, 30)]
    assert gpu0[0]["mean"] == pytest.approx(29.5) and gpu0[0]["unit"] == "W"


def test_export_of_an_unknown_host_or_metric_names_the_flag(db: Database) -> None:
    _feed(db)
    with pytest.raises(InputError, match=r"--host: no history for host 'gpu-z' \(hosts with history: gpu-a\)"):
        export_history(db, io.StringIO(), host="gpu-z")
    with pytest.raises(InputError, match="--metric"):
        export_history(db, io.StringIO(), host="gpu-a", metric="nope")
    with pytest.raises(InputError, match="--format"):
        export_history(db, io.StringIO(), host="gpu-a", fmt="xml")


def test_an_interrupted_atomic_output_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    target.write_text("previous export\n")
    with pytest.raises(RuntimeError), atomic_output(target) as handle:
        handle.write("half of it")
        raise RuntimeError("disk full")
    assert target.read_text() == "previous export\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]
    with atomic_output(target) as handle:
        handle.write("complete\n")
    assert target.read_text() == "complete\n"


def test_a_chart_of_nvlink_reads_the_per_gpu_sums_and_a_link_only_when_asked_for(db: Database) -> None:
    with SampleWriter(db) as writer:
        samples = [wire_sample(s, HOUR_START + s, gpus=2, nvlink_links=4) for s in range(1, 91)]
        writer.submit_samples("gpu-a", sample_batch(samples))
    span = {"since": HOUR_START, "until": HOUR_START + 120}
    drawn = chart(db, host="gpu-a", metric="nvlink_tx_bytes_per_s", **span)
    assert sorted(r.series.device for r in drawn) == ["gpu0", "gpu1"]
    (link,) = chart(db, host="gpu-a", metric="nvlink_tx_bytes_per_s", device="gpu1/nvlink2", **span)
    assert link.tier in ("1m", "1h") and sum(link.count) == 90
