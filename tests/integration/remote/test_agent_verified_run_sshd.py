"""Over a real sshd, the agent file on the server runs only while it is the file uploaded: one changed
between the bootstrap's probe and the start of `attach` (someone else who can write to the remote cache dir
swapped it) is refused by the runner on the server, and the host fails with one line naming the file,
instead of the planted code running as the operator's SSH user."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from meshdeck.remote.bootstrap import AgentPackage
from meshdeck.remote.connectors import AgentOptions, SshConnector, say_hello
from meshdeck.remote.errors import BootstrapError
from meshdeck.remote.rpc import RpcClient
from meshdeck.remote.sshconfig import resolve_route
from remote_agent_fixtures import RemoteAgentSetup
from sshd import SshdServer

pytestmark = [pytest.mark.sshd, pytest.mark.slow]


def _connector(sshd: SshdServer, key: Path, store, options, setup: RemoteAgentSetup, package) -> SshConnector:
    route = resolve_route("127.0.0.1", port=sshd.port, identity_file=str(key), config_path=None)
    agent = AgentOptions(socket=str(setup.socket), simulate="1xH100", interval_s=0.2)
    return SshConnector(route, store, package=package, options=options, agent=agent, cache_dir=str(setup.cache_dir))


def test_an_agent_file_swapped_on_the_server_after_the_probe_is_not_run(
    tmp_path: Path, sshd: SshdServer, ssh_client_key: Path, trusting_store, no_agent_options, remote_agent, agent_pyz
):
    package = AgentPackage.from_path(agent_pyz)
    marker = tmp_path / "the-planted-agent-ran"
    planted = tmp_path / "planted.pyz"
    with zipfile.ZipFile(planted, "w") as archive:
        archive.writestr("__main__.py", f"open({str(marker)!r}, 'w').write('ran')\n")
    remote_file = remote_agent.cache_dir / package.remote_name

    def swap_before_the_start(message: str) -> None:
        if message == "starting the agent":  # after the probe hashed the upload, before attach runs
            remote_file.write_bytes(planted.read_bytes())

    connector = _connector(sshd, ssh_client_key, trusting_store, no_agent_options, remote_agent, package)
    link = connector.open(swap_before_the_start)
    try:
        with pytest.raises(BootstrapError) as refused:
            say_hello(RpcClient(link.stream, host="gpu-a"), link, "gpu-a", timeout=30)
    finally:
        link.close()
    assert not marker.exists()
    message = str(refused.value)
    assert refused.value.reason == "agent_changed" and refused.value.permanent
    assert message.startswith(f"gpu-a: the agent was not started: {remote_file} has SHA-256 ")
    assert f"not {package.sha256} as uploaded" in message


def test_the_uploaded_agent_starts_through_the_runner_and_says_its_version(
    sshd: SshdServer, ssh_client_key: Path, trusting_store, no_agent_options, remote_agent, agent_pyz
):
    package = AgentPackage.from_path(agent_pyz)
    link = _connector(sshd, ssh_client_key, trusting_store, no_agent_options, remote_agent, package).open(
        lambda _message: None
    )
    client = RpcClient(link.stream, host="gpu-a")
    try:
        hello = say_hello(client, link, "gpu-a", timeout=30)
        assert (hello.agent, link.details["agent_version"]) == (package.agent_version, package.agent_version)
        assert client.call("agent.time", {}, 30)["time"] > 0
    finally:
        client.close()
        link.close()
