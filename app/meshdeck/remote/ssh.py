"""One authenticated SSH connection to a server, through its jump hosts, with host keys checked per hop.

paramiko's SSHClient is not used: it has no ProxyJump and its host-key policy model invites
AutoAddPolicy. Each hop here is a bare `paramiko.Transport` over a TCP socket (the first hop, or
its ProxyCommand) or over a `direct-tcpip` channel of the previous hop; its key is checked by
`HostKeyStore.verify` before any credential is sent; then `auth.authenticate` logs in. Keepalive
is 15 s on every hop. Commands are argv lists joined with `shlex.join` (never string-built).
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import paramiko

from meshdeck.core.text import printable
from meshdeck.remote.auth import AuthOptions, authenticate
from meshdeck.remote.errors import ConnectError, ConnectionLost, RemoteOutputTooLarge
from meshdeck.remote.hostkeys import HostKeyInfo, HostKeyPrompt, HostKeyStore
from meshdeck.remote.sshconfig import SshEndpoint, SshRoute

log = logging.getLogger(__name__)

KEEPALIVE_S = 15
MAX_OUTPUT_BYTES = 1024 * 1024  # per stream, for `run`: the bootstrap probe prints under 1 KiB


@dataclass(frozen=True)
class SshOptions:
    """How to connect: timeouts, keepalive, and how to authenticate."""

    connect_timeout_s: float = 10.0
    keepalive_s: int = KEEPALIVE_S
    auth: AuthOptions = field(default_factory=AuthOptions)


@dataclass(frozen=True)
class ExecResult:
    exit_status: int
    stdout: bytes
    stderr: bytes


class _ProxyCommand(paramiko.ProxyCommand):
    """paramiko's ProxyCommand only sends SIGTERM on close; also reap the process and close its pipes."""

    def close(self) -> None:
        if self.process.poll() is None:
            super().close()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def _open_socket(endpoint: SshEndpoint, timeout: float) -> Any:
    if endpoint.proxy_command:
        try:
            return _ProxyCommand(endpoint.proxy_command)
        except (OSError, paramiko.SSHException) as exc:
            raise ConnectError(f"{endpoint.label}: ProxyCommand {endpoint.proxy_command!r} failed: {exc}") from None
    try:
        sock = socket.create_connection((endpoint.hostname, endpoint.port), timeout=timeout)
    except TimeoutError:
        raise ConnectError(f"{endpoint.label}: unreachable: no answer within {timeout:g} s") from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConnectError(f"{endpoint.label}: unreachable: {reason}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _channel_through(previous: paramiko.Transport, via: SshEndpoint, endpoint: SshEndpoint, timeout: float) -> Any:
    try:
        return previous.open_channel(
            "direct-tcpip", (endpoint.hostname, endpoint.port), ("127.0.0.1", 0), timeout=timeout
        )
    except paramiko.ChannelException as exc:
        raise ConnectError(
            f"{endpoint.label}: jump host {via.label} could not reach it: {exc.text or exc.code}"
        ) from None
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise ConnectError(f"{endpoint.label}: jump host {via.label} failed: {exc}") from None


def _handshake(
    sock: Any, endpoint: SshEndpoint, store: HostKeyStore, prompt: HostKeyPrompt | None, options: SshOptions
) -> tuple[paramiko.Transport, HostKeyInfo, str]:
    timeout = endpoint.connect_timeout_s or options.connect_timeout_s
    transport = paramiko.Transport(sock)
    try:
        transport.banner_timeout = timeout
        transport.handshake_timeout = timeout
        transport.auth_timeout = timeout
        security = transport.get_security_options()
        security.key_types = store.preferred_key_types(
            endpoint.known_hosts_name, list(security.key_types), endpoint.user_known_hosts
        )
        try:
            transport.start_client(timeout=timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectError(f"{endpoint.label}: SSH negotiation failed: {exc or type(exc).__name__}") from None
        if not transport.is_active() or transport.host_key is None:
            raise ConnectError(f"{endpoint.label}: SSH negotiation did not finish within {timeout:g} s")
        key = transport.get_remote_server_key()
        info = store.verify(endpoint.known_hosts_name, key, prompt, endpoint.user_known_hosts)
        try:
            how = authenticate(transport, endpoint, options.auth)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectError(f"{endpoint.label}: connection failed during login: {exc}") from None
        transport.set_keepalive(options.keepalive_s)
        return transport, info, how
    except BaseException:
        transport.close()
        raise


class SshConnection:
    """A logged-in SSH connection to `route.target` (through `route.jumps`). Close it when done."""

    def __init__(self, route: SshRoute, transports: list[paramiko.Transport], host_keys: list[HostKeyInfo], auth: str):
        self.route = route
        self._transports = transports
        self.host_keys = host_keys  # one per hop, target last
        self.auth_method = auth
        self._closed = threading.Event()

    @property
    def transport(self) -> paramiko.Transport:
        return self._transports[-1]

    @property
    def host_key(self) -> HostKeyInfo:
        return self.host_keys[-1]

    @property
    def label(self) -> str:
        return self.route.target.label

    def is_active(self) -> bool:
        return not self._closed.is_set() and all(t.is_active() for t in self._transports)

    def open_exec(self, argv: Sequence[str], timeout: float = 30.0) -> paramiko.Channel:
        """Start `argv` on the server (joined with shlex.join for the remote login shell)."""
        command = shlex.join(argv)
        try:
            channel = self.transport.open_session(timeout=timeout)
            channel.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectionLost(f"{self.label}: cannot run {argv[0]!r}: {exc}") from None
        return channel

    def run(
        self,
        argv: Sequence[str],
        stdin: bytes = b"",
        timeout: float = 60.0,
        *,
        max_output_bytes: int = MAX_OUTPUT_BYTES,
        what: str | None = None,
    ) -> ExecResult:
        """Run `argv` to completion and collect its output (for short bootstrap commands).

        At most `max_output_bytes` of stdout and as many of stderr are kept: past that the channel is
        closed (the command gets SIGPIPE) and RemoteOutputTooLarge names the host and `what` (default:
        the command line, shortened)."""
        channel = self.open_exec(argv, timeout)
        channel.settimeout(0.05)  # short polls so stderr is drained too (it shares the channel window)
        deadline = time.monotonic() + timeout
        stdout, stderr = bytearray(), bytearray()

        def read(buffer: bytearray, receive: Callable[[int], bytes], stream: str) -> bytes:
            chunk = receive(min(65536, max_output_bytes + 1 - len(buffer)))
            buffer += chunk
            if len(buffer) > max_output_bytes:
                command = what or printable(shlex.join(argv), 120)
                raise RemoteOutputTooLarge(
                    f"{self.label}: {command} printed more than {max_output_bytes} bytes on {stream}; "
                    "stopped reading it"
                )
            return chunk

        try:
            if stdin:
                channel.sendall(stdin)
            channel.shutdown_write()
            while True:
                while channel.recv_stderr_ready():
                    read(stderr, channel.recv_stderr, "stderr")
                try:
                    chunk = read(stdout, channel.recv, "stdout")
                except TimeoutError:
                    if time.monotonic() > deadline:
                        raise
                    continue
                if not chunk:
                    break
            channel.settimeout(max(0.1, deadline - time.monotonic()))
            while read(stderr, channel.recv_stderr, "stderr"):
                pass
            if not channel.status_event.wait(max(0.1, deadline - time.monotonic())):
                raise TimeoutError
            status = channel.exit_status
        except TimeoutError:
            raise ConnectionLost(f"{self.label}: {argv[0]!r} did not finish within {timeout:g} s") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectionLost(f"{self.label}: running {argv[0]!r} failed: {exc}") from None
        finally:
            channel.close()
        return ExecResult(status, bytes(stdout), bytes(stderr))

    def sftp(self) -> paramiko.SFTPClient:
        try:
            client = self.transport.open_sftp_client()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectionLost(f"{self.label}: cannot open SFTP: {exc}") from None
        if client is None:
            raise ConnectionLost(f"{self.label}: the server refused the SFTP subsystem")
        return client

    def close(self) -> None:
        self._closed.set()
        for transport in reversed(self._transports):
            transport.close()

    def __enter__(self) -> SshConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(
    route: SshRoute,
    store: HostKeyStore,
    options: SshOptions | None = None,
    host_key_prompt: HostKeyPrompt | None = None,
) -> SshConnection:
    """Connect hop by hop (key checked, then login) and return the connection to the target.

    Raises ConnectError (unreachable, negotiation), HostKeyUnknown, HostKeyChanged or AuthFailed.
    """
    options = options or SshOptions()
    transports: list[paramiko.Transport] = []
    host_keys: list[HostKeyInfo] = []
    auth = ""
    try:
        previous: SshEndpoint | None = None
        for hop in route.hops:
            timeout = hop.connect_timeout_s or options.connect_timeout_s
            if previous is None:
                sock = _open_socket(hop, timeout)
            else:
                sock = _channel_through(transports[-1], previous, hop, timeout)
            transport, info, auth = _handshake(sock, hop, store, host_key_prompt, options)
            transports.append(transport)
            host_keys.append(info)
            log.debug("logged in to %s by %s (host key %s)", hop.label, auth, info.fingerprint)
            previous = hop
    except BaseException:
        for transport in reversed(transports):
            transport.close()
        raise
    return SshConnection(route, transports, host_keys, auth)
