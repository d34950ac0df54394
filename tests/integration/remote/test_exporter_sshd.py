"""A host stored with a Prometheus exporter address, reached over a real sshd: `meshdeck hosts add
--prometheus`, then `hosts probe NAME` uploads the real agent and runs `attach --prometheus HOST:PORT` on the
exec channel (shlex.join through the remote login shell). The exporter answers there over HTTP with meshdeck's
GPU metrics, and a probe that asks for another address is told the running agent keeps its own."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from meshdeck.cli import main
from remote_agent_fixtures import RemoteAgentSetup
from sshd import SshdServer, free_port

pytestmark = [pytest.mark.sshd, pytest.mark.slow]


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_stored_host_with_an_exporter_serves_metrics_over_http_after_an_ssh_attach(
    capsys, monkeypatch, tmp_path: Path, sshd: SshdServer, ssh_client_key: Path, remote_agent: RemoteAgentSetup
):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    db, exporter = str(tmp_path / "meshdeck.db"), f"127.0.0.1:{free_port()}"
    code, out, err = _run(
        capsys, "--db", db, "hosts", "add", "lab", "127.0.0.1", "-p", str(sshd.port), "-i", str(ssh_client_key),
        "--simulate", "1xH200", "--prometheus", exporter,
    )  # fmt: skip
    assert code == 0, err
    settings = remote_agent.settings
    probe = [
        "--db", db, "hosts", "probe", "lab", "--known-hosts", settings.known_hosts,
        "--ssh-config", str(tmp_path / "no_ssh_config"), "--agent-pyz", str(settings.agent_pyz),
        "--remote-cache-dir", settings.remote_cache_dir, "--agent-socket", str(remote_agent.socket), "--json",
    ]  # fmt: skip
    code, out, err = _run(capsys, *probe, "--accept-new")
    assert code == 0, err
    report = json.loads(out)
    assert report["daemon"] == {"prometheus": exporter} and report["note"] == ""
    with urllib.request.urlopen(f"http://{exporter}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    assert 'meshdeck_gpu_memory_total_bytes{gpu="0"' in text and 'simulated="true"' in text

    other = f"127.0.0.1:{free_port()}"
    code, out, err = _run(capsys, *probe, "--prometheus", other)
    assert code == 0, err
    report = json.loads(out)
    assert report["daemon"] == {"prometheus": exporter}
    assert report["note"].startswith(
        f"Prometheus exporter on {exporter}, not on {other}: the agent was already running"
    )
