"""Which NICs a node's NCCL and gloo traffic should use, from what its agent detected.

NCCL picks "the first interface that is not lo/docker" and the first HCAs it sees unless told otherwise;
on a multi-homed GPU server that is often the management network — the classic reason a multi-node
run is slow or hangs. meshdeck tells it instead, per node:

- InfiniBand / RoCE HCAs with an active port -> `NCCL_IB_HCA==mlx5_0:1,mlx5_1:1` (exact names, port);
  none -> `NCCL_IB_DISABLE=1` (so NCCL does not wait on an absent fabric, and says NET/Socket in its log);
- the interface on the route to the head -> `NCCL_SOCKET_IFNAME` and `GLOO_SOCKET_IFNAME` (bootstrap +
  socket transport, and torch's gloo groups). First choice: what the node's agent answered to
  `checks.route {head}` (its kernel's own routing decision: bonds, VLANs, policy routes, a head given
  by name); else the interface whose subnet holds the head's address in the agent's inventory (longest
  prefix first); a loopback head is reached over lo.

The profile's own `env` always wins over these presets. Pure: the inventory comes in as data, already
decoded (meshdeck_agent.wire_inventory.Inventory).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from meshdeck_agent.wire_inventory import Inventory

from meshdeck.core.errors import InputError
from meshdeck.core.host_address import check_host_address, is_ip_address

IpInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface

_IFNAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,64}$")
_HCA = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
IB_KINDS = ("infiniband", "roce")
PORT_UP_STATES = ("", "up", "active", "4: active", "unknown")  # a NIC's `state` read as usable


@dataclass(frozen=True)
class NetworkInterface:
    name: str  # kernel interface name: eth0, ens1f0np0, ib0, lo
    addresses: tuple[IpInterface, ...]  # address with prefix, e.g. 10.0.0.5/24


@dataclass(frozen=True)
class IbPort:
    device: str  # mlx5_0
    port: int  # 1
    kind: str  # "infiniband" | "roce"
    active: bool = True

    @property
    def nccl_name(self) -> str:
        return f"{self.device}:{self.port}"


@dataclass(frozen=True)
class HeadRoute:
    """A node agent's answer to `checks.route {head}`: the interface (and source address) its kernel sends
    the head's traffic by; `interface` None with `error` saying why when it could not tell."""

    head: str  # the head address that was asked about
    interface: str | None
    source: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class NodeNetwork:
    """One node as the launcher sees it: its meshdeck host name, the address peers use, its NICs."""

    host: str
    address: str
    interfaces: tuple[NetworkInterface, ...] = ()
    ib_ports: tuple[IbPort, ...] = ()
    nics_known: bool = True  # False: nobody asked the agent (a dry run); no IB preset either way
    head_route: HeadRoute | None = None  # None: the agent was not asked (single node, dry run, older agent)
    nearest_nics: tuple[tuple[int, str], ...] = ()  # GPU index -> its closest NIC ("mlx5_0/1"), as its agent saw

    def __post_init__(self) -> None:
        check_host_address(self.address, f"host {self.host}: address")


def route_interface(node: NodeNetwork, head_address: str) -> str | None:
    """The interface the node reaches `head_address` by: its agent's route answer, else the interface
    whose subnet holds the address (longest prefix wins); None when unknown.

    Without a route answer a DNS name cannot be matched against subnets here (no resolving in a pure
    module): None.
    """
    route = node.head_route
    if route is not None and route.head == head_address and route.interface:
        return route.interface
    try:
        target = ipaddress.ip_address(head_address)
    except ValueError:
        return None
    if target.is_loopback:
        return "lo"  # nodes on one machine (local agents): the kernel routes this over lo
    best: tuple[int, str] | None = None
    for interface in node.interfaces:
        for address in interface.addresses:
            if address.version != target.version:
                continue
            if address.ip == target:
                return interface.name
            if target in address.network and (best is None or address.network.prefixlen > best[0]):
                best = (address.network.prefixlen, interface.name)
    return best[1] if best else None


def nccl_env(node: NodeNetwork, head_address: str) -> dict[str, str]:
    """NCCL / gloo network presets for one node (before the profile's env is laid over them)."""
    env: dict[str, str] = {}
    active = [p for p in node.ib_ports if p.active and p.kind in IB_KINDS]
    if active:
        env["NCCL_IB_HCA"] = "=" + ",".join(p.nccl_name for p in active)
    elif node.nics_known:
        env["NCCL_IB_DISABLE"] = "1"
    interface = route_interface(node, head_address)
    if interface:
        env["NCCL_SOCKET_IFNAME"] = interface
        env["GLOO_SOCKET_IFNAME"] = interface
    return env


def network_warnings(nodes: Sequence[NodeNetwork], head_address: str) -> list[str]:
    """What the presets could not decide, per node, so the user can set it in the profile's env."""
    warnings = []
    for node in nodes:
        if route_interface(node, head_address) is None:
            route = node.head_route
            why = f" (its agent says: {route.error})" if route is not None and route.error else ""
            warnings.append(
                f"host {node.host}: no interface is known to route to the head {head_address}{why}, so "
                "NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME are left to NCCL and gloo; set them in the profile's env "
                "if the node has several networks"
            )
    return warnings


def head_route_from_answer(host: str, head_address: str, answer: Any) -> HeadRoute:
    """Validate an agent's `checks.route` result (untrusted remote input), naming the host and field."""
    field = f"host {host}: checks.route"
    if not isinstance(answer, Mapping):
        raise InputError(field, "must be an object")
    interface, source, error = answer.get("interface"), answer.get("source"), answer.get("error")
    if interface is not None and (not isinstance(interface, str) or not _IFNAME.match(interface)):
        raise InputError(f"{field}.interface", f"{interface!r} is not an interface name")
    if source is not None and (not isinstance(source, str) or not is_ip_address(source.split("%", 1)[0])):
        raise InputError(f"{field}.source", f"{source!r} is not an IP address")
    if error is not None and not isinstance(error, str):
        raise InputError(f"{field}.error", "must be a string or null")
    if error is not None:
        error = _CONTROL_CHARS.sub(" ", error)[:300]
    return HeadRoute(head_address, interface, source, error)


def node_network_from_inventory(
    host: str, address: str, inventory: Inventory, head_route: HeadRoute | None = None
) -> NodeNetwork:
    """The NIC part of an agent's (decoded) inventory as the launcher needs it.

    An IB/RoCE entry is an HCA port ("<device>/<port>"); its `netdev` (if any) may also carry addresses.
    Names go into NCCL's and gloo's env, so a name that is not an HCA port or an interface name is
    refused here, naming the host and the NIC.
    """
    interfaces: list[NetworkInterface] = []
    ib_ports: list[IbPort] = []
    for index, nic in enumerate(inventory.nics):
        field = f"host {host}: inventory.nics[{index}]"
        active = (nic.state or "").lower() in PORT_UP_STATES
        addresses = tuple(ipaddress.ip_interface(a) for a in nic.addresses)  # checked by Inventory.from_wire
        if nic.kind in IB_KINDS:
            device, _, port = nic.name.partition("/")
            if not _HCA.match(device) or not port.isdigit():
                raise InputError(f"{field}.name", f"{nic.name!r} is not an HCA port like mlx5_0/1")
            ib_ports.append(IbPort(device, int(port), nic.kind, active))
            if nic.netdev is not None and _IFNAME.match(nic.netdev):
                interfaces.append(NetworkInterface(nic.netdev, addresses))
            continue
        if not _IFNAME.match(nic.name):
            raise InputError(f"{field}.name", f"{nic.name!r} is not an interface name")
        if active:
            interfaces.append(NetworkInterface(nic.name, addresses))
    nearest = tuple(
        (gpu, nic)
        for gpu, nic in inventory.topology.nearest_nic
        if nic is not None and nic in {n.name for n in inventory.nics}
    )
    return NodeNetwork(host, address, tuple(interfaces), tuple(ib_ports), head_route=head_route, nearest_nics=nearest)


def rdma_ports_for(node: NodeNetwork, gpus: Sequence[int]) -> tuple[IbPort, ...]:
    """The active IB/RoCE ports a process owning `gpus` should use: each GPU's nearest port (on a rail network,
    its own rail), in GPU order; every active port when the agent placed none of them."""
    active = {f"{p.device}/{p.port}": p for p in node.ib_ports if p.active and p.kind in IB_KINDS}
    nearest = dict(node.nearest_nics)
    chosen = {nearest[g]: active[nearest[g]] for g in gpus if nearest.get(g) in active}
    return tuple(chosen.values()) or tuple(active.values())
