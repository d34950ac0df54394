"""The one way from agents' inventories to the planner's cluster (services.cluster), and the one way a
use-case asks an agent for its inventory (services.inventory)."""

from __future__ import annotations

from typing import Any

import pytest
from meshdeck.core.errors import InputError
from meshdeck.services.catalog import load_gpu_catalog
from meshdeck.services.cluster import cluster_from_inventories, inventory_facts
from meshdeck.services.inventory import describe_gpus, fetch_inventory
from meshdeck_agent.machine import build_machine
from meshdeck_agent.wire_inventory import Gpu, Inventory

H200 = Inventory.from_wire(build_machine("8xH200").inventory())  # a simulated agent's own answer
L40S = Inventory.from_wire(build_machine("4xL40S").inventory())


def _two_gpus(**changes: Any) -> Inventory:
    base = {
        "hostname": "gpu-07",
        "simulated": True,
        "gpus": [
            {"index": i, "name": "NVIDIA H200", "memory_total_bytes": 150_754_820_096, "arch": "hopper"}
            for i in range(2)
        ],
        "topology": {"matrix": [["X", "NV18"], ["NV18", "X"]]},
        "nics": [
            {"name": "mlx5_0/1", "kind": "infiniband", "rate_gbps": 400.0, "state": "ACTIVE"},
            {"name": "mlx5_1/1", "kind": "infiniband", "rate_gbps": 400.0, "state": "DOWN"},
            {"name": "eth0", "kind": "ethernet", "rate_gbps": 25.0, "state": "UP"},
        ],
    }
    return Inventory.from_wire({**base, **changes})


def test_facts_of_an_inventory_are_memory_topology_and_active_rdma_speed() -> None:
    facts = inventory_facts(_two_gpus())
    assert facts.gpu_count == 2 and facts.gpu_name == "NVIDIA H200" and facts.gpu_arch == "hopper"
    assert facts.gpu_memory_bytes == 150_754_820_096
    assert facts.topology is not None and facts.topology.fully_nvlinked
    assert facts.rdma_bytes_per_s == 400e9 / 8  # the DOWN port and Ethernet do not count
    assert facts.simulated


def test_two_detected_hosts_plan_on_the_catalog_gpu_their_matrix_and_the_slowest_rdma() -> None:
    slower = Inventory.from_wire({**H200.to_wire(), "nics": [{"name": "mlx5_0/1", "kind": "roce", "rate_gbps": 100.0}]})
    detected = cluster_from_inventories({"a": H200, "b": slower}, ["a", "b"], load_gpu_catalog())
    cluster = detected.cluster
    assert (cluster.nodes, cluster.gpus_per_node, cluster.gpu.name) == (2, 8, "H200-SXM-141GB")
    assert cluster.topology is not None and cluster.topology.codes[0][1] == "NV18"
    assert cluster.intra_node_link == "nvlink"
    assert (cluster.inter_node_bytes_per_s, cluster.inter_node_assumed) == (100e9 / 8, False)
    assert detected.simulated and detected.hosts == ("a", "b")
    assert any("slowest host" in note for note in detected.notes)


def test_pcie_cards_plan_as_pcie_from_their_matrix() -> None:
    cluster = cluster_from_inventories({"l": L40S}, ["l"]).cluster
    assert cluster.intra_node_link == "pcie" and cluster.topology is not None


def test_a_given_gpu_replaces_the_detected_one_and_unnamed_gpus_need_it() -> None:
    unnamed = Inventory(hostname="x", gpus=(Gpu(0), Gpu(1)))
    with pytest.raises(InputError) as caught:
        cluster_from_inventories({"x": unnamed}, ["x"], field="--topology")
    assert caught.value.field == "--topology"
    h100 = next(g for g in load_gpu_catalog() if g.name.startswith("H100"))
    assert cluster_from_inventories({"x": unnamed}, ["x"], gpu=h100).cluster.gpu is h100


@pytest.mark.parametrize(
    ("inventories", "problem"),
    [
        ({"a": H200, "b": Inventory(hostname="b")}, "b reported no GPUs"),
        ({"a": H200, "b": L40S}, "different GPU counts"),
        ({"a": H200, "b": Inventory.from_wire({**H200.to_wire(), "gpus": [g.to_wire() | {"name": "NVIDIA H100"} for g in H200.gpus]})},
         "different GPU models"),
    ],
)  # fmt: skip
def test_hosts_of_different_kinds_cannot_share_a_layout(inventories: dict[str, Inventory], problem: str) -> None:
    with pytest.raises(InputError, match=problem):
        cluster_from_inventories(inventories, list(inventories))


def test_a_host_is_described_in_one_phrase() -> None:
    assert describe_gpus(H200) == "8× NVIDIA H200 140 GiB"
    assert describe_gpus(Inventory(hostname="cpu-only")) == "no GPUs"
    assert describe_gpus(Inventory(gpus=(Gpu(0),))) == "1× GPU 0 GiB"


class OneAnswer:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def call(self, host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        assert method == "inventory"
        return self.answer


def test_fetch_inventory_decodes_the_answer_or_names_host_and_field() -> None:
    assert fetch_inventory(OneAnswer(H200.to_wire()), "gpu-a") == H200
    with pytest.raises(InputError) as caught:
        fetch_inventory(OneAnswer({"nics": [{"name": "eth0", "rate_gbps": "fast"}]}), "gpu-a")
    assert caught.value.field == "host gpu-a: inventory.nics[0].rate_gbps"
