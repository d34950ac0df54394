"""The errors `meshdeck.remote` raises, each one line a user can act on.

`permanent` tells the host supervisor whether retrying the same thing can help: an unreachable host
or a dropped connection is retried with backoff; an unknown or changed host key, an auth failure or
a server without a usable python3 is not retried until the user does something about it.
"""

from __future__ import annotations


class RemoteError(Exception):
    """Base of every error from this package. `str(error)` is one line naming the host."""

    permanent = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConnectError(RemoteError):
    """The host (or a jump host) could not be reached: refused, timed out, DNS, SSH negotiation."""


class HostConfigError(RemoteError):
    """How to reach the host is not usable (bad target or jump, missing key file, broken ssh config)."""

    permanent = True


class ConnectionLost(RemoteError):
    """An established connection ended (EOF, reset, keepalive failure)."""


class NotConnected(RemoteError):
    """A call was made to a host that has no live agent connection right now."""


class HostKeyUnknown(RemoteError):
    """The server's host key is in no known_hosts file and nobody accepted it."""

    permanent = True

    def __init__(
        self,
        known_hosts_name: str,
        key_type: str,
        fingerprint: str,
        other_known_types: tuple[str, ...] = (),
        key_base64: str = "",
    ) -> None:
        also = ""
        if other_known_types:
            also = f" (keys of other types are known for it: {', '.join(other_known_types)})"
        super().__init__(
            f"{known_hosts_name}: unknown host key {key_type} {fingerprint}{also}; "
            "check the fingerprint with the server's admin, then accept it (CLI: --accept-new)"
        )
        self.known_hosts_name = known_hosts_name
        self.key_type = key_type
        self.fingerprint = fingerprint
        self.other_known_types = other_known_types
        self.key_base64 = key_base64  # lets a UI accept exactly the key that was shown


class HostKeyChanged(RemoteError):
    """The server presented a different key of a type we already know: refused, never overwritten."""

    permanent = True

    def __init__(self, known_hosts_name: str, key_type: str, expected: str, presented: str, known_in: str) -> None:
        super().__init__(
            f"{known_hosts_name}: HOST KEY CHANGED: known {key_type} key is {expected} (in {known_in}) "
            f"but the server presented {presented}; this may be an attack. If the server was reinstalled, "
            f"remove the old key with: ssh-keygen -R '{known_hosts_name}' -f {known_in}"
        )
        self.known_hosts_name = known_hosts_name
        self.key_type = key_type
        self.expected = expected
        self.presented = presented
        self.known_in = known_in


class AuthFailed(RemoteError):
    """No key, agent key or stored password was accepted."""

    permanent = True


class BootstrapError(RemoteError):
    """The server cannot run the agent: no python3, too old, no disk space, read-only home, upload failed.

    `reason` is a stable code: no_python, python_too_old, no_disk_space, read_only, not_writable,
    upload_failed, probe_failed, stale_agent (the local zipapp is not this app's agent version and protocol),
    unsafe_cache_dir (the remote cache dir is not the SSH user's alone), agent_changed (the server refused to
    run the uploaded file: it no longer has the uploaded SHA-256, or is not the user's alone).
    """

    permanent = True

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class AgentNotFound(RemoteError):
    """The local agent zipapp (meshdeck-agent.pyz) to upload could not be found."""

    permanent = True


class ProtocolMismatch(RemoteError):
    """The agent speaks another protocol major (the message names both)."""

    permanent = True


class AgentVersionConflict(RemoteError):
    """A daemon of another agent version holds the server's agent socket and `attach` could not replace it
    (the message, from attach, names both versions and what to do)."""

    permanent = True


class RpcError(RemoteError):
    """The agent answered a request with an error reply; `code` is one of protocol.ERROR_CODES."""

    def __init__(self, host: str, method: str, code: str, message: str) -> None:
        super().__init__(f"{host}: {method} failed: {code}: {message}")
        self.host = host
        self.method = method
        self.code = code
        self.agent_message = message


class RpcTimeout(RemoteError):
    """No answer to a request within its timeout (the connection may still be alive)."""


class BadAnswer(RemoteError):
    """The agent answered in a shape the protocol does not allow (a bug or a hostile agent): the
    connection is dropped and retried with backoff, the message naming the host and the field."""


class InventoryInvalid(RemoteError):
    """The agent's `inventory` answer breaks its shape (meshdeck_agent.wire_inventory): `field` is the bad
    value's path ("gpus[3].memory_total_bytes", "" for the whole answer). Asking again gets the same
    answer, so a supervised host fails with this until retried."""

    permanent = True

    def __init__(self, host: str, field: str, problem: str) -> None:
        where = f"inventory.{field}" if field else "inventory"
        super().__init__(f"{host}: the agent's {where} is malformed: {problem}")
        self.host = host
        self.field = field
        self.problem = problem


class RemoteOutputTooLarge(RemoteError):
    """A remote command printed more than the app reads from it (`ssh.MAX_OUTPUT_BYTES`); it was stopped.
    Running it again prints as much again, so it is not retried."""

    permanent = True
