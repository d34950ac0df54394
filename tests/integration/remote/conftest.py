"""Fixtures for the remote integration tests: real sshd servers (tests/sshd.py) and SSH settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from meshdeck.remote.auth import AuthOptions
from meshdeck.remote.hostkeys import HostKeyStore
from meshdeck.remote.ssh import SshOptions
from sshd import SshdServer, ssh_agent, ssh_client_key, sshd, sshd_factory  # noqa: F401  (fixtures)


@pytest.fixture
def no_agent_options(tmp_path: Path) -> SshOptions:
    """Only explicit key files: no ssh-agent, no ~/.ssh defaults, no keyring."""
    empty = tmp_path / "no-default-keys"
    empty.mkdir()
    return SshOptions(
        connect_timeout_s=10, auth=AuthOptions(use_agent=False, default_key_dir=str(empty), password_lookup=None)
    )


@pytest.fixture
def trusting_store(tmp_path: Path, sshd: SshdServer) -> HostKeyStore:  # noqa: F811
    """A host key store whose own file already knows the shared sshd."""
    own = tmp_path / "known_hosts"
    sshd.write_known_hosts(own)
    return HostKeyStore(own)
