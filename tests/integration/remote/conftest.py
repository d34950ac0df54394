"""Fixtures for the remote integration tests: real sshd servers (tests/sshd.py), SSH settings, the real agent."""

from __future__ import annotations

from pathlib import Path

import pytest
from meshdeck.remote.hostkeys import HostKeyStore
from meshdeck.remote.ssh import SshOptions
from remote_agent_fixtures import (  # noqa: F401  (fixtures)
    RemoteAgentSetup,
    agent_pyz,
    isolated_ssh_options,
    remote_agent,
)
from sshd import SshdServer, ssh_agent, ssh_client_key, sshd, sshd_factory  # noqa: F401  (fixtures)


@pytest.fixture
def no_agent_options(tmp_path: Path) -> SshOptions:
    """Only explicit key files: no ssh-agent, no ~/.ssh defaults, no keyring."""
    empty = tmp_path / "no-default-keys"
    empty.mkdir(exist_ok=True)
    return isolated_ssh_options(empty)


@pytest.fixture
def trusting_store(tmp_path: Path, sshd: SshdServer) -> HostKeyStore:  # noqa: F811
    """A host key store whose own file already knows the shared sshd."""
    own = tmp_path / "known_hosts"
    sshd.write_known_hosts(own)
    return HostKeyStore(own)
