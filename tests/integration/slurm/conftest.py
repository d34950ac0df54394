"""The session's real Slurm cluster (slurm_local.py says what it is); skipped only off CI without Slurm."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from meshdeck.services.slurm_local import PARTITION, SlurmCluster, missing_reason, start_cluster, stop_cluster


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


from integration.remote.remote_agent_fixtures import agent_pyz  # noqa: E402,F401  (fixtures)
from sshd import ssh_client_key, sshd_factory  # noqa: E402,F401  (fixtures)
