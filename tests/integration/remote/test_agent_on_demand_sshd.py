"""A fresh clone reaches a real sshd on the first try: with no zipapp anywhere, `meshdeck hosts probe`
builds the agent into the user cache dir, uploads it, and runs it there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from meshdeck.cli import main
from meshdeck.remote import bootstrap
from meshdeck.remote.agent_zipapp import AGENT_CACHE_DIR_ENV
from meshdeck.remote.bootstrap import AGENT_PYZ_ENV
from remote_agent_fixtures import RemoteAgentSetup
from sshd import SshdServer

pytestmark = [pytest.mark.sshd, pytest.mark.slow]


def test_probe_without_a_prebuilt_zipapp_builds_one_and_bootstraps_it(
    capsys, monkeypatch, tmp_path: Path, sshd: SshdServer, ssh_client_key: Path, remote_agent: RemoteAgentSetup
):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv(AGENT_PYZ_ENV, raising=False)
    monkeypatch.setattr(bootstrap, "bundled_agent_candidates", lambda: [tmp_path / "no-dist" / "meshdeck-agent.pyz"])
    local_cache = tmp_path / "local-cache"
    monkeypatch.setenv(AGENT_CACHE_DIR_ENV, str(local_cache))
    settings = remote_agent.settings
    argv = [
        "--db",
        str(tmp_path / "no.db"),
        "hosts",
        "probe",
        "127.0.0.1",
        "-p",
        str(sshd.port),
        "-i",
        str(ssh_client_key),
        "--known-hosts",
        settings.known_hosts,
        "--ssh-config",
        str(tmp_path / "no_ssh_config"),
        "--remote-cache-dir",
        settings.remote_cache_dir,
        "--agent-socket",
        str(remote_agent.socket),
        "--simulate",
        "2xH200",
        "--accept-new",
        "--json",
    ]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    built = list(local_cache.glob("meshdeck-agent-*.pyz"))
    assert len(built) == 1
    report = json.loads(out)
    assert report["uploaded"] is True and report["protocol"] == 1
    remote = Path(report["agent_path"])
    assert remote.parent == remote_agent.cache_dir
    assert remote.read_bytes() == built[0].read_bytes()  # the cached build is what was uploaded
    assert [g["name"] for g in report["inventory"]["gpus"]] == ["NVIDIA H200"] * 2
