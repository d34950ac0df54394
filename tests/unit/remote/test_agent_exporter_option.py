"""A host's Prometheus exporter address reaches its agent as `attach --prometheus HOST:PORT`: checked where it
is given (AgentOptions, a stored host), an argv item of its own, quoted by shlex.join on the SSH exec line."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from meshdeck.core.errors import InputError
from meshdeck.remote.connectors import AgentOptions, LocalConnector
from meshdeck.services.fleet import FleetSettings, RecordConnector, ssh_connector
from meshdeck.store.hosts import HostRecord


def test_the_exporter_address_is_one_attach_flag_after_the_others() -> None:
    options = AgentOptions(socket="/run/md.sock", simulate="1xH200", prometheus="127.0.0.1:9400")
    assert options.attach_args() == [
        "attach", "--socket", "/run/md.sock", "--simulate", "1xH200", "--prometheus", "127.0.0.1:9400",
    ]  # fmt: skip
    assert "--prometheus" not in AgentOptions(simulate="1xH200").attach_args()


@pytest.mark.parametrize("bad", [":9400", "127.0.0.1:0", "127.0.0.1:9400 --simulate 8xH200", "::1:9400"])
def test_agent_options_refuse_anything_but_host_port_naming_the_field(bad: str) -> None:
    with pytest.raises(InputError) as info:
        AgentOptions(prometheus=bad)
    assert info.value.field == "agent.prometheus"


def test_a_local_agent_is_started_with_the_exporter_on() -> None:
    connector = LocalConnector("gpu-a", AgentOptions(simulate="1xH200", prometheus="[::1]:9400"), python="/py")
    assert connector.argv()[:4] == ["/py", "-I", "-S", "-c"]
    assert connector.argv()[6:] == ["attach", "--simulate", "1xH200", "--prometheus", "[::1]:9400"]


def test_a_stored_host_attaches_over_ssh_with_its_exporter_quoted_on_the_exec_line(tmp_path: Path) -> None:
    settings = FleetSettings(known_hosts=str(tmp_path / "kh"), ssh_config=None, agent_socket="/run/md.sock")
    record = HostRecord(name="gpu-a", target="ops@10.0.0.5", prometheus="[::1]:9400")
    connector = RecordConnector(record, settings, settings.host_key_store()).connector()
    argv = connector.attach_argv("/usr/bin/python3", "/home/ops/.cache/meshdeck/agent-x.pyz", "ab" * 32)
    assert argv[-2:] == ["--prometheus", "[::1]:9400"]
    line = shlex.join(argv)  # what SshConnection.open_exec sends to the login shell
    assert "'[::1]:9400'" in line  # brackets are a shell glob: quoted
    assert shlex.split(line) == argv


def test_ssh_connector_passes_the_exporter_address_through(tmp_path: Path) -> None:
    settings = FleetSettings(known_hosts=str(tmp_path / "kh"), ssh_config=None)
    connector = ssh_connector(settings, "ops@10.0.0.5", prometheus="10.0.0.5:9400")
    assert connector.agent.prometheus == "10.0.0.5:9400"
    assert connector.attach_argv("python3", "a.pyz", "ab" * 32)[-2:] == ["--prometheus", "10.0.0.5:9400"]
