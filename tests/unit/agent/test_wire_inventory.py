"""The inventory record (meshdeck_agent.wire_inventory): every agent's answer decodes and round-trips
exactly, and anything else — arbitrary JSON, or a real inventory with one value broken, removed or
added — decodes to an Inventory or raises InventoryError naming the field, never another exception."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from agent_sysfs_tree import della_tree, direct_capture, nv6_tree, nvswitch_capture, pcie_only_tree
from fake_pynvml import build
from hostile_peer import json_locations, mutated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from meshdeck_agent import protocol
from meshdeck_agent.gpu.catalog import GPU_TYPES
from meshdeck_agent.machine import RealMachine, build_machine
from meshdeck_agent.wire_inventory import (
    MAX_GPUS,
    Cpu,
    Gpu,
    Inventory,
    InventoryError,
    Nic,
    NumaNode,
    NvLink,
    Topology,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FAKES = Path(__file__).resolve().parents[2] / "fakes"
TOP_LEVEL = {
    "hostname", "agent", "simulated", "driver", "cuda", "gpus", "gpu_reason", "topology", "nics", "cpu",
    "ram_total_bytes", "python",
}  # fmt: skip


def _real_machines(root: Path) -> dict[str, dict[str, Any]]:
    """Inventories of the recorded servers (fake NVML replaying captures over recorded sysfs trees)."""
    found = {}
    for name, tree, capture in (
        ("hgx-h100-nvswitch", della_tree, lambda ids: nvswitch_capture(ids)),
        ("4xh100-nv6", nv6_tree, lambda ids: direct_capture(ids)),
        ("5x3090-pcie", pcie_only_tree, lambda ids: direct_capture(ids, per_peer=0)),
    ):
        folder = root / name
        folder.mkdir()
        layout = tree(folder)
        found[name] = RealMachine(root=str(folder), nvml_module=build(capture(layout["gpu_bus_ids"]))).inventory()
    della = json.loads((FAKES / "nvml_capture_h100_della.json").read_text())
    (root / "empty").mkdir()
    found["della-h100-nvml"] = RealMachine(root=str(root / "empty"), nvml_module=build(della)).inventory()
    found["no-nvml"] = RealMachine(root=str(root / "empty"), nvml_module=build(della, init_error=12)).inventory()
    return found


def _simulated() -> dict[str, dict[str, Any]]:
    return {
        f"simulated-{key}": build_machine(f"{2 if key.startswith('L') else 8}x{key}").inventory() for key in GPU_TYPES
    }


@pytest.fixture(scope="module")
def real_inventories(tmp_path_factory) -> dict[str, dict[str, Any]]:
    recorded = json.loads((FIXTURES / "launch" / "agent_nics_and_routes.json").read_text())["inventory"]
    return {**_real_machines(tmp_path_factory.mktemp("servers")), **_simulated(), "recorded-nics": recorded}


def test_every_agent_inventory_decodes_and_round_trips_exactly(real_inventories) -> None:
    assert len(real_inventories) >= 10
    for name, wire in real_inventories.items():
        if name == "recorded-nics":
            continue  # a part of an inventory: not every key, so not the canonical form
        inventory = Inventory.from_wire(json.loads(json.dumps(wire)))  # as it crosses the wire
        assert inventory.to_wire() == wire, name
        assert Inventory.from_wire(inventory.to_wire()) == inventory, name


def test_the_agent_builds_its_answer_through_the_record() -> None:
    wire = build_machine("8xH200").inventory()
    assert set(wire) == TOP_LEVEL
    assert set(wire["gpus"][0]) == set(Gpu(index=0).to_wire())
    assert set(wire["gpus"][0]["nvlink_links"][0]) == {"link", "remote_pci_bus_id", "active", "remote_is_switch"}
    assert set(wire["nics"][-1]) == set(Nic("eth0", "ethernet").to_wire())  # Ethernet too says netdev: null
    assert protocol.Inventory is Inventory and protocol.InventoryError is InventoryError


def test_decoded_records_read_as_the_agent_sent_them() -> None:
    inventory = Inventory.from_wire(build_machine("8xH200").inventory())
    assert inventory.simulated and len(inventory.gpus) == 8 and inventory.gpu_names == ("NVIDIA H200",)
    assert inventory.smallest_gpu_memory_bytes == inventory.largest_gpu_memory_bytes == 143771 * 2**20
    assert inventory.gpus[0].active_nvlinks == 18 and inventory.gpus[0].nvlink_links[0].remote_is_switch
    assert inventory.topology.matrix[0][1] == "NV18" and inventory.topology.matrix[3][3] == "X"
    assert inventory.topology.affinity(3)["mlx5_3/1"] == "PIX" and inventory.topology.nearest(3) == "mlx5_3/1"
    assert inventory.topology.affinity(99) == {} and inventory.topology.nearest(99) is None
    assert [nic.is_rdma for nic in inventory.nics].count(True) == 8
    assert inventory.cpu == Cpu("Intel(R) Xeon(R) Platinum 8480+", 2, 112, 224, "x86_64",
                                tuple(NumaNode(n, tuple(range(n * 56, (n + 1) * 56))) for n in range(2)))  # fmt: skip


def test_an_older_agent_without_some_keys_reads_them_as_empty_or_null() -> None:
    inventory = Inventory.from_wire({"hostname": "old", "gpus": [{"index": 0}], "unknown_future_key": {"x": 1}})
    assert inventory == Inventory(hostname="old", gpus=(Gpu(index=0),))
    assert inventory.topology == Topology() and inventory.cpu == Cpu() and inventory.nics == ()


@pytest.mark.parametrize(
    ("wire", "field"),
    [
        ([], ""),
        (None, ""),
        ({"gpus": 5}, "gpus"),
        ({"gpus": None}, "gpus"),
        ({"gpus": [{"index": 0, "memory_total_bytes": "lots"}]}, "gpus[0].memory_total_bytes"),
        ({"gpus": [{"index": 0}, {"index": 1}, {"index": 2}, {"index": 3, "memory_total_bytes": -1}]},
         "gpus[3].memory_total_bytes"),
        ({"gpus": [{"index": 0, "memory_total_bytes": True}]}, "gpus[0].memory_total_bytes"),
        ({"gpus": [{"index": 0, "memory_total_bytes": 10**30}]}, "gpus[0].memory_total_bytes"),
        ({"gpus": [{"index": 0, "memory_total_bytes": 10, "memory_reserved_bytes": 11}]}, "gpus[0].memory_reserved_bytes"),
        ({"gpus": [{"index": 0, "power_limit_w": math.nan}]}, "gpus[0].power_limit_w"),
        ({"gpus": [{"index": 0, "power_limit_w": 10**400}]}, "gpus[0].power_limit_w"),
        ({"gpus": [{"index": 0}, {"index": 0}]}, "gpus[1].index"),
        ({"gpus": [{"index": 1.0}]}, "gpus[0].index"),
        ({"gpus": [{"index": 0, "nvlink_links": [{"link": 0, "active": "yes"}]}]}, "gpus[0].nvlink_links[0].active"),
        ({"gpus": [{"index": i} for i in range(MAX_GPUS + 1)]}, "gpus"),
        ({"hostname": "h" * 257}, "hostname"),
        ({"hostname": "\ud800"}, "hostname"),
        ({"hostname": 7}, "hostname"),
        ({"simulated": 1}, "simulated"),
        ({"topology": None}, "topology"),
        ({"gpus": [{"index": 0}], "topology": {"matrix": [["X", "NV18"], ["NV18", "X"]]}}, "topology.matrix"),
        ({"gpus": [{"index": 0}, {"index": 1}], "topology": {"matrix": [["X", "NV18"], ["NV18"]]}}, "topology.matrix[1]"),
        ({"gpus": [{"index": 0}, {"index": 1}], "topology": {"matrix": [["X", "NV18"], ["NV18", "PIX"]]}},
         "topology.matrix[1][1]"),
        ({"gpus": [{"index": 0}, {"index": 1}], "topology": {"matrix": [["X", "\x1b[2J"], ["SYS", "X"]]}},
         "topology.matrix[0][1]"),
        ({"gpus": [{"index": 0}], "topology": {"gpu_nic_affinity": {"7": {}}}}, "topology.gpu_nic_affinity"),
        ({"gpus": [{"index": 0}], "topology": {"gpu_nic_affinity": {"0": {"eth0": "X"}}}},
         "topology.gpu_nic_affinity.0.eth0"),
        ({"gpus": [{"index": 0}], "topology": {"gpu_nic_affinity": {"0": {"\x1b[2J": "X"}}}},
         "topology.gpu_nic_affinity.0['\\x1b[2J']"),
        ({"gpus": [{"index": 0}], "topology": {"nearest_nic": {"00": "eth0"}}}, "topology.nearest_nic"),
        ({"nics": [{"kind": "ethernet"}]}, "nics[0].name"),
        ({"nics": [{"name": "eth0", "addresses": ["10.0.0.300/24"]}]}, "nics[0].addresses[0]"),
        ({"nics": [{"name": "eth0", "addresses": ["10.0.0.3"]}]}, "nics[0].addresses[0]"),
        ({"nics": [{"name": "eth0", "rate_gbps": -1.0}]}, "nics[0].rate_gbps"),
        ({"cpu": {"numa_nodes": [{"node": 0, "cpus": "0-3"}]}}, "cpu.numa_nodes[0].cpus"),
        ({"cpu": {"threads": -2}}, "cpu.threads"),
        ({"ram_total_bytes": 1.5e12}, "ram_total_bytes"),
    ],
)  # fmt: skip
def test_a_wrong_shaped_inventory_names_the_field(wire: Any, field: str) -> None:
    with pytest.raises(InventoryError) as caught:
        Inventory.from_wire(wire)
    assert caught.value.field == field
    assert caught.value.path == (f"inventory.{field}" if field else "inventory")
    assert "\x1b" not in str(caught.value) and "\ud800" not in str(caught.value)  # bad values are shown escaped


def test_strings_are_kept_as_sent_escape_codes_included() -> None:
    """Escaping is the display's job (core.text); the record keeps what the server said, bounded."""
    inventory = Inventory.from_wire({"hostname": "gpu\x1b[2J-07", "gpus": [{"index": 0, "name": "H\u202e200"}]})
    assert inventory.hostname == "gpu\x1b[2J-07" and inventory.gpus[0].name == "H\u202e200"


# -- hypothesis -----------------------------------------------------------------------------------

TEXT = st.one_of(
    st.text(max_size=12),
    st.text(st.characters(exclude_categories=()), max_size=6),  # surrogates and control characters too
    st.sampled_from(["X", "NV18", "PIX", "SYS", "0", "00", "-1", "eth0", "10.0.0.5/24", "fe80::1/64", "ACTIVE"]),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([2**31, 2**60 + 1, 2**63, -(2**63) - 1, 2**1024, 10**400]),  # past int64, past float
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(TEXT, inner, max_size=5)),
    max_leaves=25,
)


def _decode(value: Any) -> Inventory | InventoryError:
    """Inventory.from_wire, with its one error type returned; any other exception fails the test."""
    try:
        return Inventory.from_wire(value)
    except InventoryError as exc:
        assert exc.field == "" or exc.field.split(".")[0].split("[")[0] in TOP_LEVEL, exc.field
        assert str(exc).isprintable(), str(exc)  # what the server sent is shown escaped, path included
        return exc


def _check(value: Any) -> None:
    decoded = _decode(value)
    if isinstance(decoded, Inventory):
        wire = decoded.to_wire()
        assert Inventory.from_wire(wire) == decoded
        line = protocol.encode(protocol.response(1, wire))  # UTF-8, as the wire (or a terminal) needs it
        assert Inventory.from_wire(json.loads(line)["result"]).to_wire() == wire


@settings(max_examples=500, deadline=None)
@given(JSON)
def test_arbitrary_json_is_an_inventory_or_an_inventory_error(value: Any) -> None:
    _check(value)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(TOP_LEVEL)), JSON, max_size=12))
def test_arbitrary_values_under_the_real_keys_are_an_inventory_or_an_inventory_error(value: Any) -> None:
    _check(value)


# Values that broke decoders before: past float and int64, negative, NaN, bool-as-number, escapes, wrong types.
EXTREMES = st.sampled_from(
    [10**400, -1, 2**63, math.nan, math.inf, -math.inf, True, 1.5, "", "\x1b[2J", "\ud800", "x" * 300, [], {}, None]
)


def _by_field(wire: Any) -> dict[str, list[tuple]]:
    """Every location of `wire`, grouped by the name of the field it is ("[]" for a list item), so that a
    rare field (power_limit_w) is drawn as often as a common one (an NVLink's link id)."""
    groups: dict[str, list[tuple]] = {}
    for path in json_locations(wire):
        name = "" if not path else ("[]" if isinstance(path[-1], int) else str(path[-1]))
        groups.setdefault(name, []).append(path)
    return groups


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_real_inventory_with_one_value_broken_is_an_inventory_or_an_inventory_error(real_inventories, data) -> None:
    name = data.draw(st.sampled_from(sorted(real_inventories)))
    wire = real_inventories[name]
    groups = _by_field(wire)
    path = data.draw(st.sampled_from(groups[data.draw(st.sampled_from(sorted(groups)))]))
    action = data.draw(st.sampled_from(["replace", "replace", "remove", "add"]))
    broken = mutated(wire, path, action, data.draw(EXTREMES | JSON))
    _check(broken)


# valid records, generated: what to_wire gives, from_wire takes back unchanged

LABELS = st.sampled_from(["NV1", "NV12", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS"])
NAMES = st.text(max_size=20)
OPTIONAL_NAMES = st.none() | NAMES


@st.composite
def inventories(draw: Any) -> Inventory:
    indices = draw(st.lists(st.integers(0, MAX_GPUS - 1), unique=True, max_size=5))
    gpus = []
    for index in indices:
        total = draw(st.none() | st.integers(0, 2**50))
        gpus.append(
            Gpu(
                index=index,
                name=draw(OPTIONAL_NAMES),
                memory_total_bytes=total,
                memory_reserved_bytes=draw(st.none() | st.integers(0, 2**50 if total is None else total)),
                power_limit_w=draw(st.none() | st.floats(0, 1e5)),
                pcie_gen=draw(st.none() | st.integers(0, 6)),
                nvlink_links=tuple(
                    NvLink(link, draw(OPTIONAL_NAMES), draw(st.booleans()), draw(st.booleans()))
                    for link in draw(st.lists(st.integers(0, 63), unique=True, max_size=3))
                ),
                numa_node=draw(st.none() | st.integers(0, 7)),
            )
        )
    size = len(gpus) if draw(st.booleans()) else 0
    matrix = tuple(tuple("X" if i == j else draw(LABELS) for j in range(size)) for i in range(size))
    nic_names = draw(st.lists(NAMES.filter(bool), unique=True, max_size=3))
    affinity = tuple(
        (index, tuple((nic, draw(LABELS)) for nic in nic_names)) for index in draw(st.permutations(indices))
    )
    nearest = tuple((index, draw(st.none() | st.sampled_from(nic_names or ["eth0"]))) for index in indices)
    nics = tuple(
        Nic(
            name=name,
            kind=draw(st.sampled_from(["infiniband", "roce", "ethernet"])),
            rate_gbps=draw(st.none() | st.floats(0, 1e6)),
            state=draw(OPTIONAL_NAMES),
            addresses=tuple(draw(st.lists(st.sampled_from(["10.0.0.5/24", "fe80::1/64", "192.0.2.2/32"]), max_size=3))),
            netdev=draw(OPTIONAL_NAMES),
        )
        for name in nic_names
    )
    return Inventory(
        hostname=draw(OPTIONAL_NAMES),
        simulated=draw(st.booleans()),
        driver=draw(OPTIONAL_NAMES),
        gpus=tuple(gpus),
        gpu_reason=draw(st.none() | st.text(max_size=200)),
        topology=Topology(matrix, affinity, nearest),
        nics=nics,
        cpu=Cpu(threads=draw(st.none() | st.integers(0, 4096)),
                numa_nodes=tuple(NumaNode(n, tuple(draw(st.lists(st.integers(0, 65535), max_size=4)))) for n in range(2))),
        ram_total_bytes=draw(st.none() | st.integers(0, 2**60)),
    )  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(inventories())
def test_a_valid_record_round_trips_through_json(inventory: Inventory) -> None:
    wire = json.loads(json.dumps(inventory.to_wire(), allow_nan=False))
    assert Inventory.from_wire(wire) == inventory
    assert Inventory.from_wire(wire).to_wire() == wire
