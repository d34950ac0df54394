"""Password login with the password from the OS keyring (injected here), against an in-process paramiko
SSH server that allows only passwords — the test sshd cannot (root's password is unknown, PAM is off)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from meshdeck.remote.auth import AuthOptions
from meshdeck.remote.errors import AuthFailed
from meshdeck.remote.hostkeys import HostKeyStore
from meshdeck.remote.ssh import SshOptions, connect
from meshdeck.remote.sshconfig import SshEndpoint, SshRoute

PASSWORD = "correct horse battery staple"


class PasswordOnly(paramiko.ServerInterface):
    def __init__(self) -> None:
        self.attempts: list[tuple[str, str]] = []

    def get_allowed_auths(self, username: str) -> str:
        return "password"

    def check_auth_password(self, username: str, password: str) -> int:
        self.attempts.append((username, password))
        return paramiko.AUTH_SUCCESSFUL if password == PASSWORD else paramiko.AUTH_FAILED


@pytest.fixture
def password_server(tmp_path: Path) -> Iterator[tuple[int, paramiko.PKey, PasswordOnly]]:
    private = ed25519.Ed25519PrivateKey.generate()
    key_file = tmp_path / "host_key"
    key_file.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
    )
    host_key = paramiko.Ed25519Key.from_private_key_file(str(key_file))
    interface = PasswordOnly()
    listener = socket.create_server(("127.0.0.1", 0))
    transports: list[paramiko.Transport] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            transport = paramiko.Transport(conn)
            transport.add_server_key(host_key)
            transports.append(transport)
            transport.start_server(server=interface)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], host_key, interface
    listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
    listener.close()
    for transport in transports:
        transport.close()
    thread.join(5)


def _connect(port: int, host_key: paramiko.PKey, tmp_path: Path, password: str | None):
    own = tmp_path / "known_hosts"
    own.write_text(f"[127.0.0.1]:{port} {host_key.get_name()} {host_key.get_base64()}\n")
    asked: list[SshEndpoint] = []

    def lookup(endpoint: SshEndpoint) -> str | None:
        asked.append(endpoint)
        return password

    empty = tmp_path / "keys"
    empty.mkdir(exist_ok=True)
    options = SshOptions(auth=AuthOptions(use_agent=False, default_key_dir=str(empty), password_lookup=lookup))
    route = SshRoute(SshEndpoint("box", "127.0.0.1", port, "ops"))
    return connect(route, HostKeyStore(own), options), asked


def test_password_from_the_keyring_logs_in(password_server, tmp_path: Path):
    port, host_key, interface = password_server
    conn, asked = _connect(port, host_key, tmp_path, PASSWORD)
    with conn:
        assert conn.auth_method == "password (keyring)"
        assert conn.transport.is_authenticated()
    assert [(e.user, e.hostname, e.port) for e in asked] == [("ops", "127.0.0.1", port)]
    assert interface.attempts == [("ops", PASSWORD)]


def test_wrong_or_missing_password_fails_naming_what_was_tried(password_server, tmp_path: Path):
    port, host_key, _ = password_server
    with pytest.raises(AuthFailed) as wrong:
        _connect(port, host_key, tmp_path, "hunter2")
    assert "tried password from keyring" in str(wrong.value) and "server allows: password" in str(wrong.value)
    with pytest.raises(AuthFailed, match="tried nothing"):
        _connect(port, host_key, tmp_path, None)
