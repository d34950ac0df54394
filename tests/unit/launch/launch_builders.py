"""Builders for launch tests: profiles from a few keywords, nodes with real-looking networks."""

from __future__ import annotations

import ipaddress
from typing import Any

from meshdeck.launch.network import IbPort, NetworkInterface, NodeNetwork
from meshdeck.launch.profile import Profile, profile_from_mapping


def make_profile(**overrides: Any) -> Profile:
    data: dict[str, Any] = {
        "name": "ds32-test",
        "model": "deepseek-ai/DeepSeek-V3.2",
        "engine": "vllm",
        "hosts": ["gpu-a"],
        "gpus_per_node": 8,
        "layout": {"tensor_parallel": 8},
        "vllm": {"max_model_len": 32768},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return profile_from_mapping(data)


def make_node(host: str, address: str, *, ib: int = 0, roce: bool = False, ifname: str = "ens1f0") -> NodeNetwork:
    """A node on 10.0.0.0/24 (its `ifname`) plus a management network, with `ib` HCAs."""
    interfaces = (
        NetworkInterface("eno1", (ipaddress.ip_interface(f"192.168.100.{10 + int(address.split('.')[-1])}/24"),)),
        NetworkInterface(ifname, (ipaddress.ip_interface(f"{address}/24"),)),
    )
    ports = tuple(IbPort(f"mlx5_{i}", 1, "roce" if roce else "infiniband") for i in range(ib))
    return NodeNetwork(host, address, interfaces, ports)
