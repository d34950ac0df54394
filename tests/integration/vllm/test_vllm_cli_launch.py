"""`meshdeck launch` of a vLLM profile on this machine's agent, as a user runs it: the real TP=2 two-node argv
(hosts local-0 and local-1: two nodes served by this machine's one agent), then `deployments list / logs /
stop`, after which no vLLM process is left; a flag vLLM rejects fails the launch with vLLM's own message;
a port in use is refused by pre-flight before anything starts."""

from __future__ import annotations

import json
import socket
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from meshdeck.launch.profile import dump_profile
from meshdeck.services.deployments.local import free_port
from meshdeck.services.vllm_local import local_vllm_profile, tiny_model_dir
from vllm_processes import process_tree, still_running

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launch"))
from local_agent_cli import isolated_runtime, meshdeck  # the launch tests' CLI helpers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
HOSTS = ["local-0", "local-1"]


@pytest.fixture
def runtime() -> Iterator[dict[str, str]]:
    with isolated_runtime() as env:
        yield env


def write_profile(path: Path, vllm: str, *, port: int, extra_args: tuple[str, ...] = ()) -> Path:
    profile = local_vllm_profile(HOSTS, executable=vllm, model=str(tiny_model_dir()), port=port,
                                 master_port=free_port(), extra_args=extra_args, name="tiny-vllm")  # fmt: skip
    path.write_text(dump_profile(profile))
    return path


def vllm_processes(runtime: dict[str, str]) -> list[psutil.Process]:
    """`vllm serve` processes started by this test's agent (they inherit its XDG_RUNTIME_DIR), and everything
    below them (vLLM's engine and workers retitle themselves `VLLM::…`, which also hides their environment)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            cmdline = " ".join(process.info["cmdline"] or ())
            ours = "vllm serve" in cmdline and process.environ().get("XDG_RUNTIME_DIR") == runtime["XDG_RUNTIME_DIR"]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if ours:
            found += process_tree(process.pid)
    return found


def test_launch_serve_list_logs_and_stop_leave_no_process(
    runtime: dict[str, str], tmp_path: Path, vllm_executable: str
) -> None:
    port = free_port()
    profile = write_profile(tmp_path / "tiny-vllm.yaml", vllm_executable, port=port)
    db = str(tmp_path / "meshdeck.db")
    dry = meshdeck(runtime, "launch", str(profile), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    nodes = json.loads(dry.stdout)["nodes"]  # what runs is what the dry run shows
    assert [n["argv"][n["argv"].index("--node-rank") + 1] for n in nodes] == ["0", "1"]
    assert ["--headless" in n["argv"] for n in nodes] == [False, True]
    assert all(n["argv"][n["argv"].index("--master-addr") + 1] == "127.0.0.1" for n in nodes)
    launched = meshdeck(runtime, "--db", db, "launch", str(profile), "--json", timeout=1500)
    try:
        assert launched.returncode == 0, launched.stderr[-4000:]
        outcome = json.loads(launched.stdout)
        assert outcome["state"] == "running" and outcome["serving_url"] == f"http://127.0.0.1:{port}/v1"
        for line in ("ok   ports free", "ok   versions     local-0        vllm 0.32.0+cpu, torch 2.13.0+cpu"):
            assert line in launched.stderr, launched.stderr[-3000:]
        body = json.dumps({"model": str(tiny_model_dir()), "prompt": "mesh deck", "max_tokens": 8, "ignore_eos": True})
        request = urllib.request.Request(f"{outcome['serving_url']}/completions", data=body.encode(),
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=300) as reply:
            assert json.loads(reply.read())["usage"]["completion_tokens"] == 8
        processes = vllm_processes(runtime)
        assert len(processes) >= 4  # each node: `vllm serve` and at least its worker

        listed = meshdeck(runtime, "--db", db, "deployments", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        (found,) = [d for d in json.loads(listed.stdout)["deployments"] if d["id"] == outcome["id"]]
        assert found["state"] == "running"
        assert sorted(w["command"] for w in found["workers"]) == ["vllm-node0", "vllm-node1"]
        logs = meshdeck(runtime, "--db", db, "deployments", "logs", "tiny-vllm", "--command", "vllm-node0",
                        "--lines", "400")  # fmt: skip
        assert logs.returncode == 0, logs.stderr
        assert "CPU KV cache size: 233,008 tokens" in logs.stdout and "Application startup complete" in logs.stdout
    finally:
        stopped = meshdeck(runtime, "--db", db, "deployments", "stop", "tiny-vllm", "--yes")
    assert stopped.returncode == 0, stopped.stderr
    assert "vllm-node0 on local: stopped" in stopped.stdout and "vllm-node1 on local: stopped" in stopped.stdout
    assert not still_running(processes, within_s=60), "vLLM processes outlived `deployments stop`"


def test_a_flag_vllm_rejects_fails_the_launch_with_vllms_own_message(
    runtime: dict[str, str], tmp_path: Path, vllm_executable: str
) -> None:
    profile = write_profile(tmp_path / "bad.yaml", vllm_executable, port=free_port(), extra_args=("--tensor-paralel",))
    dry = meshdeck(runtime, "launch", str(profile), "--dry-run")
    assert "--tensor-paralel not flags of vLLM" in dry.stdout  # meshdeck's own list warns before anything runs
    launched = meshdeck(runtime, "--db", str(tmp_path / "m.db"), "launch", str(profile), timeout=900)
    assert launched.returncode == 1
    # vLLM's argparse, quoted from the head's log
    first = "vllm-node0 on local-0 exited with code 2 while starting; vLLM: vllm: error: unrecognized arguments: --tensor-paralel"
    assert f"meshdeck: launch failed: {first}" in launched.stderr, launched.stderr[-3000:]
    assert not still_running(vllm_processes(runtime), within_s=60)


def test_a_port_in_use_is_refused_by_preflight_and_nothing_starts(
    runtime: dict[str, str], tmp_path: Path, vllm_executable: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        profile = write_profile(tmp_path / "taken.yaml", vllm_executable, port=port)
        launched = meshdeck(runtime, "--db", str(tmp_path / "m.db"), "launch", str(profile), timeout=600)
    assert launched.returncode == 1
    assert f"FAIL ports free   local-0        {port} (vLLM API) is already taken on the head" in launched.stderr, (
        launched.stderr[-3000:]
    )
    assert "pre-flight failed; nothing was started" in launched.stderr
    assert vllm_processes(runtime) == []
