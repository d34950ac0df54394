"""NCCL / gloo presets per node from what its agent detected: HCAs, the interface on the route to the head."""

from __future__ import annotations

import ipaddress

import pytest
from launch_builders import make_node, make_profile
from meshdeck.core.errors import InputError
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.network import (
    NetworkInterface,
    NodeNetwork,
    nccl_env,
    node_network_from_inventory,
    route_interface,
)

# The NIC part of an agent `inventory` reply, in the shape agent/meshdeck_agent/inventory.py documents
# (names as NCCL_IB_HCA spells them, state as sysfs reports it), plus interface addresses.
INVENTORY = {
    "nics": [
        {"name": "mlx5_0/1", "kind": "infiniband", "rate_gbps": 400.0, "state": "ACTIVE"},
        {"name": "mlx5_1/1", "kind": "infiniband", "rate_gbps": 400.0, "state": "ACTIVE"},
        {"name": "mlx5_2/1", "kind": "infiniband", "rate_gbps": 400.0, "state": "DOWN"},
        {"name": "eno1", "kind": "ethernet", "state": "UP", "addresses": ["192.168.100.11/24"]},
        {"name": "ens1f0", "kind": "ethernet", "state": "UP", "addresses": ["10.0.0.2/16", "fe80::1/64"]},
        {"name": "ens9", "kind": "ethernet", "state": "DOWN", "addresses": ["10.0.5.5/24"]},
    ]
}


def test_active_ib_ports_become_nccl_ib_hca_with_exact_names() -> None:
    node = node_network_from_inventory("gpu-b", "10.0.0.2", INVENTORY)
    env = nccl_env(node, "10.0.0.1")
    assert env["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"  # the DOWN port is left out; '=' = no prefix matching
    assert "NCCL_IB_DISABLE" not in env


def test_the_interface_on_the_route_to_the_head_is_used_for_sockets() -> None:
    node = node_network_from_inventory("gpu-b", "10.0.0.2", INVENTORY)
    env = nccl_env(node, "10.0.0.1")
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "ens1f0"  # not the management eno1


def test_longest_prefix_wins_and_the_head_itself_uses_its_own_interface() -> None:
    node = NodeNetwork(
        "gpu-a",
        "10.0.0.1",
        (
            NetworkInterface("wide", (ipaddress.ip_interface("10.0.0.9/8"),)),
            NetworkInterface("narrow", (ipaddress.ip_interface("10.0.0.9/24"),)),
            NetworkInterface("own", (ipaddress.ip_interface("10.1.2.3/16"),)),
        ),
    )
    assert route_interface(node, "10.0.0.77") == "narrow"
    assert route_interface(node, "10.1.2.3") == "own"
    assert route_interface(node, "172.16.0.1") is None
    assert route_interface(node, "head.example.com") is None  # names are not resolved in a pure module


def test_no_ib_disables_nccl_ib_and_loopback_heads_route_over_lo() -> None:
    node = node_network_from_inventory("local", "127.0.0.1", {"nics": [{"name": "eth0", "kind": "ethernet"}]})
    env = nccl_env(node, "127.0.0.1")
    assert env == {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"}


def test_roce_ports_count_as_hcas() -> None:
    env = nccl_env(make_node("gpu-a", "10.0.0.1", ib=1, roce=True), "10.0.0.1")
    assert env["NCCL_IB_HCA"] == "=mlx5_0:1"


def test_profile_env_wins_over_presets_and_silences_the_route_warning(two_nodes: list[NodeNetwork]) -> None:
    unknown = [NodeNetwork("gpu-a", "10.0.0.1"), NodeNetwork("gpu-b", "10.0.0.2")]  # agent gave no addresses
    profile = make_profile(hosts=["gpu-a", "gpu-b"], layout={"tensor_parallel": 8, "pipeline_parallel": 2})
    plan = build_launch_plan(profile, unknown, run_id="r1")
    assert sum("NCCL_SOCKET_IFNAME" in w for w in plan.warnings) == 2
    assert "NCCL_SOCKET_IFNAME" not in plan.commands[1].env_dict
    pinned = make_profile(
        hosts=["gpu-a", "gpu-b"],
        layout={"tensor_parallel": 8, "pipeline_parallel": 2},
        env={"NCCL_SOCKET_IFNAME": "bond0", "NCCL_IB_HCA": "mlx5"},
    )
    plan = build_launch_plan(pinned, two_nodes, run_id="r1")
    assert not any("NCCL_SOCKET_IFNAME" in w for w in plan.warnings)
    for command in plan.commands:
        assert command.env_dict["NCCL_SOCKET_IFNAME"] == "bond0"
        assert command.env_dict["NCCL_IB_HCA"] == "mlx5"
        assert command.env_dict["GLOO_SOCKET_IFNAME"] == "ens1f0"  # the preset the profile did not override


def test_single_node_launches_get_no_network_presets() -> None:
    plan = build_launch_plan(make_profile(), [make_node("gpu-a", "10.0.0.1", ib=2)], run_id="r1")
    env = plan.commands[0].env_dict
    assert "NCCL_IB_HCA" not in env and "NCCL_SOCKET_IFNAME" not in env
    assert env["NCCL_DEBUG"] == "INFO"  # the agent reads NCCL's transport lines from the log


@pytest.mark.parametrize(
    ("inventory", "field"),
    [
        ({"nics": "eth0"}, "inventory.nics"),
        ({"nics": [{"name": "mlx5_0", "kind": "infiniband"}]}, "inventory.nics[0].name"),
        ({"nics": [{"name": "eth0; reboot", "kind": "ethernet"}]}, "inventory.nics[0].name"),
        ({"nics": [{"name": "eth0", "kind": "ethernet", "addresses": ["10.0.0.300/24"]}]}, "addresses"),
        ({"nics": [7]}, "inventory.nics[0]"),
    ],
)
def test_malformed_inventory_is_refused_naming_host_and_field(inventory: dict, field: str) -> None:
    with pytest.raises(InputError, match=field.replace("[", r"\[").replace("]", r"\]")) as excinfo:
        node_network_from_inventory("gpu-b", "10.0.0.2", inventory)
    assert "gpu-b" in str(excinfo.value)


@pytest.mark.parametrize("address", ["10.0.0.1\nrm -rf /", "$(id)", "head name", "-oProxyCommand=x", ""])
def test_addresses_that_are_not_addresses_are_refused(address: str) -> None:
    with pytest.raises(InputError, match="neither an IP address nor a host name"):
        NodeNetwork("gpu-a", address)


def test_a_node_whose_nics_nobody_asked_gets_no_ib_preset() -> None:
    env = nccl_env(NodeNetwork("gpu-a", "10.0.0.1", nics_known=False), "10.0.0.2")
    assert "NCCL_IB_DISABLE" not in env and "NCCL_IB_HCA" not in env
