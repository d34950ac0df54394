"""`meshdeck-agent attach` over a real pipe: it starts one daemon, relays byte-exactly, and several
attaches at once share that daemon. Also the one-shot commands (`version`, `inventory --json`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from agent_harness import Client, agent_env, old_agent, run_agent, short_dir, wait_for
from meshdeck_agent import __version__ as AGENT_VERSION
from meshdeck_agent import protocol

HELLO = b'{"hello":{"protocol":1,"agent":"attach-test"}}\n'


@pytest.fixture
def sock_dir():
    directory = short_dir()
    yield directory
    socket_path = directory / "agent.sock"
    if socket_path.exists():
        try:
            client = Client.connect(socket_path)
            client.request("agent.shutdown")
            client.close()
        except OSError:
            pass
        wait_for(lambda: not socket_path.exists(), timeout=15)
    shutil.rmtree(directory, ignore_errors=True)


def _attach(directory: Path, payload: bytes, *extra: str) -> subprocess.CompletedProcess[bytes]:
    return run_agent(
        "attach",
        "--socket",
        str(directory / "agent.sock"),
        "--simulate",
        "2xH100",
        "--interval",
        "0.2",
        *extra,
        input_bytes=payload,
    )


def _replies(stdout: bytes) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_attach_starts_the_daemon_and_relays_requests_and_replies(sock_dir):
    payload = HELLO + b'{"id":1,"method":"inventory","params":{}}\n' + b'{"id":2,"method":"agent.time"}\n'
    result = _attach(sock_dir, payload)
    assert result.returncode == 0, result.stderr.decode()
    replies = _replies(result.stdout)
    assert {k: v for k, v in replies[0]["hello"].items() if k != "epoch"} == {
        "protocol": 1,
        "agent": AGENT_VERSION,
        "daemon": {"prometheus": None},
    }
    by_id = {r["id"]: r for r in replies[1:]}
    assert by_id[1]["result"]["simulated"] is True
    assert [g["name"] for g in by_id[1]["result"]["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 2
    assert "time" in by_id[2]["result"]
    assert (sock_dir / "agent.state" / "agent.log").exists()


def test_attach_relays_bytes_exactly_including_bad_lines(sock_dir):
    weird = "ünïcødé ✓".encode()
    payload = (
        HELLO
        + b'{"id":7,"method":"checks.files","params":{"path":"/nonexistent/'
        + weird
        + b'"}}\n'
        + b"\xff garbage\n"
    )
    result = _attach(sock_dir, payload)
    replies = _replies(result.stdout)
    assert any(r.get("id") == 7 and r["result"]["exists"] is False for r in replies)
    assert any(r.get("error", {}).get("code") == "parse_error" for r in replies)
    assert result.stdout.endswith(b"\n")


def test_several_attaches_at_once_share_one_daemon(sock_dir):
    payload = HELLO + b'{"id":1,"method":"agent.time"}\n'
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: _attach(sock_dir, payload), range(4)))
    for result in results:
        assert result.returncode == 0, result.stderr.decode()
        assert any(r.get("id") == 1 for r in _replies(result.stdout))
    log = (sock_dir / "agent.state" / "agent.log").read_text()
    assert log.count("meshdeck-agent serving") == 1


def test_attach_to_a_running_daemon_sees_its_seqs_continue(sock_dir):
    first = _replies(_attach(sock_dir, HELLO + b'{"id":1,"method":"samples.read","params":{"since_seq":0}}\n').stdout)
    last_before = next(r for r in first if r.get("id") == 1)["result"]["last_seq"]
    wait_for(lambda: False, timeout=0.6)
    second = _replies(_attach(sock_dir, HELLO + b'{"id":1,"method":"samples.read","params":{"since_seq":0}}\n').stdout)
    assert next(r for r in second if r.get("id") == 1)["result"]["last_seq"] > last_before


def test_attach_with_a_bad_simulate_spec_fails_with_one_line_and_status_2(sock_dir):
    result = run_agent("attach", "--socket", str(sock_dir / "agent.sock"), "--simulate", "8xV100", input_bytes=b"")
    assert result.returncode == 2
    assert b"unknown GPU type 'V100'" in result.stderr and len(result.stderr.splitlines()) == 1


def test_a_running_daemon_keeps_its_settings_so_attach_does_not_check_the_simulate_spec_again(sock_dir):
    assert _attach(sock_dir, HELLO).returncode == 0  # starts the daemon (2xH100)
    payload = HELLO + b'{"id":1,"method":"inventory","params":{}}\n'
    result = run_agent("attach", "--socket", str(sock_dir / "agent.sock"), "--simulate", "8xV100", input_bytes=payload)
    assert result.returncode == 0, result.stderr.decode()
    inventory = _replies(result.stdout)[1]["result"]
    assert [g["name"] for g in inventory["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 2


def test_version_prints_agent_and_protocol():
    result = run_agent("version", "--json")
    assert json.loads(result.stdout) == {
        "agent": AGENT_VERSION,
        "protocol": 1,
        "python": json.loads(result.stdout)["python"],
    }


def test_inventory_json_one_shot_for_every_simulated_type():
    for spec, name, link in (
        ("1xB200", "NVIDIA B200", "X"),
        ("4xL40S", "NVIDIA L40S", "PIX"),
        ("2xRTX-4090", "NVIDIA GeForce RTX 4090", "PIX"),
    ):
        result = run_agent("inventory", "--simulate", spec, "--json")
        inventory = json.loads(result.stdout)
        assert inventory["simulated"] is True and inventory["gpus"][0]["name"] == name
        assert inventory["topology"]["matrix"][0][1 if len(inventory["gpus"]) > 1 else 0] == link


def test_inventory_on_this_machine_without_nvml_reports_zero_gpus_and_why():
    result = run_agent("inventory", "--json")
    assert result.returncode == 0
    inventory = json.loads(result.stdout)
    assert inventory["simulated"] is False
    if not inventory["gpus"]:
        assert "NVML" in inventory["gpu_reason"] or "nvml" in inventory["gpu_reason"].lower()
    assert inventory["ram_total_bytes"] > 0 and inventory["cpu"]["threads"] >= 1


def test_serve_refuses_a_second_daemon_on_the_same_socket(sock_dir):
    _attach(sock_dir, HELLO)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "meshdeck_agent",
            "serve",
            "--socket",
            str(sock_dir / "agent.sock"),
            "--simulate",
            "1xH100",
        ],
        capture_output=True,
        timeout=30,
        env=agent_env(),
    )
    assert result.returncode == 3 and b"already serves" in result.stderr


def test_attach_replaces_a_daemon_of_another_version_and_passes_the_new_hello_on(sock_dir):
    with old_agent(sock_dir / "agent.sock", sock_dir / "agent.state", "0.0.9") as old:
        result = _attach(sock_dir, HELLO + b'{"id":1,"method":"agent.time"}\n')
        assert result.returncode == 0, result.stderr.decode()
        assert b"replacing the daemon" in result.stderr and b"agent 0.0.9" in result.stderr
        replies = _replies(result.stdout)
        assert {k: v for k, v in replies[0]["hello"].items() if k != "epoch"} == {
            "protocol": 1,
            "agent": AGENT_VERSION,
            "daemon": {"prometheus": None},
        }
        assert any(r.get("id") == 1 and "time" in r["result"] for r in replies)
        assert old.wait(timeout=20) == 0


def test_a_daemon_of_another_protocol_that_cannot_be_stopped_is_a_version_conflict_naming_both(sock_dir):
    with old_agent(sock_dir / "agent.sock", sock_dir / "agent.state", "0.0.1", protocol=0) as old:
        (sock_dir / "agent.state" / "agent.pid").unlink()  # started by hand, say: attach cannot know its pid
        result = _attach(sock_dir, HELLO)
        assert result.returncode == protocol.ATTACH_EXIT_VERSION_CONFLICT
        last = result.stderr.decode().strip().splitlines()[-1]
        assert last.startswith("meshdeck-agent: error: agent 0.0.1 (protocol 0) serves ")
        assert f"not this agent {AGENT_VERSION} (protocol 1)" in last and "its pid is unknown" in last
        assert old.poll() is None and result.stdout == b""  # left alone, nothing relayed
    (sock_dir / "agent.sock").unlink(missing_ok=True)


def test_a_daemon_whose_hello_carries_a_huge_version_is_not_echoed_whole(sock_dir):
    with old_agent(sock_dir / "agent.sock", sock_dir / "agent.state", "9" * 60_000, protocol=0) as old:
        (sock_dir / "agent.state" / "agent.pid").unlink()
        result = _attach(sock_dir, HELLO)
        assert result.returncode == protocol.ATTACH_EXIT_VERSION_CONFLICT
        assert len(result.stderr) < 2000, result.stderr[:300]
        assert b"a daemon with an unreadable hello" in result.stderr
        assert old.poll() is None
    (sock_dir / "agent.sock").unlink(missing_ok=True)
