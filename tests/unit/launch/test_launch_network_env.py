"""NCCL / gloo presets per node from what its agent detected: HCAs, the interface on the route to the head."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
from deploy_fleet import FakeFleet
from launch_builders import make_node, make_profile
from meshdeck.core.errors import InputError
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.network import (
    HeadRoute,
    NetworkInterface,
    NodeNetwork,
    head_route_from_answer,
    nccl_env,
    network_warnings,
    node_network_from_inventory,
    route_interface,
)
from meshdeck.remote.errors import RpcError, RpcTimeout
from meshdeck.services.deployments.targets import head_routes
from meshdeck_agent.wire_inventory import Inventory, InventoryError

# A real agent's answers on the development machine (tests/fixtures/launch/agent_nics_and_routes.json).
RECORDED = json.loads((Path(__file__).parents[2] / "fixtures" / "launch" / "agent_nics_and_routes.json").read_text())

# The NIC part of an agent `inventory` reply, in the shape meshdeck_agent/wire_inventory.py documents
# (names as NCCL_IB_HCA spells them, state as sysfs reports it), plus interface addresses; decoded as the
# app decodes every inventory before the launcher reads it.
INVENTORY = Inventory.from_wire(
    {
        "nics": [
            {"name": "mlx5_0/1", "kind": "infiniband", "rate_gbps": 400.0, "state": "ACTIVE"},
            {"name": "mlx5_1/1", "kind": "infiniband", "rate_gbps": 400.0, "state": "ACTIVE"},
            {"name": "mlx5_2/1", "kind": "infiniband", "rate_gbps": 400.0, "state": "DOWN"},
            {"name": "eno1", "kind": "ethernet", "state": "UP", "addresses": ["192.168.100.11/24"]},
            {"name": "ens1f0", "kind": "ethernet", "state": "UP", "addresses": ["10.0.0.2/16", "fe80::1/64"]},
            {"name": "ens9", "kind": "ethernet", "state": "DOWN", "addresses": ["10.0.5.5/24"]},
        ]
    }
)
RECORDED_INVENTORY = Inventory.from_wire(RECORDED["inventory"])


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
    only_eth0 = Inventory.from_wire({"nics": [{"name": "eth0", "kind": "ethernet"}]})
    node = node_network_from_inventory("local", "127.0.0.1", only_eth0)
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
        ({"nics": [{"name": "mlx5_0", "kind": "infiniband"}]}, "inventory.nics[0].name"),
        ({"nics": [{"name": "eth0; reboot", "kind": "ethernet"}]}, "inventory.nics[0].name"),
    ],
)
def test_nic_names_nccl_cannot_take_are_refused_naming_host_and_field(inventory: dict, field: str) -> None:
    with pytest.raises(InputError) as excinfo:
        node_network_from_inventory("gpu-b", "10.0.0.2", Inventory.from_wire(inventory))
    assert excinfo.value.field == f"host gpu-b: {field}"


@pytest.mark.parametrize(
    ("inventory", "field"),
    [
        ({"nics": "eth0"}, "inventory.nics"),
        (
            {"nics": [{"name": "eth0", "kind": "ethernet", "addresses": ["10.0.0.300/24"]}]},
            "inventory.nics[0].addresses[0]",
        ),
        ({"nics": [7]}, "inventory.nics[0]"),
    ],
)
def test_a_malformed_nic_list_never_reaches_the_launcher(inventory: dict, field: str) -> None:
    with pytest.raises(InventoryError) as excinfo:
        Inventory.from_wire(inventory)
    assert excinfo.value.path == field


@pytest.mark.parametrize("address", ["10.0.0.1\nrm -rf /", "$(id)", "head name", "-oProxyCommand=x", ""])
def test_addresses_that_are_not_addresses_are_refused(address: str) -> None:
    with pytest.raises(InputError, match="neither an IP address nor a host name"):
        NodeNetwork("gpu-a", address)


def test_a_node_whose_nics_nobody_asked_gets_no_ib_preset() -> None:
    env = nccl_env(NodeNetwork("gpu-a", "10.0.0.1", nics_known=False), "10.0.0.2")
    assert "NCCL_IB_DISABLE" not in env and "NCCL_IB_HCA" not in env


def test_the_recorded_route_answer_names_the_interface_for_ipv4_and_ipv6_heads() -> None:
    for head in ("192.0.2.77", "fd00::99"):
        route = head_route_from_answer("gpu-b", head, RECORDED["checks.route"][head])
        node = node_network_from_inventory("gpu-b", "192.0.2.2", RECORDED_INVENTORY, head_route=route)
        env = nccl_env(node, head)
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eth0"
        assert env["NCCL_IB_DISABLE"] == "1"  # the recorded machine has no HCA


def test_the_agents_route_wins_over_the_subnet_match_and_resolves_a_head_given_by_name() -> None:
    # ens1f0 holds 10.0.0.2/16, but the kernel routes the head through a bond the inventory does not list
    answer = {"host": "10.0.0.1", "address": "10.0.0.1", "source": "10.0.0.2", "interface": "bond0", "error": None}
    node = node_network_from_inventory(
        "gpu-b", "10.0.0.2", INVENTORY, head_route_from_answer("gpu-b", "10.0.0.1", answer)
    )
    assert nccl_env(node, "10.0.0.1")["NCCL_SOCKET_IFNAME"] == "bond0"
    by_name = {
        "host": "head.cluster",
        "address": "10.0.0.1",
        "source": "10.0.0.2",
        "interface": "ens1f0",
        "error": None,
    }
    named = NodeNetwork("gpu-b", "10.0.0.2", head_route=head_route_from_answer("gpu-b", "head.cluster", by_name))
    assert route_interface(named, "head.cluster") == "ens1f0"  # no subnet can match a name; the agent resolved it
    assert route_interface(named, "10.9.9.9") is None  # an answer about another head is not used


def test_a_route_the_agent_could_not_tell_falls_back_to_subnets_and_the_warning_quotes_it() -> None:
    route = head_route_from_answer("gpu-b", "gpu-head.invalid", RECORDED["checks.route"]["gpu-head.invalid"])
    assert route.interface is None and "cannot resolve gpu-head.invalid" in (route.error or "")
    node = node_network_from_inventory("gpu-b", "192.0.2.2", RECORDED_INVENTORY, head_route=route)
    (warning,) = network_warnings([node], "gpu-head.invalid")
    assert "host gpu-b" in warning and "its agent says: cannot resolve gpu-head.invalid" in warning
    fallback = node_network_from_inventory(
        "gpu-b", "10.0.0.2", INVENTORY, head_route=HeadRoute("10.0.0.1", None, error="no route to host")
    )
    assert route_interface(fallback, "10.0.0.1") == "ens1f0"


def test_the_profile_env_still_wins_over_the_agents_route() -> None:
    route = HeadRoute("10.0.0.1", "bond0", "10.0.0.2")
    nodes = [make_node("gpu-a", "10.0.0.1"), NodeNetwork("gpu-b", "10.0.0.2", head_route=route)]
    layout = {"tensor_parallel": 8, "pipeline_parallel": 2}
    plan = build_launch_plan(make_profile(hosts=["gpu-a", "gpu-b"], layout=layout), nodes, run_id="r1")
    assert plan.commands[1].env_dict["NCCL_SOCKET_IFNAME"] == "bond0"
    pinned = make_profile(hosts=["gpu-a", "gpu-b"], layout=layout, env={"GLOO_SOCKET_IFNAME": "eth9"})
    env = build_launch_plan(pinned, nodes, run_id="r1").commands[1].env_dict
    assert (env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"]) == ("bond0", "eth9")


@pytest.mark.parametrize(
    ("answer", "field"),
    [
        ("eth0", "checks.route"),
        ({"interface": "eth0; reboot", "source": "10.0.0.2"}, "checks.route.interface"),
        ({"interface": "eth0", "source": "$(id)"}, "checks.route.source"),
        ({"interface": None, "error": 7}, "checks.route.error"),
    ],
)
def test_a_malformed_route_answer_is_refused_naming_host_and_field(answer: object, field: str) -> None:
    with pytest.raises(InputError, match=field.replace(".", r"\.")) as refused:
        head_route_from_answer("gpu-b", "10.0.0.1", answer)
    assert "host gpu-b" in str(refused.value)


def test_every_node_is_asked_for_its_route_and_an_agent_without_the_method_is_left_to_subnets() -> None:
    fleet = FakeFleet()
    fleet.routes = {
        "gpu-a": {
            "host": "10.0.0.1",
            "address": "10.0.0.1",
            "source": "10.0.0.1",
            "interface": "ens1f0",
            "error": None,
        },
        "gpu-b": RpcError("gpu-b", "checks.route", "unknown_method", "unknown method 'checks.route'"),
        "gpu-c": RpcTimeout("gpu-c: checks.route timed out after 30 s"),
    }
    routes = head_routes(fleet, ["gpu-a", "gpu-b", "gpu-c"], "10.0.0.1")
    assert routes == {"gpu-a": HeadRoute("10.0.0.1", "ens1f0", "10.0.0.1")}
    assert [(h, m, p) for h, m, p in fleet.calls] == [
        (h, "checks.route", {"host": "10.0.0.1"}) for h in ("gpu-a", "gpu-b", "gpu-c")
    ]
