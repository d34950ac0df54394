"""Each node of a multi-node vLLM (mp) tells vLLM the address its peers reach it at (VLLM_HOST_IP).

Without it vLLM's get_ip() takes the address of the default route's interface: the real two-node run on
loopback (tests/integration/vllm) logged `master_addr=127.0.0.1, mq_connect_ip=192.0.2.2` — the head's
message queue announced on eth0 while the nodes met on 127.0.0.1. On a server with a management NIC and a
fabric NIC the same guess sends the workers to the wrong network.
"""

from __future__ import annotations

import pytest
from launch_builders import make_node, make_profile
from meshdeck.launch.build import build_launch_plan


@pytest.mark.parametrize(
    "layout",
    [
        {"tensor_parallel": 16},
        {"tensor_parallel": 8, "pipeline_parallel": 2},
        {"tensor_parallel": 8, "data_parallel": 2},
    ],
)
def test_every_multi_node_mp_node_sets_vllm_host_ip_to_its_own_address(layout: dict[str, int]) -> None:
    profile = make_profile(hosts=["gpu-a", "gpu-b"], layout=layout)
    nodes = [make_node("gpu-a", "10.0.0.1"), make_node("gpu-b", "10.0.0.2")]
    plan = build_launch_plan(profile, nodes, run_id="r1")
    assert plan.layout_class in ("multi-node-mp", "dp-multi-node")
    addresses = {command.host: command.env_dict.get("VLLM_HOST_IP") for command in plan.commands}
    assert addresses == {"gpu-a": "10.0.0.1", "gpu-b": "10.0.0.2"}


def test_a_single_node_leaves_vllm_host_ip_to_vllm() -> None:
    plan = build_launch_plan(make_profile(layout={"tensor_parallel": 8}), [make_node("gpu-a", "10.0.0.1")], run_id="r")
    assert "VLLM_HOST_IP" not in plan.commands[0].env_dict
