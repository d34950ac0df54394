"""Logging in to real OpenSSH servers: key file, encrypted key, ssh-agent, ProxyJump chains, config aliases,
host keys unknown / accepted / changed, auth failure and unreachable hosts."""

from __future__ import annotations

import getpass
import shlex
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from meshdeck.remote.auth import AuthOptions
from meshdeck.remote.errors import AuthFailed, ConnectError, HostKeyChanged, HostKeyUnknown
from meshdeck.remote.hostkeys import HostKeyInfo, HostKeyStore
from meshdeck.remote.ssh import SshOptions, connect
from meshdeck.remote.sshconfig import parse_port, resolve_route
from sshd import SshdFactory, SshdServer, generate_key

pytestmark = pytest.mark.sshd


def _whoami(conn) -> str:
    result = conn.run(["id", "-un"])
    assert result.exit_status == 0, result.stderr
    return result.stdout.decode().strip()


def test_key_file_login_runs_a_command_as_the_user(
    sshd: SshdServer, ssh_client_key: Path, trusting_store, no_agent_options, tmp_path
):
    route = resolve_route("127.0.0.1", port=sshd.port, identity_file=str(ssh_client_key), config_path=None)
    with connect(route, trusting_store, no_agent_options) as conn:
        assert _whoami(conn) == getpass.getuser()
        assert conn.host_key.fingerprint == sshd.host_fingerprint()
        assert str(ssh_client_key) in conn.auth_method


def test_encrypted_key_asks_the_passphrase_callback_until_right(
    sshd_factory: SshdFactory, tmp_path: Path, no_agent_options
):
    key = generate_key(tmp_path / "enc_key", passphrase="correct horse")
    server = sshd_factory.start(authorize=key)
    store = HostKeyStore(server.write_known_hosts(tmp_path / "kh"))
    asked: list[tuple[str, int]] = []

    def prompt(path: str, attempt: int) -> str:
        asked.append((path, attempt))
        return "wrong" if attempt == 1 else "correct horse"

    options = replace(no_agent_options, auth=replace(no_agent_options.auth, passphrase_prompt=prompt))
    route = resolve_route("127.0.0.1", port=server.port, identity_file=str(key), config_path=None)
    with connect(route, store, options) as conn:
        assert _whoami(conn) == getpass.getuser()
    assert asked == [(str(key), 1), (str(key), 2)]


def test_ssh_agent_key_logs_in_without_any_key_file(sshd_factory: SshdFactory, ssh_agent, tmp_path: Path):
    key = generate_key(tmp_path / "agent_only_key")
    server = sshd_factory.start(authorize=key)
    ssh_agent.add(key)
    key.unlink()  # the private key exists only inside the agent now
    store = HostKeyStore(server.write_known_hosts(tmp_path / "kh"))
    empty = tmp_path / "empty"
    empty.mkdir()
    options = SshOptions(auth=AuthOptions(use_agent=True, default_key_dir=str(empty), password_lookup=None))
    with connect(resolve_route("127.0.0.1", port=server.port, config_path=None), store, options) as conn:
        assert _whoami(conn) == getpass.getuser()
        assert conn.auth_method.startswith("publickey (agent key ssh-ed25519 SHA256:")


def test_proxyjump_through_a_second_sshd(
    sshd_factory: SshdFactory, ssh_client_key: Path, tmp_path: Path, no_agent_options
):
    bastion = sshd_factory.start(authorize=ssh_client_key)
    target = sshd_factory.start(authorize=ssh_client_key)
    store = HostKeyStore(target.write_known_hosts(bastion.write_known_hosts(tmp_path / "kh")))
    config = tmp_path / "ssh_config"
    config.write_text(f"Host *\n  IdentityFile {ssh_client_key}\n")
    route = resolve_route("127.0.0.1", port=target.port, jump=f"127.0.0.1:{bastion.port}", config_path=config)
    assert [hop.port for hop in route.hops] == [bastion.port, target.port]
    with connect(route, store, no_agent_options) as conn:
        assert _whoami(conn) == getpass.getuser()
        assert [k.fingerprint for k in conn.host_keys] == [bastion.host_fingerprint(), target.host_fingerprint()]
    # the target saw the connection come from the bastion's direct-tcpip channel, not from us directly
    assert "Accepted publickey" in target.log_path.read_text()
    assert "direct-tcpip" in bastion.log_path.read_text() or "Connection from 127.0.0.1" in bastion.log_path.read_text()


def test_config_alias_with_a_two_hop_proxyjump_chain(
    sshd_factory: SshdFactory, ssh_client_key: Path, tmp_path: Path, no_agent_options
):
    outer, inner, target = (sshd_factory.start(authorize=ssh_client_key) for _ in range(3))
    known = tmp_path / "kh"
    for server in (outer, inner, target):
        server.write_known_hosts(known)
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host outer\n  HostName 127.0.0.1\n  Port {outer.port}\n"
        f"Host inner\n  HostName 127.0.0.1\n  Port {inner.port}\n"
        f"Host gpu-a\n  HostName 127.0.0.1\n  Port {target.port}\n  User {getpass.getuser()}\n  ProxyJump outer,inner\n"
        f"Host *\n  IdentityFile {ssh_client_key}\n  IdentitiesOnly yes\n"
    )
    route = resolve_route("gpu-a", config_path=config)
    assert [hop.alias for hop in route.hops] == ["outer", "inner", "gpu-a"]
    with connect(route, HostKeyStore(known), no_agent_options) as conn:
        assert _whoami(conn) == getpass.getuser()
        assert conn.host_key.known_hosts_name == f"[127.0.0.1]:{target.port}"


def test_unknown_host_key_is_refused_then_accepted_and_saved(
    sshd: SshdServer, ssh_client_key: Path, tmp_path: Path, no_agent_options
):
    own = tmp_path / "meshdeck_known_hosts"
    store = HostKeyStore(own, user_files=[tmp_path / "absent_user_known_hosts"])
    route = resolve_route("127.0.0.1", port=sshd.port, identity_file=str(ssh_client_key), config_path=None)
    with pytest.raises(HostKeyUnknown) as refused:
        connect(route, store, no_agent_options)
    assert refused.value.fingerprint == sshd.host_fingerprint()
    assert refused.value.key_type == "ssh-ed25519"
    assert sshd.host_fingerprint() in str(refused.value)
    assert not own.exists()

    shown: list[HostKeyInfo] = []
    with connect(route, store, no_agent_options, host_key_prompt=lambda info: shown.append(info) or True) as conn:
        assert _whoami(conn) == getpass.getuser()
    assert [(i.known_hosts_name, i.fingerprint) for i in shown] == [(sshd.known_hosts_name, sshd.host_fingerprint())]
    assert own.read_text() == sshd.known_hosts_line()
    with connect(route, store, no_agent_options, host_key_prompt=lambda info: pytest.fail("asked twice")) as conn:
        assert conn.host_key.fingerprint == sshd.host_fingerprint()


def test_changed_host_key_is_refused_naming_both_fingerprints(
    sshd_factory: SshdFactory, ssh_client_key: Path, tmp_path: Path, no_agent_options
):
    server = sshd_factory.start(authorize=ssh_client_key)
    known = server.write_known_hosts(tmp_path / "known_hosts")
    old = server.host_fingerprint()
    server.stop()
    server.regenerate_host_key()
    server.start()
    new = server.host_fingerprint()
    assert old != new
    route = resolve_route("127.0.0.1", port=server.port, identity_file=str(ssh_client_key), config_path=None)
    with pytest.raises(HostKeyChanged) as refused:
        connect(
            route, HostKeyStore(tmp_path / "own", user_files=[known]), no_agent_options, host_key_prompt=lambda i: True
        )
    message = str(refused.value)
    assert old in message and new in message and str(known) in message
    assert known.read_text().count("\n") == 1  # never overwritten


def test_unauthorized_key_fails_auth_naming_what_was_tried(
    sshd: SshdServer, trusting_store, tmp_path: Path, no_agent_options
):
    stranger = generate_key(tmp_path / "stranger")
    route = resolve_route("127.0.0.1", port=sshd.port, identity_file=str(stranger), config_path=None)
    with pytest.raises(AuthFailed) as failed:
        connect(route, trusting_store, no_agent_options)
    assert str(stranger) in str(failed.value) and "publickey" in str(failed.value)


def test_closed_port_is_reported_unreachable(trusting_store, no_agent_options):
    from sshd import free_port

    port = parse_port(free_port())
    with pytest.raises(ConnectError, match="unreachable"):
        connect(resolve_route("127.0.0.1", port=port, config_path=None), trusting_store, no_agent_options)


def test_proxycommand_from_the_config_runs_openssh_as_the_proxy(
    sshd_factory: SshdFactory, ssh_client_key: Path, tmp_path: Path, no_agent_options
):
    ssh = shutil.which("ssh")
    if ssh is None:
        pytest.skip("OpenSSH client not installed (apt-get install openssh-client)")
    bastion = sshd_factory.start(authorize=ssh_client_key)
    target = sshd_factory.start(authorize=ssh_client_key)
    known = target.write_known_hosts(bastion.write_known_hosts(tmp_path / "kh"))
    proxy = shlex.join(
        [ssh, "-F", "/dev/null", "-i", str(ssh_client_key), "-p", str(bastion.port), "-o", "BatchMode=yes",
         "-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes", "-W", "%h:%p", "127.0.0.1"]
    )  # fmt: skip
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host behind-bastion\n  HostName 127.0.0.1\n  Port {target.port}\n  IdentityFile {ssh_client_key}\n"
        f"  ProxyCommand {proxy}\n"
    )
    route = resolve_route("behind-bastion", config_path=config)
    assert route.jumps == () and route.target.proxy_command.endswith(f"-W 127.0.0.1:{target.port} 127.0.0.1")
    with connect(route, HostKeyStore(known), no_agent_options) as conn:
        assert _whoami(conn) == getpass.getuser()
        assert conn.host_key.fingerprint == target.host_fingerprint()
