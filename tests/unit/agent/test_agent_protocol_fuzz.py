"""Property tests of the agent's side of the wire: whatever a peer sends, `decode` gives a Message or a
ProtocolError, `validate_params` passes only params a handler can use, and `WorkerSpec.from_wire` builds
a spec whose id is safe on disk, or names the bad field."""

from __future__ import annotations

import math
import sys

import hostile_peer
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from meshdeck_agent import protocol
from meshdeck_agent.paths import child_path

FUZZ = settings(deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow])

MESSAGE_TYPES = (protocol.Hello, protocol.Request, protocol.Response, protocol.ErrorReply, protocol.Event)
json_values = hostile_peer.json_values()
wire_objects = hostile_peer.wire_objects()
_line = hostile_peer.line


def _decoded(line: bytes) -> protocol.Message | protocol.ProtocolError:
    try:
        message = protocol.decode(line)
    except protocol.ProtocolError as exc:
        assert exc.code in protocol.ERROR_CODES
        return exc
    assert isinstance(message, MESSAGE_TYPES)
    return message


@FUZZ
@given(st.binary(max_size=300))
def test_decode_of_arbitrary_bytes_is_a_message_or_a_protocol_error(data):
    _decoded(data)


@FUZZ
@given(st.one_of(json_values, wire_objects))
def test_decode_of_arbitrary_json_is_a_message_or_a_protocol_error(value):
    _decoded(_line(value))


def test_a_number_that_overflows_to_infinity_is_refused_by_the_params_check():
    message = protocol.decode(b'{"id": 3, "method": "workers.stop", "params": {"id": "w", "grace_s": 1e999}}')
    with pytest.raises(protocol.ProtocolError) as raised:
        protocol.validate_params(message)
    assert raised.value.code == protocol.BAD_PARAMS and "'grace_s' must be a finite number" in raised.value.message


def _params_for(method: str) -> st.SearchStrategy[dict]:
    names = [*protocol.METHOD_PARAMS[method], "verbose", ""]
    return st.dictionaries(st.sampled_from(names), json_values, max_size=4)


request_objects = st.sampled_from(sorted(protocol.METHOD_PARAMS)).flatmap(
    lambda method: st.fixed_dictionaries(
        {"id": st.integers(0, 2**31), "method": st.just(method), "params": _params_for(method)}
    )
)


def _finite_numbers(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite_numbers(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite_numbers(v) for v in value)
    return True


@FUZZ
@given(st.one_of(wire_objects, request_objects))
def test_a_decoded_message_never_holds_nan_or_infinity(value):
    """JSON has no NaN/Infinity literals (Python's json reads them): a grace_s of Infinity waited forever
    and an interval_s of Infinity ended a session's writer thread. (1e999 also reads as infinity; the
    params check refuses it, below.)"""
    message = _decoded(_line(value))
    if not isinstance(message, protocol.ProtocolError):
        assert _finite_numbers(message.__dict__), message


def test_an_integer_too_long_to_convert_quickly_is_a_parse_error_even_where_python_has_no_limit():
    """Python before 3.9.14 has no int digit limit and converts huge integers in quadratic time, holding
    the GIL (the agent runs on whatever Python the server has)."""
    if not hasattr(sys, "set_int_max_str_digits"):
        pytest.skip("this Python has no int digit limit to lift")
    previous = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        with pytest.raises(protocol.ProtocolError) as raised:
            protocol.decode(b'{"id": 1, "method": "agent.time", "params": {"x": ' + b"7" * 5000 + b"}}")
    finally:
        sys.set_int_max_str_digits(previous)
    assert raised.value.code == protocol.PARSE_ERROR


@FUZZ
@given(request_objects)
def test_validated_params_have_the_declared_types_finite_values_and_bounds(value):
    message = _decoded(_line(value))
    if not isinstance(message, protocol.Request):
        return
    try:
        params = protocol.validate_params(message)
    except protocol.ProtocolError as exc:
        assert exc.code in (protocol.BAD_PARAMS, protocol.UNKNOWN_METHOD) and exc.request_id == message.id
        assert len(exc.message) <= 600, "an error message echoes the peer's value whole"
        return
    schema = protocol.METHOD_PARAMS[message.method]
    assert set(params) <= set(schema)
    for name, param in schema.items():
        if name not in params:
            assert not param.required
            continue
        value = params[name]
        assert isinstance(value, param.types) and not isinstance(value, bool)
        if isinstance(value, (int, float)):
            assert value >= 0 and (isinstance(value, int) or math.isfinite(value))
            assert param.maximum is None or value <= param.maximum


@FUZZ
@given(
    st.one_of(
        json_values, st.dictionaries(st.sampled_from(sorted(protocol.WorkerSpec.__dataclass_fields__)), json_values)
    )
)
def test_worker_spec_from_wire_builds_a_safe_spec_or_names_the_field(value):
    try:
        spec = protocol.WorkerSpec.from_wire(value)
    except protocol.ProtocolError as exc:
        assert exc.code == protocol.BAD_PARAMS and exc.message.startswith("spec.")
        assert len(exc.message) <= 600
        return
    if spec.id is not None:
        assert child_path("/state/workers", spec.id) == "/state/workers/" + spec.id
    assert protocol.WorkerSpec.from_wire(spec.to_wire()) == spec


worker_ids = st.one_of(
    st.text(max_size=70),
    st.text(alphabet="./-_a0", max_size=6),
    st.sampled_from([".", "..", "./", "../x", ".x", "x/..", "x\x00", "\u0663", "a" * 64, "a" * 65]),
)


@FUZZ
@given(worker_ids)
def test_a_worker_id_is_accepted_only_when_it_is_one_plain_path_component(worker_id):
    try:
        spec = protocol.WorkerSpec.from_wire({"argv": ["true"], "id": worker_id})
    except protocol.ProtocolError as exc:
        assert exc.message.startswith("spec.id")
        return
    assert spec.id == worker_id and worker_id not in (".", "..") and not worker_id.startswith(".")
    assert child_path("/state/workers", worker_id).startswith("/state/workers/")


@pytest.mark.parametrize(
    "line",
    [
        b'{"hello": {"protocol": 1, "agent": "' + b"9" * 100_000 + b'"}}',
        b'{"id": 1, "method": "' + b"m" * 100_000 + b'"}',
        b'{"id": "' + b"\\u0001" * 100_000 + b'", "method": "agent.time"}',
        b'{"id": 1, "method": "agent.time", "params": {"' + b"p" * 100_000 + b'": 1}}',
        b'{"hello": {"protocol": ' + b"9" * 4000 + b', "agent": "x"}}',
        b'{"event": "' + b"e" * 100_000 + b'"}',
    ],
    ids=["hello-agent", "method", "id", "param-name", "hello-protocol", "event"],
)
def test_a_huge_value_from_a_peer_is_never_echoed_whole(line):
    try:
        message = protocol.decode(line)
        if isinstance(message, protocol.Hello):
            protocol.check_hello(message)
        elif isinstance(message, protocol.Request):
            protocol.validate_params(message)
    except (protocol.ProtocolError, protocol.VersionMismatch) as exc:
        assert len(str(exc)) <= 600
    else:
        pytest.fail(f"{type(message).__name__} with a 100 KB value was accepted")


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://host/metrics", "127.0.0.1:8000/metrics"])
def test_a_worker_metrics_url_is_http_or_https(url):
    with pytest.raises(protocol.ProtocolError, match=r"spec\.metrics_url: must be an http"):
        protocol.WorkerSpec.from_wire({"argv": ["vllm"], "metrics_url": url})
