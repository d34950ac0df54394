"""Hostile input through the real agent path: a vLLM launch whose model and env values are shell syntax
reaches the process verbatim (argv list, env dict — no shell anywhere), and nothing is executed.

The `vllm` here is a stand-in script (this machine has no GPU): it records the argv and env it got,
listens on --port and prints vLLM's startup line, so the launch's ready checks are the real ones.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import pytest
from meshdeck.launch.profile import profile_from_mapping
from meshdeck.services.deployments.local import LocalAgents
from meshdeck.services.deployments.registry import DeployService
from meshdeck.services.deployments.targets import prepare_launch

pytestmark = pytest.mark.slow

FAKE_VLLM = """#!{python}
import json, os, socket, sys, time
out = os.environ["FAKE_VLLM_OUT"]
keys = ("QUOTES", "SPACES", "SUBSHELL", "BACKTICKS", "NCCL_DEBUG")
with open(out + ".tmp", "w") as handle:
    json.dump({{"argv": sys.argv, "env": {{k: os.environ.get(k) for k in keys}}}}, handle)
os.replace(out + ".tmp", out)
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("", int(sys.argv[sys.argv.index("--port") + 1])))
listener.listen(8)
print("INFO 11-30 12:00:00 [launcher.py:46] Application startup complete.", flush=True)
time.sleep(600)
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_hostile_model_and_env_arrive_verbatim_through_the_agent(tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    fake = tmp_path / "vllm"
    fake.write_text(FAKE_VLLM.format(python=sys.executable))
    fake.chmod(0o755)
    out = tmp_path / "seen.json"
    hostile_env = {
        "QUOTES": 'it\'s "quoted"',
        "SPACES": "a b  c",
        "SUBSHELL": f"$(touch {pwned})",
        "BACKTICKS": f"`touch {pwned}`",  # (a newline, like any control character, is refused by validation)
        "FAKE_VLLM_OUT": str(out),
    }
    model = f"x; touch {pwned}"
    with LocalAgents(1) as agents:
        profile = profile_from_mapping(
            {
                "name": "hostile",
                "model": model,
                "hosts": agents.hosts,
                "gpus_per_node": 1,
                "vllm": {"executable": str(fake), "port": free_port(), "extra_args": ["--served-model-name", "$(id)"]},
                "env": hostile_env,
            }
        )
        prepared = prepare_launch(profile, agents.fleet, addresses={agents.hosts[0]: "127.0.0.1"}, run_id="h")
        deploy = DeployService(agents.fleet)
        snapshot = deploy.launch(prepared.plan)
        try:
            assert snapshot.state == "running"
            deadline = time.monotonic() + 30
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            seen = json.loads(out.read_text())
        finally:
            deploy.stop(snapshot.id, grace_s=2)
            deploy.close()
    assert seen["argv"][1:3] == ["serve", model]
    assert seen["argv"][-2:] == ["--served-model-name", "$(id)"]
    for key, value in hostile_env.items():
        if key != "FAKE_VLLM_OUT":
            assert seen["env"][key] == value
    assert seen["env"]["NCCL_DEBUG"] == "INFO"
    assert not pwned.exists()
