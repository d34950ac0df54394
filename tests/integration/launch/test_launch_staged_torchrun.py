"""A launch plan's own argv/env, run as plain processes: two 'nodes' on this machine, head first.

This is what an agent does with the plan (minus supervision), so it proves the commands themselves:
the inline workload bundle is unpacked and verified by the stager, torchrun's c10d rendezvous is hosted
by the head (`is_host=1`) and joined by the other node, and the sharded run matches its reference.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.network import NodeNetwork
from meshdeck.launch.profile import profile_from_mapping
from meshdeck.launch.torch_launch import BUNDLE_ENV

pytestmark = pytest.mark.slow


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_planned_torchrun_commands_run_tiny_deepseek_across_two_nodes(tmp_path: Path) -> None:
    profile = profile_from_mapping(
        {
            "name": "tiny-tp2pp2",
            "model": "tiny-deepseek",
            "engine": "torch",
            "hosts": ["node-a", "node-b"],
            "gpus_per_node": 2,
            "layout": {"tensor_parallel": 2, "pipeline_parallel": 2},
            "torch": {"script": "tiny-deepseek", "python": sys.executable, "master_port": free_port()},
        }
    )
    nodes = [NodeNetwork("node-a", "127.0.0.1"), NodeNetwork("node-b", "127.0.0.1")]
    plan = build_launch_plan(profile, nodes, run_id="staged-test")
    processes = []
    try:
        for command in plan.commands:  # stage order: head (rendezvous host) first
            env = {**os.environ, **command.env_dict, "XDG_CACHE_HOME": str(tmp_path), "OMP_NUM_THREADS": "1"}
            log = (tmp_path / f"{command.name}.log").open("w")
            processes.append((subprocess.Popen(list(command.argv), env=env, stdout=log, stderr=subprocess.STDOUT), log))
            time.sleep(1.0)
        codes = [process.wait(timeout=240) for process, _ in processes]
    finally:
        for process, log in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
            log.close()
    logs = {c.name: (tmp_path / f"{c.name}.log").read_text() for c in plan.commands}
    assert codes == [0, 0], logs
    result_lines = [line for text in logs.values() for line in text.splitlines() if line.startswith("MESHDECK_RESULT")]
    assert len(result_lines) == 1
    result = json.loads(result_lines[0].split(" ", 1)[1])
    assert result["world_size"] == 4 and result["matches_reference"]
    assert result["layout"]["pipeline_parallel"] == 2 and result["bytes_per_forward"]["pp"] > 0
    running = sum(text.count("meshdeck-workload: rank") for text in logs.values())
    assert running == 4
    staged = list((tmp_path / "meshdeck" / "workloads").iterdir())
    assert len(staged) == 1 and {p.name for p in staged[0].iterdir()} == {
        "tiny_deepseek.py",
        "tiny_deepseek_model.py",
        "layout_mesh.py",
    }


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
