"""Fixtures for the launch unit tests (builders live in launch_builders.py)."""

from __future__ import annotations

import pytest
from launch_builders import make_node
from meshdeck.launch.network import NodeNetwork


@pytest.fixture
def two_nodes() -> list[NodeNetwork]:
    return [make_node("gpu-a", "10.0.0.1", ib=2), make_node("gpu-b", "10.0.0.2", ib=2)]
