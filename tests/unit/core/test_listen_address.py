"""HOST:PORT as the operator types it for an agent's Prometheus exporter: an IP address (IPv6 in brackets) or a
host name, a colon, a port from 1 to 65535 — and nothing else, refused naming the field."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck.core.errors import InputError
from meshdeck.core.host_address import ListenAddress, check_host_address, parse_listen_address


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("127.0.0.1:9400", "127.0.0.1", 9400),
        ("0.0.0.0:1", "0.0.0.0", 1),
        ("gpu-a.lab.example:65535", "gpu-a.lab.example", 65535),
        ("localhost:9400", "localhost", 9400),
        ("[::1]:9400", "::1", 9400),
        ("[fe80::1%eth0]:9400", "fe80::1%eth0", 9400),
    ],
)
def test_an_address_and_a_port_are_read_and_written_back_as_typed(text: str, host: str, port: int) -> None:
    address = parse_listen_address(text, "host.prometheus")
    assert address == ListenAddress(host, port)
    assert str(address) == text


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (":9400", "HOST:PORT"),  # the agent's own shorthand for 127.0.0.1: the operator says which address
        ("9400", "HOST:PORT"),
        ("127.0.0.1", "HOST:PORT"),
        ("127.0.0.1:", "port"),
        ("127.0.0.1:0", "port"),  # the agent would pick any free port: Prometheus could not know it
        ("127.0.0.1:65536", "port"),
        ("127.0.0.1:09400", "port"),
        ("127.0.0.1:+9400", "port"),
        ("127.0.0.1:9400 ", "port"),
        ("127.0.0.1:http", "port"),
        ("::1:9400", "brackets"),
        ("[10.0.0.1]:9400", "brackets"),
        ("[gpu-a]:9400", "brackets"),
        ("[::1:9400", "brackets"),
        ("http://gpu-a:9400", "host"),
        ("gpu a:9400", "host"),
        ("-oProxyCommand=x:9400", "host"),
        ("gpu-a;rm -rf ~:9400", "host"),
        ("gpu-a\n:9400", "host"),
        ("", "HOST:PORT"),
    ],
)
def test_anything_else_is_refused_naming_the_field_and_the_form(text: str, problem: str) -> None:
    with pytest.raises(InputError) as info:
        parse_listen_address(text, "host gpu-a: prometheus")
    assert info.value.field == "host gpu-a: prometheus"
    assert problem in info.value.problem and "e.g. 127.0.0.1:9400" in info.value.problem


def test_a_value_that_is_not_text_is_refused_by_name() -> None:
    with pytest.raises(InputError, match=r"host\.prometheus"):
        parse_listen_address(9400, "host.prometheus")  # type: ignore[arg-type]


def test_a_host_address_is_an_ip_or_a_dns_name() -> None:
    assert check_host_address("10.0.0.1", "f") == "10.0.0.1"
    assert check_host_address("gpu-a.example.", "f") == "gpu-a.example."
    with pytest.raises(InputError, match="f: 'a b' is neither an IP address nor a host name"):
        check_host_address("a b", "f")
    with pytest.raises(InputError, match="neither"):
        check_host_address("gpu-a\n", "f")  # `$` in a pattern matches before a trailing newline: matched whole


_LABEL = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9-]{0,20}", fullmatch=True)
_HOSTS = st.one_of(
    st.lists(_LABEL, min_size=1, max_size=4).map(".".join),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(str),
)


@settings(deadline=None, max_examples=300)
@given(host=_HOSTS, port=st.integers(1, 65535))
def test_every_valid_address_round_trips_through_its_text(host: str, port: int) -> None:
    address = ListenAddress(host, port)
    assert parse_listen_address(str(address), "f") == address


@settings(deadline=None, max_examples=400)
@given(text=st.text(max_size=40))
def test_any_text_is_either_an_address_written_back_unchanged_or_an_input_error(text: str) -> None:
    try:
        address = parse_listen_address(text, "f")
    except InputError as exc:
        assert exc.field == "f"
        return
    assert str(address) == text and 1 <= address.port <= 65535
    assert text.isprintable() and " " not in text
    if ":" in address.host:
        ipaddress.ip_address(address.host)
