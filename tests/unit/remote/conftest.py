"""Unit tests of meshdeck.remote and the fleet service: no fake agent outlives its test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from remote_fake_agent import FakeAgent


@pytest.fixture(autouse=True)
def close_fake_agents() -> Iterator[None]:
    yield
    for agent in list(FakeAgent.live):
        agent.close()
