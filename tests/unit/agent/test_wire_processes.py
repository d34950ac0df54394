"""The `processes` record (meshdeck_agent.wire_processes): what an agent sends round-trips exactly, and
anything else — arbitrary JSON, or a real answer with one value broken, removed or added — decodes to a
ProcessListing or raises ProcessListingError naming the field, never another exception."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hostile_peer import json_locations, mutated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from meshdeck_agent import protocol
from meshdeck_agent.protocol import GpuProcesses, GpuProcessInfo, ProcessListing, ProcessListingError, ProcessWorker
from meshdeck_agent.wire_processes import MAX_COMMAND_CHARS, MAX_PROCESSES, MAX_PROCESSES_PER_GPU, PROCESS_KINDS

TOP_LEVEL = {"ts", "simulated", "omitted", "reason", "gpus", "processes"}
NOW = 1_764_480_000.0
REAL = ProcessListing(
    ts=NOW,
    simulated=False,
    gpus=(
        GpuProcesses(0, "GPU-0", (
            GpuProcessInfo(4242, "compute", 70 << 30, 1000, "alice", "vllm serve deepseek-ai/DeepSeek-V3.2", False,
                           ProcessWorker("ds32-0101.vllm-node0", "meshdeck:ds32-0101:0:vllm-node0")),
            GpuProcessInfo(5151, "graphics", None, None, None, None),
        )),
        GpuProcesses(1, None, ()),
    ),
)  # fmt: skip


def test_a_listing_round_trips_through_the_wire_exactly():
    line = protocol.encode(protocol.response(1, REAL.to_wire()))
    assert ProcessListing.from_wire(json.loads(line)["result"]) == REAL


def test_the_method_is_part_of_the_protocol_with_no_params():
    assert "processes" in protocol.METHODS and protocol.METHOD_PARAMS["processes"] == {}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda w: w.update(ts="now"), "ts"),
        (lambda w: w.update(simulated=1), "simulated"),
        (lambda w: w["gpus"][0]["processes"][0].update(pid=-1), "gpus[0].processes[0].pid"),
        (lambda w: w["gpus"][0]["processes"][0].update(pid=True), "gpus[0].processes[0].pid"),
        (lambda w: w["gpus"][0]["processes"][0].update(kind="cuda"), "gpus[0].processes[0].kind"),
        (lambda w: w["gpus"][0]["processes"][0].update(used_memory_bytes=2**64 - 1),
         "gpus[0].processes[0].used_memory_bytes"),
        (lambda w: w["gpus"][0]["processes"][0].update(command="x" * (MAX_COMMAND_CHARS + 1)),
         "gpus[0].processes[0].command"),
        (lambda w: w["gpus"][0]["processes"][0].update(user=["root"]), "gpus[0].processes[0].user"),
        (lambda w: w["gpus"][0]["processes"][0]["worker"].update(id=""), "gpus[0].processes[0].worker.id"),
        (lambda w: w["gpus"][0]["processes"].append(dict(w["gpus"][0]["processes"][0])), "gpus[0].processes"),
        (lambda w: w["gpus"][1].update(index=0), "gpus"),
        (lambda w: w["gpus"][1].update(processes=[{"pid": i, "kind": "compute"} for i in range(MAX_PROCESSES_PER_GPU + 1)]),
         "gpus[1].processes"),
        (lambda w: w.update(gpus=[{"index": g, "processes": [{"pid": i, "kind": "compute"} for i in range(1000)]}
                                  for g in range(MAX_PROCESSES // 1000 + 1)]), "gpus"),
    ],
)  # fmt: skip
def test_a_wrong_shaped_answer_names_the_field(change, field):
    wire = json.loads(json.dumps(REAL.to_wire()))
    change(wire)
    with pytest.raises(ProcessListingError) as caught:
        ProcessListing.from_wire(wire)
    assert caught.value.field == field


def test_an_answer_with_unknown_keys_from_a_newer_agent_still_decodes():
    wire = REAL.to_wire()
    wire["gpu_count"] = 2
    wire["gpus"][0]["processes"][0]["cgroup"] = "/system.slice/vllm.service"
    assert ProcessListing.from_wire(wire) == REAL


# -- hypothesis -----------------------------------------------------------------------------------

TEXT = st.one_of(
    st.text(max_size=12),
    st.text(st.characters(exclude_categories=()), max_size=6),  # surrogates and control characters too
    st.sampled_from([*sorted(PROCESS_KINDS), "pid", "kind", "worker", "id", "name", "GPU-0", "\x1b[2J"]),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([2**31, 2**32, 2**50 + 1, 2**63, 2**64 - 1, 2**1024, 10**400]),  # past every bound
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(TEXT, inner, max_size=5)),
    max_leaves=25,
)
EXTREMES = st.sampled_from(
    [10**400, -1, 2**63, 2**64 - 1, math.nan, math.inf, True, 1.5, "", "\x1b[2J", "\ud800", "x" * 2000, [], {}, None]
)


def _check(value: Any) -> None:
    """from_wire gives a listing that round-trips, or a ProcessListingError with a printable message."""
    try:
        decoded = ProcessListing.from_wire(value)
    except ProcessListingError as exc:
        assert exc.field.split(".")[0].split("[")[0] in TOP_LEVEL, exc.field
        assert str(exc).isprintable(), str(exc)  # what the agent sent is shown escaped
        return
    wire = decoded.to_wire()
    line = protocol.encode(protocol.response(1, wire))
    assert ProcessListing.from_wire(json.loads(line)["result"]) == decoded
    for gpu in decoded.gpus:
        for process in gpu.processes:
            assert process.kind in PROCESS_KINDS and 0 <= process.pid <= 2**31
            assert process.used_memory_bytes is None or 0 <= process.used_memory_bytes <= 2**50
            assert process.command is None or len(process.command) <= MAX_COMMAND_CHARS


@settings(max_examples=400, deadline=None)
@given(JSON)
def test_arbitrary_json_is_a_listing_or_a_listing_error(value: Any) -> None:
    _check(value)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_real_answer_with_one_value_broken_is_a_listing_or_a_listing_error(data) -> None:
    wire = REAL.to_wire()
    path = data.draw(st.sampled_from(json_locations(wire)))
    action = data.draw(st.sampled_from(["replace", "replace", "remove", "add"]))
    _check(mutated(wire, path, action, data.draw(EXTREMES | JSON)))
