"""Addresses an operator types: a host (an IP address or a DNS name) and HOST:PORT for something to listen on.

Both end up in an argv on a server (a launch's `--master-addr`, an agent's `--prometheus HOST:PORT`), so
they are checked where they are typed and refused by field name: no spaces, quotes, newlines or a
leading '-'. A listen address is exactly HOST:PORT —

    127.0.0.1:9400    gpu-a.lab.example:9400    [::1]:9400   (IPv6 in brackets)

and nothing else: no scheme or path, no empty host (the agent reads ':9400' as 127.0.0.1; the operator
says which address instead), port 1-65535 in plain digits (port 0 would make the agent pick one that
Prometheus could not know). `str(address)` writes it back as it was typed.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from meshdeck.core.errors import InputError

# matched whole (fullmatch): `$` alone also matches before a trailing newline, which let "gpu-a\n" through
_HOSTNAME = re.compile(r"(?=.{1,253}\Z)[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*\.?")
_PORT = re.compile(r"[1-9][0-9]{0,4}")
_FORM = "HOST:PORT — an IP address (IPv6 in brackets) or a host name, ':' and a port 1-65535, e.g. 127.0.0.1:9400"


def is_ip_address(text: str) -> bool:
    """An IPv4 or IPv6 literal (Python's ipaddress reads it)."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def check_host_address(address: str, field: str) -> str:
    """An IP literal or a DNS name; anything else (spaces, quotes, newlines, '-x') is refused by name."""
    if is_ip_address(address) or _HOSTNAME.fullmatch(address):
        return address
    raise InputError(field, f"{address!r} is neither an IP address nor a host name")


@dataclass(frozen=True)
class ListenAddress:
    """Where a server listens: `host` as typed (an IPv6 address without its brackets) and a port 1-65535."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_listen_address(text: str, field: str) -> ListenAddress:
    """HOST:PORT (see the module doc) or InputError naming `field`, what is wrong and the form expected."""
    if not isinstance(text, str):
        raise InputError(field, f"expected {_FORM}; got {type(text).__name__}")
    host, colon, port = text.rpartition(":")
    if not colon or not host:
        raise InputError(field, f"{text!r}: expected {_FORM}")
    if not _PORT.fullmatch(port) or int(port) > 65535:
        raise InputError(field, f"{text!r}: the port must be 1-65535 in plain digits; expected {_FORM}")
    if host.startswith("[") or host.endswith("]") or ":" in host:
        inner = host[1:-1] if host.startswith("[") and host.endswith("]") else None
        if inner is None or ":" not in inner or not is_ip_address(inner):
            raise InputError(field, f"{text!r}: an IPv6 address goes in brackets, and only one; expected {_FORM}")
        return ListenAddress(inner, int(port))
    if not (is_ip_address(host) or _HOSTNAME.fullmatch(host)):
        raise InputError(field, f"{text!r}: the host is neither an IP address nor a host name; expected {_FORM}")
    return ListenAddress(host, int(port))
