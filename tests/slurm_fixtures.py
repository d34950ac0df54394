"""The session's real Slurm cluster (slurm_local.py says what it is), for the tests that submit to it; skipped only
off CI without Slurm. A conftest imports `slurm_cluster` to use it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from integration.remote.remote_agent_fixtures import isolated_fleet_settings
from meshdeck.services.fleet import FleetSettings
from meshdeck.services.slurm_local import PARTITION, SlurmCluster, missing_reason, start_cluster, stop_cluster

NODES_BEYOND_PARTITION = frozenset({"PartitionConfig", "PartitionNodeLimit"})
"""Slurm's reasons for a job asking more nodes than its partition has: which one it names depends on which of its
checks (partition limits or the node selection) runs first in that scheduling pass."""


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    reason = missing_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the real-Slurm tests and `make system-deps` installs Slurm: {reason}")
        pytest.skip(reason)
    root = Path(tempfile.mkdtemp(prefix="meshdeck-slurm-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        cluster = start_cluster(root, processes)
        yield cluster
        cluster.run("scancel", "--full", "--partition", PARTITION, check=False)
    finally:
        stop_cluster(root, processes)
        shutil.rmtree(root, ignore_errors=True)


def start_login_node(cluster: SlurmCluster, sshd_factory: Any, key: Path, root: Path, agent_pyz: Path) -> LoginNode:
    """A local sshd as the cluster's login node (the cluster's SLURM_CONF reaching its sessions by sshd's SetEnv),
    its key in a known_hosts under `root`, and fleet settings that reach it with `key` only."""
    server = sshd_factory.start(extra_config=f"SetEnv SLURM_CONF={cluster.conf}\n", authorize=key)
    known_hosts = root / "known_hosts"
    server.write_known_hosts(known_hosts)
    socket_dir = Path(f"/tmp/md-login-{time.monotonic_ns()}")  # short: a unix socket path has a length limit
    settings = isolated_fleet_settings(root, agent_pyz, socket_dir / "a.sock", known_hosts)
    return LoginNode(server, settings, socket_dir / "a.sock")


@dataclass(frozen=True)
class LoginNode:
    server: Any  # sshd.SshdServer
    settings: FleetSettings
    agent_socket: Path  # where meshdeck's agent on it listens (stop_agent stops it)
