"""The agent's hello says how its daemon runs (`daemon`: where its Prometheus exporter listens, or why it does
not): a running daemon keeps its own settings, so the app compares them with what it asked attach for.
Added compatibly within protocol 1: a hello without it (an older agent, or the app's own) decodes to None, and
a malformed one is refused naming the field."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck_agent import protocol
from meshdeck_agent.protocol import DaemonSettings, Hello, ProtocolError


def _decode(body: dict[str, object]) -> Hello:
    message = protocol.decode(json.dumps({"hello": body}))
    assert isinstance(message, Hello)
    return message


@pytest.mark.parametrize(
    "daemon",
    [
        DaemonSettings(prometheus="127.0.0.1:9400"),
        DaemonSettings(prometheus="[::1]:9400"),
        DaemonSettings(),
        DaemonSettings(prometheus_error="cannot listen on 127.0.0.1:9400: Address already in use"),
    ],
)
def test_the_daemon_settings_round_trip_through_the_hello(daemon: DaemonSettings) -> None:
    line = protocol.encode(protocol.hello("0.9.0", epoch="ab12", daemon=daemon))
    assert protocol.decode(line) == Hello(protocol=1, agent="0.9.0", epoch="ab12", daemon=daemon)


def test_an_exporter_that_is_off_is_said_with_null_not_left_out() -> None:
    assert protocol.hello("0.9.0", daemon=DaemonSettings())["hello"]["daemon"] == {"prometheus": None}


def test_a_hello_without_daemon_settings_is_an_older_agent_or_a_client() -> None:
    assert _decode({"protocol": 1, "agent": "0.8.0"}).daemon is None
    assert "daemon" not in protocol.hello("client")["hello"]


def test_keys_a_newer_agent_adds_to_the_daemon_settings_are_ignored() -> None:
    hello = _decode({"protocol": 1, "agent": "0.9.0", "daemon": {"prometheus": None, "tls": True}})
    assert hello.daemon == DaemonSettings()


@pytest.mark.parametrize(
    ("daemon", "field"),
    [
        ([], "hello.daemon"),
        ("127.0.0.1:9400", "hello.daemon"),
        ({"prometheus": 9400}, "hello.daemon.prometheus"),
        ({"prometheus": ""}, "hello.daemon.prometheus"),
        ({"prometheus": "127.0.0.1:9400\x1b[2J"}, "hello.daemon.prometheus"),
        ({"prometheus": "a b:9400"}, "hello.daemon.prometheus"),
        ({"prometheus": "h" * 400 + ":9400"}, "hello.daemon.prometheus"),
        ({"prometheus": None, "prometheus_error": 98}, "hello.daemon.prometheus_error"),
        ({"prometheus": None, "prometheus_error": "e" * 3000}, "hello.daemon.prometheus_error"),
    ],
)
def test_malformed_daemon_settings_are_refused_naming_the_field(daemon: object, field: str) -> None:
    with pytest.raises(ProtocolError) as info:
        _decode({"protocol": 1, "agent": "0.9.0", "daemon": daemon})
    assert info.value.code == protocol.BAD_REQUEST and info.value.message.startswith(field + " ")


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3),
    max_leaves=8,
)


@settings(deadline=None, max_examples=300)
@given(
    daemon=st.one_of(
        _JSON, st.fixed_dictionaries({}, optional={"prometheus": _JSON, "prometheus_error": _JSON, "x": _JSON})
    )
)
def test_any_daemon_value_is_typed_settings_or_a_protocol_error(daemon: object) -> None:
    try:
        hello = _decode({"protocol": 1, "agent": "0.9.0", "daemon": daemon})
    except ProtocolError as exc:
        assert exc.code == protocol.BAD_REQUEST and exc.message.startswith("hello.daemon")
        return
    assert hello.daemon is not None
    assert hello.daemon.prometheus is None or (
        isinstance(hello.daemon.prometheus, str) and hello.daemon.prometheus.isprintable()
    )
    assert hello.daemon.prometheus_error is None or isinstance(hello.daemon.prometheus_error, str)
