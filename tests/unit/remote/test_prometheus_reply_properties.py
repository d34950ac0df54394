"""Whatever a Prometheus server sends, its reply decodes to typed series (or label sets) or to one
PrometheusError line — never another exception: wrong types, huge numbers, NaN strings, deep nesting,
huge label values, control characters, bytes that are no JSON at all."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from meshdeck.remote.prometheus import (
    PrometheusError,
    PrometheusSeries,
    ReplyLimits,
    decode_label_sets,
    decode_matrix,
)

T = TypeVar("T")
URL = "http://prometheus.example:9090/api/v1/query_range"
LIMITS = ReplyLimits(max_points=2_000, max_series=50)

# Text a hostile server writes: control characters, escapes, bidi overrides, lone surrogates, NaN spellings.
_TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["NaN", "+Inf", "-Inf", "Infinity", "nan", "1e999", "-0", "0x10", "1_0", " 7 ", "", "\x1b[2J"]),
    st.text(alphabet='\x00\x07\x08\x1b\n\r\t\x85\u202e\ud800[]{}",', max_size=12),
    st.integers(1_000, 200_000).map(lambda n: "v" * n),  # a huge label value
)
_NUMBER = st.one_of(
    st.integers(),
    st.integers(min_value=10**300, max_value=10**1000),  # past the float range
    st.floats(allow_nan=True, allow_infinity=True),  # json.dumps writes NaN / Infinity, as a hostile server may
)
_SCALAR = st.one_of(st.none(), st.booleans(), _NUMBER, _TEXT)
_JSON = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_TEXT, inner, max_size=4)),
    max_leaves=20,
)
_POINT = st.one_of(st.tuples(_NUMBER, _TEXT).map(list), _JSON)
_SERIES = st.fixed_dictionaries(
    {"metric": st.one_of(st.dictionaries(_TEXT, _TEXT, max_size=4), _JSON), "values": st.lists(_POINT, max_size=8)}
)
_SERIES_OR_NOT = st.one_of(_SERIES, _JSON)


def _envelope(data: object, status: object = "success") -> dict[str, object]:
    return {"status": status, "data": data}


_MATRIX = st.builds(
    lambda result, kind, status: _envelope({"resultType": kind, "result": result}, status),
    st.one_of(st.lists(_SERIES_OR_NOT, max_size=5), _JSON),
    st.one_of(st.just("matrix"), _JSON),
    st.one_of(st.just("success"), _JSON),
)
_LABEL_SETS = st.builds(_envelope, st.one_of(st.lists(st.dictionaries(_TEXT, _TEXT, max_size=4), max_size=5), _JSON))


def _encoded(value: object, depth: int) -> bytes:
    text = json.dumps(value)  # NaN and Infinity as Python writes them: Prometheus never does, a hostile server may
    return ("[" * depth + text + "]" * depth).encode() if depth else text.encode()


_DEPTH = st.one_of(st.just(0), st.just(0), st.integers(1, 50), st.just(100_000))
_REPLIES = st.one_of(
    st.builds(_encoded, st.one_of(_MATRIX, _LABEL_SETS, _JSON), _DEPTH),
    st.binary(max_size=200),
    st.integers(1, 300_000).map(lambda n: b"[" * n),  # nested past the recursion limit, never closed
    st.integers(1, 100_000).map(lambda n: b'{"status":"success","data":' + b"[" * n + b"]" * n + b"}"),
)


def _decoded(decode: Callable[[bytes, str, ReplyLimits, str], T], raw: bytes) -> T | None:
    """What `decode` gives for `raw`, or None for a PrometheusError that is one escaped line naming the URL."""
    try:
        return decode(raw, URL, LIMITS, "query_range 'up'")
    except PrometheusError as error:
        message = str(error)
        assert message.startswith(f"Prometheus at {URL}: ")
        assert message.isprintable() and len(message) < 2_000  # one escaped line, whatever the server wrote
        return None


SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(SETTINGS, max_examples=600)
@given(raw=_REPLIES)
def test_any_reply_decodes_to_typed_series_or_to_a_clear_error(raw: bytes):
    series = _decoded(decode_matrix, raw)
    if series is None:
        return
    assert isinstance(series, list) and len(series) <= LIMITS.max_series
    assert sum(len(s.ts) for s in series) <= LIMITS.max_points
    for one in series:
        assert isinstance(one, PrometheusSeries)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in one.labels.items())
        assert len(one.ts) == len(one.values)
        assert all(isinstance(t, float) and math.isfinite(t) for t in one.ts)
        assert all(isinstance(v, float) and math.isfinite(v) for v in one.values)
        assert all(a < b for a, b in zip(one.ts, one.ts[1:], strict=False))


@settings(SETTINGS, max_examples=300)
@given(raw=_REPLIES)
def test_any_reply_decodes_to_label_sets_or_to_a_clear_error(raw: bytes):
    label_sets = _decoded(decode_label_sets, raw)
    if label_sets is None:
        return
    assert isinstance(label_sets, list) and len(label_sets) <= LIMITS.max_series
    assert all(isinstance(k, str) and isinstance(v, str) for labels in label_sets for k, v in labels.items())
