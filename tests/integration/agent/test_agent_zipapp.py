"""The zipapp is built by packaging/build_agent.py and runs with `python3 -I` where meshdeck is not
installed, vendoring pynvml and prometheus_client (licences kept), on Python 3.9 where one exists."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from agent_harness import Client, short_dir, wait_for
from meshdeck_agent import __version__ as AGENT_VERSION
from meshdeck_agent.gpu.catalog import parse_simulate
from meshdeck_agent.sim.engine import StandInChooser

ROOT = Path(__file__).resolve().parents[3]


def _bare_pythons() -> list[str]:
    """Interpreters that cannot import meshdeck_agent or prometheus_client by themselves."""
    found = []
    for candidate in (
        shutil.which("python3"),
        str(Path.home() / ".pyenv/versions/3.9.18/bin/python3.9"),
        shutil.which("python3.9"),
    ):
        if not candidate or not Path(candidate).exists() or candidate in found:
            continue
        runs = subprocess.run(
            [candidate, "-I", "-c", "import sys; assert sys.version_info >= (3, 9)"], capture_output=True, timeout=60
        )
        bare = subprocess.run([candidate, "-I", "-c", "import meshdeck_agent"], capture_output=True, timeout=60)
        if runs.returncode == 0 and bare.returncode != 0:
            found.append(candidate)
    return found


@pytest.fixture(scope="module")
def pyz(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist") / "meshdeck-agent.pyz"
    subprocess.run(
        [sys.executable, str(ROOT / "packaging" / "build_agent.py"), "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


def test_the_archive_vendors_its_dependencies_with_their_licences(pyz, tmp_path):
    with zipfile.ZipFile(pyz) as archive:
        names = set(archive.namelist())
        vendored = archive.read("LICENSES/VENDORED.txt").decode()
    assert {"__main__.py", "meshdeck_agent/daemon.py", "pynvml.py", "prometheus_client/parser.py"} <= names
    assert {
        "LICENSES/nvidia-ml-py/LICENSE.txt",
        "LICENSES/prometheus_client/LICENSE",
        "LICENSES/prometheus_client/NOTICE",
    } <= names
    assert "nvidia-ml-py" in vendored and "prometheus_client" in vendored
    assert not any(name.startswith("prometheus_client/twisted") for name in names)
    again = tmp_path / "again.pyz"
    subprocess.run(
        [sys.executable, str(ROOT / "packaging" / "build_agent.py"), "--out", str(again)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert again.read_bytes() == pyz.read_bytes()  # reproducible


def test_the_app_reads_the_zipapps_agent_version_and_protocol_without_running_it(pyz):
    from meshdeck.remote.bootstrap import AgentPackage
    from meshdeck_agent import __version__
    from meshdeck_agent.protocol import PROTOCOL_VERSION

    package = AgentPackage.from_path(pyz)
    assert (package.agent_version, package.protocol) == (__version__, PROTOCOL_VERSION)
    package.check_protocol("here")  # this build matches the app


def test_version_and_inventory_run_where_meshdeck_is_not_installed(pyz):
    pythons = _bare_pythons()
    if not pythons:
        pytest.skip("every python3 here can import meshdeck_agent; nothing bare to test with")
    for python in pythons:
        version = subprocess.run(
            [python, "-I", str(pyz), "version", "--json"], capture_output=True, text=True, timeout=60
        )
        assert version.returncode == 0, version.stderr
        assert json.loads(version.stdout)["agent"] == AGENT_VERSION
        inventory = subprocess.run(
            [python, "-I", str(pyz), "inventory", "--simulate", "2xH100", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert json.loads(inventory.stdout)["gpus"][1]["name"] == "NVIDIA H100 80GB HBM3"


def test_the_zipapp_daemon_runs_keepers_and_the_simulated_vllm_from_the_archive(pyz):
    pythons = _bare_pythons()
    if not pythons:
        pytest.skip("no interpreter without meshdeck_agent installed")
    python = pythons[-1]  # the oldest one found (3.9 when present)
    directory = short_dir()
    socket_path = directory / "agent.sock"
    try:
        attach = subprocess.Popen(
            [
                python,
                "-I",
                str(pyz),
                "attach",
                "--socket",
                str(socket_path),
                "--simulate",
                "8xH200",
                "--interval",
                "0.25",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert wait_for(socket_path.exists, timeout=30)
        attach.stdin.close()
        attach.wait(timeout=30)
        daemon_pid = json.loads((directory / "agent.state" / "agent.pid").read_text())["pid"]
        client = Client.connect(socket_path)
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        argv = ["vllm", "serve", "deepseek-ai/DeepSeek-V3.2", "-tp", "8", "--max-model-len", "16384"]
        argv += ["--port", str(port)]
        expected = StandInChooser(parse_simulate("8xH200")).plan_for(argv, {}, ())
        worker = client.call("workers.start", {"spec": {"argv": argv, "id": "z"}})
        assert worker["state"] == "running"
        event = client.wait_event(
            lambda e: e["event"] == "log" and "kv_cache_tokens" in e["data"]["fields"], timeout=60
        )
        assert event["data"]["fields"]["kv_cache_tokens"] == expected["kv_tokens"]
        cmdline = Path(f"/proc/{worker['pid']}/cmdline").read_bytes().split(b"\0")
        # the agent re-runs itself with sys.executable: the interpreter behind `python` (a pyenv shim execs it)
        interpreter = subprocess.run(
            [python, "-I", "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, timeout=60
        ).stdout.strip()
        assert cmdline[:3] == [interpreter.encode(), b"-I", str(pyz).encode()] and b"simvllm" in cmdline
        client.call("workers.stop", {"id": "z", "grace_s": 5})
        client.call("agent.shutdown")
        client.close()
        assert wait_for(lambda: not socket_path.exists(), timeout=20)
        assert wait_for(lambda: not Path(f"/proc/{daemon_pid}").exists(), timeout=20)  # the daemon has exited
    finally:
        shutil.rmtree(directory, ignore_errors=True)
