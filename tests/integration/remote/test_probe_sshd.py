"""`meshdeck hosts probe` against a real sshd running the real agent zipapp (simulated 8xH200)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from meshdeck.cli import main
from remote_agent_fixtures import RemoteAgentSetup
from sshd import SshdFactory, SshdServer, generate_key

pytestmark = [pytest.mark.sshd, pytest.mark.slow]


def _probe(capsys, server: SshdServer, key: Path, setup: RemoteAgentSetup, *extra: str) -> tuple[int, str, str]:
    settings = setup.settings
    argv = [
        "--db",
        str(setup.cache_dir.parent / "no.db"),
        "hosts",
        "probe",
        "127.0.0.1",
        "-p",
        str(server.port),
        "-i",
        str(key),
        "--known-hosts",
        settings.known_hosts,
        "--ssh-config",
        str(setup.cache_dir.parent / "no_ssh_config"),
        "--agent-pyz",
        str(settings.agent_pyz),
        "--remote-cache-dir",
        settings.remote_cache_dir,
        "--agent-socket",
        str(setup.socket),
        "--simulate",
        "8xH200",
        *extra,
    ]
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_probe_refuses_an_unknown_key_then_accepts_it_and_bootstraps_once(
    capsys, monkeypatch, sshd: SshdServer, ssh_client_key: Path, remote_agent: RemoteAgentSetup
):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    code, out, err = _probe(capsys, sshd, ssh_client_key, remote_agent, "--json")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"[127.0.0.1]:{sshd.port}: unknown host key ssh-ed25519 {sshd.host_fingerprint()}" in err
    assert "--accept-new" in err and not remote_agent.cache_dir.exists()  # nothing happened on the server

    code, out, err = _probe(capsys, sshd, ssh_client_key, remote_agent, "--json", "--accept-new")
    assert code == 0, err
    assert f"accepted new host key for [127.0.0.1]:{sshd.port}: ssh-ed25519 {sshd.host_fingerprint()}" in err
    report = json.loads(out)
    assert report["host_key"] == f"ssh-ed25519 {sshd.host_fingerprint()}"
    assert report["uploaded"] is True and report["protocol"] == 1 and report["agent_version"]
    assert report["agent_path"].startswith(str(remote_agent.cache_dir) + "/agent-")
    inventory = report["inventory"]
    assert inventory["simulated"] is True and [g["name"] for g in inventory["gpus"]] == ["NVIDIA H200"] * 8
    assert remote_agent.known_hosts.read_text() == sshd.known_hosts_line()

    code, out, err = _probe(capsys, sshd, ssh_client_key, remote_agent)
    assert code == 0 and err == ""
    assert "(already there)" in out and "[SIMULATED]" in out and sshd.host_fingerprint() in out
    assert "GPU7 NVIDIA H200" in out


def test_probe_refuses_a_changed_host_key_naming_both_fingerprints(
    capsys, sshd_factory: SshdFactory, ssh_client_key: Path, remote_agent: RemoteAgentSetup
):
    server = sshd_factory.start(authorize=ssh_client_key)
    server.write_known_hosts(remote_agent.known_hosts)
    old = server.host_fingerprint()
    server.stop()
    server.regenerate_host_key()
    server.start()
    code, out, err = _probe(capsys, server, ssh_client_key, remote_agent, "--accept-new")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "HOST KEY CHANGED" in err and old in err and server.host_fingerprint() in err


def test_probe_with_a_key_the_server_does_not_accept_fails_auth(
    capsys, tmp_path: Path, sshd: SshdServer, remote_agent: RemoteAgentSetup
):
    sshd.write_known_hosts(remote_agent.known_hosts)
    stranger = generate_key(tmp_path / "stranger")
    code, out, err = _probe(capsys, sshd, stranger, remote_agent)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "authentication failed" in err and str(stranger) in err
