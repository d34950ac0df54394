"""Which IP addresses each network interface holds, and which interface this server leaves by for a peer.

NCCL and gloo must be told which interface carries their bootstrap and socket traffic
(NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME); the launcher learns it from here.

Addresses come from the kernel over rtnetlink (one RTM_GETADDR dump: every IPv4 and IPv6 address with
its prefix, secondary addresses included; no subprocess, no iproute2 needed). Where netlink is not
available (a restricted sandbox), IPv4 comes from SIOCGIFADDR / SIOCGIFNETMASK per interface (the
primary address only) and IPv6 from /proc/net/if_inet6 under an injectable root.

`route_to(host)` answers which source address and interface the kernel would use to reach `host`: a
UDP socket connected there (connect on a datagram socket only picks the route; nothing is sent) tells
its source address with getsockname(), which is mapped back to the interface that holds it.
Stdlib only, Python 3.9.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct
from typing import Callable, Dict, List, Optional, Tuple

# rtnetlink constants (linux/netlink.h, linux/rtnetlink.h, linux/if_addr.h)
NETLINK_ROUTE = 0
NLMSG_ERROR = 2
NLMSG_DONE = 3
RTM_NEWADDR = 20
RTM_GETADDR = 22
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
IFA_ADDRESS = 1
IFA_LOCAL = 2
IFA_LABEL = 3
IFA_F_DADFAILED = 0x08

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefixlen, flags, scope, index
_RTATTR = struct.Struct("=HH")  # len, type

SIOCGIFADDR = 0x8915
SIOCGIFNETMASK = 0x891B

MAX_DUMP_BYTES = 4 * 1024 * 1024

Addresses = Dict[str, List[str]]  # interface name -> ["10.0.0.5/24", "fe80::1/64", ...]


def _align(length: int) -> int:
    return (length + 3) & ~3


def parse_netlink_dump(data: bytes, names: Dict[int, str]) -> Tuple[Addresses, bool]:
    """Addresses from the RTM_NEWADDR messages of a dump; (addresses, saw NLMSG_DONE).

    `names` maps interface index -> name (socket.if_nameindex()); an index missing from it is named by
    the IPv4 label when there is one, else skipped. Malformed messages end the parse, never raise.
    """
    found: Addresses = {}
    offset = 0
    done = False
    while offset + _NLMSGHDR.size <= len(data):
        length, kind, _flags, _seq, _pid = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size or offset + length > len(data):
            break
        if kind == NLMSG_DONE:
            done = True
            break
        if kind == NLMSG_ERROR:
            raise OSError("rtnetlink answered the address dump with an error")
        if kind == RTM_NEWADDR and length >= _NLMSGHDR.size + _IFADDRMSG.size:
            body = offset + _NLMSGHDR.size
            family, prefixlen, flags, _scope, index = _IFADDRMSG.unpack_from(data, body)
            attrs = _attributes(data, body + _IFADDRMSG.size, offset + length)
            raw = attrs.get(IFA_LOCAL) or attrs.get(IFA_ADDRESS)
            label = attrs.get(IFA_LABEL, b"").split(b"\0", 1)[0].decode("utf-8", "replace")
            name = names.get(index) or label.split(":", 1)[0]
            text = _address_text(family, raw)
            if name and text and not flags & IFA_F_DADFAILED:
                found.setdefault(name, []).append("%s/%d" % (text, prefixlen))
        offset += _align(length)
    return found, done


def _attributes(data: bytes, start: int, end: int) -> Dict[int, bytes]:
    attrs: Dict[int, bytes] = {}
    offset = start
    while offset + _RTATTR.size <= end:
        length, kind = _RTATTR.unpack_from(data, offset)
        if length < _RTATTR.size or offset + length > end:
            break
        attrs.setdefault(kind, data[offset + _RTATTR.size : offset + length])
        offset += _align(length)
    return attrs


def _address_text(family: int, raw: Optional[bytes]) -> Optional[str]:
    if family == socket.AF_INET and raw is not None and len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw)
    if family == socket.AF_INET6 and raw is not None and len(raw) == 16:
        return socket.inet_ntop(socket.AF_INET6, raw)
    return None


def netlink_addresses(timeout_s: float = 2.0) -> Addresses:
    """Every interface's addresses from one rtnetlink dump. Raises OSError where netlink is unavailable."""
    names = {index: name for index, name in socket.if_nameindex()}
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
    try:
        sock.settimeout(timeout_s)
        sock.bind((0, 0))
        request = _NLMSGHDR.pack(
            _NLMSGHDR.size + _IFADDRMSG.size, RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, 1, 0
        ) + _IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        sock.send(request)
        found: Addresses = {}
        received = 0
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                raise OSError("rtnetlink closed the dump early")
            received += len(chunk)
            if received > MAX_DUMP_BYTES:
                raise OSError("rtnetlink address dump larger than %d bytes" % MAX_DUMP_BYTES)
            part, done = parse_netlink_dump(chunk, names)
            for name, addresses in part.items():
                found.setdefault(name, []).extend(addresses)
            if done:
                return found
    finally:
        sock.close()


def parse_if_inet6(text: str) -> Addresses:
    """/proc/net/if_inet6 lines ("<32 hex> <index> <prefixlen> <scope> <flags> <name>", hex fields)."""
    found: Addresses = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 6 or len(fields[0]) != 32:
            continue
        try:
            packed = bytes.fromhex(fields[0])
            prefixlen = int(fields[2], 16)
            flags = int(fields[4], 16)
        except ValueError:
            continue
        if flags & IFA_F_DADFAILED:
            continue
        found.setdefault(fields[5], []).append("%s/%d" % (socket.inet_ntop(socket.AF_INET6, packed), prefixlen))
    return found


def ioctl_ipv4(name: str) -> Optional[str]:
    """The primary IPv4 address/prefix of interface `name` (SIOCGIFADDR + SIOCGIFNETMASK), or None."""
    request = struct.pack("256s", name.encode("utf-8")[:15])
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        address = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, request)[20:24]
        mask = fcntl.ioctl(sock.fileno(), SIOCGIFNETMASK, request)[20:24]
    except OSError:
        return None
    finally:
        sock.close()
    prefixlen = bin(struct.unpack("!I", mask)[0]).count("1")
    return "%s/%d" % (socket.inet_ntop(socket.AF_INET, address), prefixlen)


def fallback_addresses(root: str = "/", names: Optional[List[str]] = None) -> Addresses:
    """IPv4 (primary address per interface, by ioctl) and IPv6 (from <root>/proc/net/if_inet6)."""
    if names is None:
        names = [name for _index, name in socket.if_nameindex()]
    found: Addresses = {}
    for name in names:
        address = ioctl_ipv4(name)
        if address:
            found.setdefault(name, []).append(address)
    try:
        with open(os.path.join(root, "proc", "net", "if_inet6"), encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        text = ""
    for name, addresses in parse_if_inet6(text).items():
        found.setdefault(name, []).extend(addresses)
    return found


def interface_addresses(root: str = "/") -> Addresses:
    """Every interface's addresses with prefix; {} when nothing can be read. Never raises.

    Under another root (a recorded tree) only <root>/proc/net/if_inet6 is read: netlink and ioctl
    answer for the live kernel, not for the tree."""
    if root not in ("/", ""):
        try:
            with open(os.path.join(root, "proc", "net", "if_inet6"), encoding="ascii", errors="replace") as handle:
                return parse_if_inet6(handle.read())
        except OSError:
            return {}
    try:
        return netlink_addresses()
    except (OSError, AttributeError, ValueError):  # AttributeError: no AF_NETLINK off Linux
        pass
    try:
        return fallback_addresses(root)
    except (OSError, ValueError):
        return {}


def interface_of(address: str, addresses: Addresses) -> Optional[str]:
    """The interface that holds `address` (an IP, with or without %scope); None when none does."""
    try:
        wanted = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    for name in sorted(addresses):
        for held in addresses[name]:
            try:
                if ipaddress.ip_interface(held).ip == wanted:
                    return name
            except ValueError:
                continue
    return None


def route_to(host: str, addresses: Optional[Callable[[], Addresses]] = None, port: int = 9) -> Dict[str, Optional[str]]:
    """{"host", "address", "source", "interface", "error"}: how this server would reach `host`.

    `host` may be a name (resolved here, first usable address wins) or an IP literal. Nothing is sent.
    """
    result: Dict[str, Optional[str]] = {
        "host": host,
        "address": None,
        "source": None,
        "interface": None,
        "error": None,
    }
    try:
        candidates = socket.getaddrinfo(host, port, 0, socket.SOCK_DGRAM)
    except (socket.gaierror, UnicodeError) as exc:
        result["error"] = "cannot resolve %s: %s" % (host, getattr(exc, "strerror", None) or exc)
        return result
    last_error = "no usable address"
    for family, kind, proto, _name, sockaddr in candidates:
        if family not in (socket.AF_INET, socket.AF_INET6) or not isinstance(sockaddr[0], str):
            continue
        probe = socket.socket(family, kind, proto)
        try:
            probe.connect(sockaddr)
            local = probe.getsockname()
        except OSError as exc:
            last_error = "%s: %s" % (sockaddr[0], exc.strerror or exc)
            continue
        finally:
            probe.close()
        source = local[0]
        result["address"] = sockaddr[0]
        result["source"] = source
        if family == socket.AF_INET6 and len(local) >= 4 and local[3]:
            try:  # a link-local source: its scope id is the interface
                result["interface"] = socket.if_indextoname(local[3])
                return result
            except OSError:
                pass
        result["interface"] = interface_of(source, (addresses or interface_addresses)())
        if result["interface"] is None:
            result["error"] = "no interface holds the source address %s" % source
        return result
    result["error"] = last_error
    return result
