"""Unit tests of meshdeck.remote and the fleet service: no fake agent outlives its test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from meshdeck.remote.supervisor import Backoff, SupervisorSettings
from meshdeck.services.fleet import FleetService, FleetSettings
from remote_fake_agent import FakeAgent


@pytest.fixture(autouse=True)
def close_fake_agents() -> Iterator[None]:
    yield
    for agent in list(FakeAgent.live):
        agent.close()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[FleetService]:
    """A fleet with nothing of the user's (known_hosts, ssh config) and quick reconnects."""
    settings = FleetSettings(
        known_hosts=str(tmp_path / "known_hosts"),
        user_known_hosts=(),
        ssh_config=None,
        supervisor=SupervisorSettings(call_timeout_s=10, backoff=Backoff(initial_s=0.05, max_s=0.2)),
    )
    service = FleetService(settings)
    yield service
    service.close()
