"""Targets, ~/.ssh/config resolution (aliases, Include, ProxyJump chains) and known_hosts checks, no network."""

from __future__ import annotations

import base64
import getpass
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from meshdeck.core.errors import InputError
from meshdeck.remote.errors import HostKeyChanged, HostKeyUnknown
from meshdeck.remote.hostkeys import HostKeyStore
from meshdeck.remote.sshconfig import TargetSpec, parse_target, resolve_route


def _key(kind: str = "ed25519") -> paramiko.PKey:
    private = ed25519.Ed25519PrivateKey.generate() if kind == "ed25519" else ec.generate_private_key(ec.SECP256R1())
    line = private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    key_type, blob = line.split()[:2]
    return paramiko.PKey.from_type_string(key_type.decode(), base64.b64decode(blob))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu-a", TargetSpec("gpu-a")),
        ("ubuntu@10.0.0.5", TargetSpec("10.0.0.5", "ubuntu")),
        ("ops@bastion:2200", TargetSpec("bastion", "ops", 2200)),
        ("ssh://root@gpu.example.com:2222", TargetSpec("gpu.example.com", "root", 2222)),
        ("[fe80::1%eth0]:22", TargetSpec("fe80::1%eth0", None, 22)),
        ("user@[2001:db8::7]", TargetSpec("2001:db8::7", "user")),
    ],
)
def test_targets_parse_like_ssh(text: str, expected: TargetSpec):
    assert parse_target(text) == expected


@pytest.mark.parametrize("text", ["", "-oProxyCommand=x", "a b", "@host", "host:99999", "[::1", "h;rm -rf"])
def test_bad_targets_are_refused_naming_the_field(text: str):
    with pytest.raises(InputError) as refused:
        parse_target(text, "target")
    assert str(refused.value).startswith("target: ")


def test_config_alias_supplies_hostname_user_port_and_key(tmp_path: Path):
    key = tmp_path / "id_gpu"
    key.write_text("x")
    config = tmp_path / "config"
    config.write_text(
        f"Host gpu-*\n  User ops\n  IdentityFile {key}\n  IdentitiesOnly yes\n  ConnectTimeout 7\n"
        "Host gpu-a\n  HostName 10.1.2.3\n  Port 2201\n  HostKeyAlias gpu-a.cluster\n"
    )
    target = resolve_route("gpu-a", config_path=config).target
    assert (target.hostname, target.port, target.user) == ("10.1.2.3", 2201, "ops")
    assert target.identity_files == (str(key),) and target.identities_only and target.connect_timeout_s == 7
    assert target.known_hosts_name == "[gpu-a.cluster]:2201"
    assert resolve_route("gpu-a", port=22, config_path=config).target.known_hosts_name == "gpu-a.cluster"
    assert resolve_route("other", config_path=config).target.user == getpass.getuser()


def test_include_directives_are_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh" / "config.d").mkdir(parents=True)
    (tmp_path / ".ssh" / "config.d" / "cluster.conf").write_text("Host h100-*\n  User trainer\n  Port 2222\n")
    config = tmp_path / ".ssh" / "config"
    config.write_text("Include config.d/*.conf\nHost *\n  User fallback\n")
    target = resolve_route("h100-7", config_path=config).target
    assert (target.user, target.port) == ("trainer", 2222)


def test_proxyjump_chains_follow_the_first_jump_hosts_own_config(tmp_path: Path):
    config = tmp_path / "config"
    config.write_text(
        "Host edge\n  HostName 203.0.113.10\n  User gate\n"
        "Host inner\n  HostName 10.0.0.2\n  ProxyJump edge\n"
        "Host gpu-a\n  HostName 10.0.9.1\n  ProxyJump inner,ops@10.0.5.5:2200\n"
    )
    route = resolve_route("gpu-a", config_path=config)
    assert [(h.hostname, h.port) for h in route.hops] == [
        ("203.0.113.10", 22),
        ("10.0.0.2", 22),
        ("10.0.5.5", 2200),
        ("10.0.9.1", 22),
    ]
    assert route.jumps[0].user == "gate" and route.jumps[2].user == "ops"
    assert resolve_route("gpu-a", jump="none", config_path=config).jumps == ()  # -J none overrides


def test_proxyjump_loop_in_the_config_is_refused(tmp_path: Path):
    config = tmp_path / "config"
    config.write_text("Host a\n  ProxyJump b\nHost b\n  ProxyJump a\n")
    with pytest.raises(InputError, match="jump: ProxyJump nested deeper"):
        resolve_route("target", jump="a", config_path=config)


def test_proxycommand_is_kept_with_tokens_expanded(tmp_path: Path):
    config = tmp_path / "config"
    config.write_text("Host gpu-a\n  HostName 10.0.0.9\n  Port 2022\n  ProxyCommand nc -X 5 -x socks:1080 %h %p\n")
    assert resolve_route("gpu-a", config_path=config).target.proxy_command == "nc -X 5 -x socks:1080 10.0.0.9 2022"


def test_known_key_is_accepted_from_a_hashed_user_known_hosts(tmp_path: Path):
    key = _key()
    hashed = paramiko.HostKeys.hash_host("[10.0.0.5]:2222")
    user_file = tmp_path / "known_hosts"
    user_file.write_text(f"{hashed} {key.get_name()} {key.get_base64()}\n")
    store = HostKeyStore(tmp_path / "own", user_files=[user_file])
    info = store.verify("[10.0.0.5]:2222", key, prompt=lambda i: pytest.fail("must not ask about a known key"))
    assert info.fingerprint == key.fingerprint
    assert not (tmp_path / "own").exists()


def test_unknown_key_with_other_types_known_names_them_and_prefers_them(tmp_path: Path):
    known, presented = _key("ecdsa"), _key()
    own = tmp_path / "own"
    own.write_text(f"gpu-a {known.get_name()} {known.get_base64()}\n")
    store = HostKeyStore(own)
    assert store.preferred_key_types("gpu-a", ["ssh-ed25519", "ecdsa-sha2-nistp256", "rsa-sha2-512"]) == [
        "ecdsa-sha2-nistp256",
        "ssh-ed25519",
        "rsa-sha2-512",
    ]
    with pytest.raises(HostKeyUnknown) as unknown:
        store.verify("gpu-a", presented)
    assert unknown.value.other_known_types == ("ecdsa-sha2-nistp256",)
    assert "keys of other types are known for it: ecdsa-sha2-nistp256" in str(unknown.value)


def test_changed_key_is_refused_and_never_overwritten_even_if_the_prompt_says_yes(tmp_path: Path):
    old, new = _key(), _key()
    user_file = tmp_path / "known_hosts"
    user_file.write_text(f"[gpu-a]:2222 {old.get_name()} {old.get_base64()}\n")
    store = HostKeyStore(tmp_path / "own", user_files=[user_file])
    with pytest.raises(HostKeyChanged) as changed:
        store.verify("[gpu-a]:2222", new, prompt=lambda info: True)
    assert (changed.value.expected, changed.value.presented) == (old.fingerprint, new.fingerprint)
    assert f"ssh-keygen -R '[gpu-a]:2222' -f {user_file}" in str(changed.value)
    assert not (tmp_path / "own").exists()


def test_accepted_keys_are_appended_atomically_with_private_permissions(tmp_path: Path):
    own = tmp_path / "sub" / "known_hosts"
    store = HostKeyStore(own)
    first, second = _key(), _key()
    store.verify("gpu-a", first, prompt=lambda info: True)
    store.accept("[gpu-b]:2200", second.get_name(), second.get_base64())
    assert own.read_text().splitlines() == [
        f"gpu-a ssh-ed25519 {first.get_base64()}",
        f"[gpu-b]:2200 ssh-ed25519 {second.get_base64()}",
    ]
    assert own.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in own.parent.iterdir()] == ["known_hosts"]  # no temp file left
    with pytest.raises(InputError, match="host_key"):
        store.accept("gpu-c", "ssh-ed25519", "not base64!")
