"""A launch plan's own argv/env, run as a plain process: the stager verifies the inline workload bundle
before it writes or runs anything. (The commands running for real across two nodes are tested through
the agents in test_launch_two_local_agents.py and timed by hand in tests/benchmarks/test_bench_launch.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.network import NodeNetwork
from meshdeck.launch.profile import profile_from_mapping
from meshdeck.launch.torch_launch import BUNDLE_ENV

pytestmark = pytest.mark.slow


def test_a_tampered_bundle_is_refused_before_anything_runs(tmp_path: Path) -> None:
    profile = profile_from_mapping(
        {
            "name": "tamper",
            "model": "m",
            "engine": "torch",
            "hosts": ["node-a"],
            "gpus_per_node": 1,
            "torch": {"script": "collectives", "python": sys.executable},
        }
    )
    (command,) = build_launch_plan(profile, [NodeNetwork("node-a", "127.0.0.1")], run_id="t").commands
    env = {**os.environ, **command.env_dict, "XDG_CACHE_HOME": str(tmp_path)}
    env[BUNDLE_ENV] = env[BUNDLE_ENV][:-8] + "AAAAAAA="
    done = subprocess.run(list(command.argv), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "does not match its sha256" in done.stderr
    assert not (tmp_path / "meshdeck").exists()
