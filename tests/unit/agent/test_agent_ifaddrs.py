"""Interface addresses (rtnetlink dump, /proc/net/if_inet6, ioctl) and the route to a peer, on recorded
kernel answers, fabricated messages in the kernel's format, and this machine's own loopback."""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
from pathlib import Path

import pytest
from agent_sysfs_tree import ib_port, net_interface, pci_device
from meshdeck_agent import ifaddrs
from meshdeck_agent.checks import check_route
from meshdeck_agent.net import NetReader
from meshdeck_agent.protocol import ProtocolError

FAKES = Path(__file__).resolve().parents[2] / "fakes"


def _recorded_dump() -> tuple[bytes, bytes, dict[int, str]]:
    recorded = json.loads((FAKES / "netlink_getaddr_dump.json").read_text())
    first, last = (bytes.fromhex(chunk) for chunk in recorded["recv_chunks_hex"])
    return first, last, {int(k): v for k, v in recorded["if_nameindex"].items()}


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * ((-length) % 4)


def _newaddr(family: int, prefixlen: int, index: int, address: str, label: str = "", flags: int = 0) -> bytes:
    """One RTM_NEWADDR message laid out as the kernel sends it (nlmsghdr, ifaddrmsg, rtattrs)."""
    raw = socket.inet_pton(family, address)
    attrs = _attr(ifaddrs.IFA_ADDRESS, raw) + _attr(ifaddrs.IFA_LOCAL, raw)
    if label:
        attrs += _attr(ifaddrs.IFA_LABEL, label.encode() + b"\0")
    body = struct.pack("=BBBBI", family, prefixlen, flags, 0, index) + attrs
    return struct.pack("=IHHII", 16 + len(body), ifaddrs.RTM_NEWADDR, 2, 1, 0) + body


DONE = struct.pack("=IHHII", 20, ifaddrs.NLMSG_DONE, 2, 1, 0) + b"\0\0\0\0"


def test_the_recorded_netlink_dump_gives_every_address_with_its_prefix():
    first, last, names = _recorded_dump()
    found, done = ifaddrs.parse_netlink_dump(first, names)
    assert not done and ifaddrs.parse_netlink_dump(last, names) == ({}, True)
    assert found == {"lo": ["127.0.0.1/8", "::1/128"], "eth0": ["192.0.2.2/24", "fd00::2/64", "fe80::fc:ff:fe00:1/64"]}


def test_secondary_addresses_labels_and_failed_duplicates_in_a_fabricated_dump():
    dump = (
        _newaddr(socket.AF_INET, 24, 5, "10.0.0.5", "bond0")
        + _newaddr(socket.AF_INET, 16, 5, "172.16.3.9", "bond0:1")  # a secondary, labelled alias
        + _newaddr(socket.AF_INET, 8, 9, "10.9.9.9", "ib0")  # index unknown to if_nameindex: named by label
        + _newaddr(socket.AF_INET6, 64, 5, "fd00::5", flags=ifaddrs.IFA_F_DADFAILED)  # unusable
        + _newaddr(socket.AF_INET6, 64, 7, "fd00::7")  # no label and an unknown index: skipped
        + DONE
    )
    found, done = ifaddrs.parse_netlink_dump(dump, {5: "bond0"})
    assert done and found == {"bond0": ["10.0.0.5/24", "172.16.3.9/16"], "ib0": ["10.9.9.9/8"]}


def test_a_truncated_dump_ends_the_parse_without_raising():
    dump = _newaddr(socket.AF_INET, 24, 1, "10.0.0.1", "eth0")
    assert ifaddrs.parse_netlink_dump(dump[:-6], {1: "eth0"}) == ({}, False)


def test_proc_if_inet6_lines_in_the_kernel_format():
    text = (
        "fd000000000000000000000000000002 04 40 00 82     eth0\n"
        "00000000000000000000000000000001 01 80 10 80       lo\n"
        "fe8000000000000000fc00fffe000001 04 40 20 80     eth0\n"
        "fe800000000000000000000000000009 05 40 20 c8     ens9\n"  # flags 0x08: duplicate address detected
        "garbage\n"
    )
    assert ifaddrs.parse_if_inet6(text) == {"eth0": ["fd00::2/64", "fe80::fc:ff:fe00:1/64"], "lo": ["::1/128"]}


def test_live_netlink_agrees_with_ip_addr():
    if shutil.which("ip") is None:
        pytest.skip("iproute2's `ip` is not installed here")
    shown = json.loads(subprocess.run(["ip", "-j", "addr"], capture_output=True, check=True).stdout)
    expected = {
        link["ifname"]: sorted(f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", []) if "local" in a)
        for link in shown
    }
    found = ifaddrs.netlink_addresses()
    assert {name: sorted(addresses) for name, addresses in found.items()} == {k: v for k, v in expected.items() if v}


def test_the_fallback_reads_loopback_by_ioctl_and_ipv6_from_proc():
    assert ifaddrs.ioctl_ipv4("lo") == "127.0.0.1/8"
    assert ifaddrs.ioctl_ipv4("no-such-if0") is None
    assert "127.0.0.1/8" in ifaddrs.fallback_addresses(names=["lo"])["lo"]


def test_addresses_under_a_recorded_root_come_from_its_proc_only(tmp_path):
    (tmp_path / "proc" / "net").mkdir(parents=True)
    (tmp_path / "proc" / "net" / "if_inet6").write_text("fd000000000000000000000000000002 04 40 00 82     eth7\n")
    assert ifaddrs.interface_addresses(str(tmp_path)) == {"eth7": ["fd00::2/64"]}
    assert ifaddrs.interface_addresses(str(tmp_path / "missing")) == {}


def test_the_route_to_loopback_leaves_by_lo():
    route = ifaddrs.route_to("127.0.0.1")
    assert route == {
        "host": "127.0.0.1",
        "address": "127.0.0.1",
        "source": "127.0.0.1",
        "interface": "lo",
        "error": None,
    }


def test_the_route_maps_the_source_address_to_the_interface_that_holds_it():
    held = {"lo": ["127.0.0.1/8"], "bond0": ["10.0.0.5/24", "127.0.0.9/32"]}
    assert ifaddrs.interface_of("127.0.0.9", held) == "bond0"
    assert ifaddrs.interface_of("fe80::1%eth0", {"eth0": ["fe80::1/64"]}) == "eth0"
    assert ifaddrs.interface_of("10.1.1.1", held) is None
    # the interface is the one holding the source address (here a fabricated table), not a guess by subnet
    route = ifaddrs.route_to("127.0.0.1", addresses=lambda: {"lo": [], "dummy0": ["127.0.0.1/32"]})
    assert route["source"] == "127.0.0.1" and route["interface"] == "dummy0"
    orphan = ifaddrs.route_to("127.0.0.1", addresses=lambda: {})
    assert orphan["interface"] is None and "no interface holds the source address 127.0.0.1" in orphan["error"]


def test_an_unresolvable_head_is_an_error_in_the_answer_not_an_exception():
    route = ifaddrs.route_to("no-such-host.invalid")
    assert (
        route["interface"] is None
        and route["source"] is None
        and "cannot resolve no-such-host.invalid" in route["error"]
    )


@pytest.mark.parametrize("host", ["", "a b", "-oProxyCommand=x", "x" * 254, "ho\x00st"])
def test_checks_route_refuses_what_is_not_a_host(host):
    with pytest.raises(ProtocolError) as refused:
        check_route(host)
    assert refused.value.code == "bad_params" and "'host'" in refused.value.message


def test_nic_inventory_carries_addresses_and_each_ib_port_its_netdev(tmp_path):
    nic = pci_device(tmp_path, ["pci0000:00", "0000:00:03.0", "0000:03:00.0"], 0)
    net_interface(tmp_path, "ens1f0", nic)
    roce = pci_device(tmp_path, ["pci0000:17", "0000:17:01.0", "0000:19:00.0"], 0)
    ib_port(tmp_path, "mlx5_0", roce, layer="Ethernet")
    net_interface(tmp_path, "ens2f0np0", roce)
    (tmp_path / "sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs").mkdir(parents=True)
    (tmp_path / "sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0").write_text("ens2f0np0\n")
    ipoib = pci_device(tmp_path, ["pci0000:40", "0000:40:01.0", "0000:41:00.0"], 1)
    ib_port(tmp_path, "mlx5_1", ipoib)
    for name, dev_port in (("ib0", 0), ("ib1", 1)):  # a dual-port HCA: dev_port says which port
        net_interface(tmp_path, name, ipoib, kind=32)
        (tmp_path / "sys/class/net" / name / "dev_port").write_text(f"{dev_port}\n")
        link = tmp_path / "sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0/net" / name
        link.mkdir(parents=True)
    held = {"ens1f0": ["10.0.0.5/24"], "ens2f0np0": ["192.168.50.5/24", "fd50::5/64"], "ib0": ["10.8.0.5/16"]}
    nics = {n["name"]: n for n in NetReader(str(tmp_path), addresses=lambda: held).inventory()}
    assert nics["ens1f0"]["addresses"] == ["10.0.0.5/24"] and "netdev" not in nics["ens1f0"]
    assert nics["mlx5_0/1"]["netdev"] == "ens2f0np0"
    assert nics["mlx5_0/1"]["addresses"] == ["192.168.50.5/24", "fd50::5/64"]
    assert nics["mlx5_1/1"]["netdev"] == "ib0" and nics["mlx5_1/1"]["addresses"] == ["10.8.0.5/16"]
    assert set(nics) == {"ens1f0", "mlx5_0/1", "mlx5_1/1", "ens2f0np0"}  # IPoIB ib0/ib1 stay out of the list


def test_an_ib_port_without_a_netdev_has_no_addresses():
    reader = NetReader(str(FAKES / "agent_sysfs_procfs"), addresses=lambda: {"eth0": ["10.0.0.1/8"]})
    nics = {n["name"]: n for n in reader.inventory()}
    assert nics["mlx5_0/1"]["netdev"] is None and nics["mlx5_0/1"]["addresses"] == []
