"""Hypothesis against the sample boundary: whatever an agent sends, decoding yields a Sample whose every
number is in range, or a SampleError naming a field — never another exception; and the one flatten
keeps every reported value under the right series."""

from __future__ import annotations

import json
import math
from typing import Any

from hostile_peer import json_locations, mutated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from meshdeck.core.samples import Device
from meshdeck.remote.sample_batch import batch_from_samples
from meshdeck.services.synthetic_samples import wire_sample
from meshdeck_agent import protocol
from meshdeck_agent.wire_sample import (
    GPU_METRICS,
    HOST_METRICS,
    MAX_SEQ,
    MAX_TS,
    MIN_TS,
    SAMPLES_EVENT_PREFIX,
    Sample,
    SampleError,
    decode_samples_message,
    iter_event_samples,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


def _checked(sample: Sample) -> None:
    """The invariants every decoded sample keeps, whatever it was made from."""
    assert 0 <= sample.seq <= MAX_SEQ and MIN_TS <= sample.ts <= MAX_TS
    for gpu in sample.gpus:
        for metric, value in zip(GPU_METRICS, gpu.values, strict=True):
            assert value is None or (math.isfinite(value) and metric.low <= value <= metric.high)
        for pair in gpu.nvlink_links:
            assert all(v is None or math.isfinite(v) for v in pair)
    if sample.host is not None:
        for metric, value in zip(HOST_METRICS, sample.host.values, strict=True):
            assert value is None or metric.low <= value <= metric.high
    for worker in sample.workers:
        assert all(math.isfinite(v) for _, v in worker.metrics)


def _decode(raw: Any) -> Sample | None:
    try:
        sample = Sample.from_wire(raw)
    except SampleError as exc:
        assert exc.field and exc.problem  # names where and what
        return None
    _checked(sample)
    return sample


@FUZZ
@given(json_values)
def test_any_json_value_decodes_to_a_checked_sample_or_a_field_error(raw: Any) -> None:
    _decode(raw)


BASE = {
    **wire_sample(7, 1_764_480_000.0, gpus=2),
    "host": {"cpu_pct": 12.5, "ram_used_bytes": 2**36, "ram_total_bytes": 2**40},
    "nics": [{"name": "mlx5_0/1", "kind": "infiniband", "tx_bytes_per_s": 4e10, "rx_bytes_per_s": 3.9e10}],
    "workers": [{"id": "w1", "engine": "0", "metrics": {"kv_cache_usage_perc": 0.4, "num_requests_running": 12}}],
}
BASE["gpus"][0]["nvlink_links"] = [[1e9, 2e9], [None, 3e9]]
BASE["gpus"][0]["xid_events"] = [{"xid": 79, "ts": 1_764_480_000.0}]


@FUZZ
@given(st.data(), json_values)
def test_a_real_sample_with_any_one_field_replaced_decodes_or_names_that_field(data: st.DataObject, new: Any) -> None:
    path = data.draw(st.sampled_from(json_locations(BASE)))
    mutated_sample = mutated(BASE, path, "replace", new)
    try:
        sample = Sample.from_wire(mutated_sample)
    except SampleError as exc:
        if path and isinstance(path[-1], str) and path[-1] not in ("gpus", "host"):
            assert str(path[-1]) in exc.field or exc.field in ("sample", "gpus")  # the error points at it
        return
    _checked(sample)


finite = st.floats(allow_nan=False, allow_infinity=False)


@st.composite
def valid_samples(draw: st.DrawFn, seq: int | None = None) -> dict[str, Any]:
    gpu_count = draw(st.integers(0, 4))
    gpus = []
    for index in draw(st.lists(st.integers(0, 15), min_size=gpu_count, max_size=gpu_count, unique=True)):
        gpu: dict[str, Any] = {"index": index, "uuid": draw(st.none() | st.text(max_size=10))}
        for metric in GPU_METRICS:
            gpu[metric.name] = draw(st.none() | st.floats(metric.low, metric.high) | st.integers(0, int(metric.high)))
        links = draw(st.integers(0, 3))
        gpu["nvlink_links"] = [[draw(st.none() | st.floats(0, 1e12)), draw(st.none() | st.floats(0, 1e12))]] * links
        gpus.append(gpu)
    workers = [
        {
            "id": f"w{number}" + draw(st.text("abc-", max_size=4)),
            "engine": draw(st.sampled_from(["", "0", "1"])),
            "metrics": draw(
                st.dictionaries(
                    st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
                    st.none() | finite.filter(lambda v: abs(v) <= 1e18),
                    max_size=4,
                )
            ),
        }
        for number in range(draw(st.integers(0, 2)))
    ]
    return {
        "seq": seq if seq is not None else draw(st.integers(0, MAX_SEQ)),
        "ts": draw(st.floats(MIN_TS, MAX_TS)),
        "simulated": draw(st.booleans()),
        "gpus": gpus,
        "host": {m.name: draw(st.none() | st.floats(m.low, m.high)) for m in HOST_METRICS},
        "nics": [{"name": "mlx5_0/1", "kind": "infiniband", "tx_bytes_per_s": 1.0, "rx_bytes_per_s": None}],
        "workers": workers,
    }


@FUZZ
@given(valid_samples())
def test_a_valid_sample_round_trips_through_its_wire_form(raw: dict[str, Any]) -> None:
    sample = Sample.from_wire(raw)
    assert Sample.from_wire(json.loads(json.dumps(sample.to_wire()))) == sample


def _expected_values(sample: Sample) -> dict[tuple[Device, str], float]:
    """A plain flatten written out by hand, to check the one in remote.sample_batch against."""
    values: dict[tuple[Device, str], float] = {}
    for gpu in sample.gpus:
        for metric, value in zip(GPU_METRICS, gpu.values, strict=True):
            if value is not None:
                values[(Device.gpu(gpu.index), metric.name)] = value
        for link, (tx, rx) in enumerate(gpu.nvlink_links):
            for metric, value in (("nvlink_tx_bytes_per_s", tx), ("nvlink_rx_bytes_per_s", rx)):
                if value is not None:
                    values[(Device.nvlink(gpu.index, link), metric)] = value
    for metric, value in zip(HOST_METRICS, sample.host.values if sample.host else (), strict=False):
        if value is not None:
            values[(Device("host"), metric.name)] = value
    for nic in sample.nics:
        for metric, value in (("tx_bytes_per_s", nic.tx_bytes_per_s), ("rx_bytes_per_s", nic.rx_bytes_per_s)):
            if value is not None:
                values[(Device.nic(nic.name), metric)] = value
    for worker in sample.workers:
        for metric, value in worker.metrics:
            values[(Device.worker(worker.id, worker.engine), metric)] = value
    return values


@FUZZ
@given(st.lists(valid_samples(), min_size=1, max_size=4))
def test_the_one_flatten_keeps_every_reported_value_under_its_series(raws: list[dict[str, Any]]) -> None:
    samples = []
    for seq, raw in enumerate(raws, start=1):
        decoded = _decode({**raw, "seq": seq})
        if decoded is not None:
            samples.append(decoded)
    batch = batch_from_samples(samples)
    assert batch.seqs == tuple(s.seq for s in samples)
    for i, sample in enumerate(samples):
        assert dict(batch.row(i)) == _expected_values(sample)
    for device, _ in batch.series:
        assert Device.from_text(device.text) == device  # the store's name reads back as the same device
    width = batch.width
    for column, key in enumerate(batch.series):  # a column only for a series some sample reported
        assert any(not math.isnan(v) for v in batch.values[column::width]), key
    assert len(set(batch.series)) == width


@FUZZ
@given(json_values)
def test_any_samples_message_envelope_is_read_or_refused_with_a_field_error(raw: Any) -> None:
    try:
        samples, dropped = decode_samples_message(raw)
    except SampleError:
        return
    assert isinstance(samples, list) and 0 <= dropped <= MAX_SEQ


@FUZZ
@given(st.lists(json_values, max_size=6), st.integers(0, 2**40))
def test_a_samples_event_read_sample_by_sample_gives_what_decoding_it_whole_gives(
    samples: list[Any], dropped: int
) -> None:
    line = protocol.encode(protocol.event("samples", {"samples": samples, "dropped": dropped}))
    assert line.startswith(SAMPLES_EVENT_PREFIX)  # how the agent writes it
    assert list(iter_event_samples(line.rstrip(b"\n"))) == json.loads(line)["data"]["samples"]


@FUZZ
@given(st.lists(json_values, min_size=1, max_size=4), st.data())
def test_a_broken_samples_event_yields_whole_values_then_a_field_error(samples: list[Any], data: st.DataObject) -> None:
    line = protocol.encode(protocol.event("samples", {"samples": samples, "dropped": 0})).rstrip(b"\n")
    samples = json.loads(line)["data"]["samples"]  # as encoded (a NaN is sent as null)
    cut = data.draw(st.integers(len(SAMPLES_EVENT_PREFIX), len(line) - 1))
    broken = line[:cut] + data.draw(st.sampled_from([b"", b"}", b",", b"]", b"\xff", b'"x"']))
    got: list[Any] = []
    try:
        for value in iter_event_samples(broken):
            got.append(value)
    except SampleError as exc:
        assert exc.field == "samples"
    # every value yielded before the break is a whole sample of the original; the last one may be a value
    # the break made (a cut object closed early), which Sample.from_wire then judges like any other
    assert got[:-1] == samples[: max(0, len(got) - 1)]
