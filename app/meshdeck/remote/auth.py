"""Log in the way `ssh` would: ssh-agent keys, then key files, then a password kept in the OS keyring.

Key files are the explicit ones (`-i`, IdentityFile) and then the default ~/.ssh/id_* files. An
encrypted key asks the passphrase callback (None skips the key); a wrong passphrase asks again, up
to three times. With IdentitiesOnly, agent keys are used only when they match a configured file.
Passwords are never stored by meshdeck's database: `keyring_password` reads the OS keyring under
service "meshdeck" and account `user@host:port`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import paramiko
from paramiko.pkey import PublicBlob

from meshdeck.remote.errors import AuthFailed
from meshdeck.remote.sshconfig import SshEndpoint

log = logging.getLogger(__name__)

KEYRING_SERVICE = "meshdeck"
DEFAULT_KEY_NAMES = ("id_ed25519", "id_ecdsa", "id_rsa")
PASSPHRASE_ATTEMPTS = 3

PassphrasePrompt = Callable[[str, int], str | None]  # (key path, attempt starting at 1) -> passphrase or None
PasswordLookup = Callable[[SshEndpoint], str | None]


def keyring_account(endpoint: SshEndpoint) -> str:
    return f"{endpoint.user}@{endpoint.hostname}:{endpoint.port}"


def keyring_password(endpoint: SshEndpoint) -> str | None:
    """The password saved for this user@host:port in the OS keyring, or None (also when no keyring exists)."""
    try:
        import keyring
        from keyring.errors import KeyringError
    except ImportError:  # pragma: no cover - keyring is a dependency
        return None
    try:
        return keyring.get_password(KEYRING_SERVICE, keyring_account(endpoint))
    except KeyringError as exc:
        log.debug("no usable OS keyring: %s", exc)
        return None


def store_keyring_password(endpoint: SshEndpoint, password: str) -> None:
    """Save a password in the OS keyring (raises keyring.errors.KeyringError if there is none)."""
    import keyring

    keyring.set_password(KEYRING_SERVICE, keyring_account(endpoint), password)


@dataclass(frozen=True)
class AuthOptions:
    use_agent: bool = True
    default_key_dir: str = "~/.ssh"
    passphrase_prompt: PassphrasePrompt | None = None
    password_lookup: PasswordLookup | None = keyring_password


@dataclass
class _Attempts:
    tried: list[str] = field(default_factory=list)
    methods_allowed: list[str] = field(default_factory=list)


def _public_blob(path: str) -> bytes | None:
    """The public key blob from `path.pub`, to match agent keys and skip repeats without decrypting."""
    try:
        text = Path(path + ".pub").read_text(encoding="utf-8").split()
        return PublicBlob.from_string(" ".join(text[:2])).key_blob
    except (OSError, ValueError, IndexError):
        return None


def _key_files(endpoint: SshEndpoint, options: AuthOptions) -> list[str]:
    files = list(endpoint.identity_files)
    if not endpoint.identity_files or not endpoint.identities_only:
        default_dir = Path(os.path.expanduser(options.default_key_dir))
        files += [str(default_dir / name) for name in DEFAULT_KEY_NAMES]
    return [f for f in dict.fromkeys(files) if os.path.isfile(f)]


def _load_key_file(path: str, prompt: PassphrasePrompt | None) -> paramiko.PKey | None:
    try:
        return paramiko.PKey.from_path(path)
    except TypeError:  # encrypted and no passphrase given
        pass
    except (ValueError, OSError, paramiko.SSHException) as exc:
        log.warning("skipping key file %s: %s", path, exc)
        return None
    if prompt is None:
        log.info("skipping encrypted key %s: no passphrase callback", path)
        return None
    for attempt in range(1, PASSPHRASE_ATTEMPTS + 1):
        passphrase = prompt(path, attempt)
        if passphrase is None:
            return None
        try:
            # types-paramiko says str, but cryptography's key loaders under from_path take only bytes
            return paramiko.PKey.from_path(path, passphrase.encode("utf-8"))  # type: ignore[arg-type]
        except (ValueError, TypeError):
            log.warning("wrong passphrase for %s (attempt %d of %d)", path, attempt, PASSPHRASE_ATTEMPTS)
    return None


def _try_key(transport: paramiko.Transport, user: str, key: paramiko.PKey, what: str, attempts: _Attempts) -> bool:
    attempts.tried.append(what)
    try:
        remaining = transport.auth_publickey(user, key)
    except paramiko.BadAuthenticationType as exc:
        attempts.methods_allowed = list(exc.allowed_types)
        return False
    except paramiko.AuthenticationException:
        return False
    if remaining:  # partial success (e.g. publickey then keyboard-interactive): not something we can finish
        attempts.methods_allowed = list(remaining)
        return False
    return transport.is_authenticated()


@contextlib.contextmanager
def _agent_keys(endpoint: SshEndpoint, options: AuthOptions) -> Iterator[tuple[paramiko.AgentKey, ...]]:
    """The ssh-agent's keys (those matching IdentityFile when IdentitiesOnly); the agent connection
    stays open while they are used to sign, and is closed after."""
    if not options.use_agent or not os.environ.get("SSH_AUTH_SOCK"):
        yield ()
        return
    try:
        agent = paramiko.Agent()
        keys = agent.get_keys()
    except paramiko.SSHException as exc:
        log.warning("ssh-agent unusable: %s", exc)
        yield ()
        return
    try:
        if endpoint.identities_only:
            wanted = {_public_blob(p) for p in endpoint.identity_files} - {None}
            keys = tuple(k for k in keys if k.asbytes() in wanted)
        yield keys
    finally:
        agent.close()


def authenticate(transport: paramiko.Transport, endpoint: SshEndpoint, options: AuthOptions) -> str:
    """Authenticate `transport` as `endpoint.user`; return how ("publickey agent ...", "password keyring").

    Raises AuthFailed naming the host, the user and what was tried.
    """
    attempts = _Attempts()
    user = endpoint.user
    try:  # like OpenSSH: ask with "none" first, which tells us what the server allows
        transport.auth_none(user)
        if transport.is_authenticated():
            return "none"
    except paramiko.BadAuthenticationType as exc:
        attempts.methods_allowed = list(exc.allowed_types)
    except paramiko.AuthenticationException:
        pass
    offered: set[bytes] = set()
    with _agent_keys(endpoint, options) as agent_keys:
        for key in agent_keys:
            offered.add(key.asbytes())
            what = f"agent key {key.get_name()} {key.fingerprint}"
            if _try_key(transport, user, key, what, attempts):
                return f"publickey ({what})"
    for path in _key_files(endpoint, options):
        if _public_blob(path) in offered:
            continue
        file_key = _load_key_file(path, options.passphrase_prompt)
        if file_key is None or file_key.asbytes() in offered:
            continue
        offered.add(file_key.asbytes())
        if _try_key(transport, user, file_key, f"key {path}", attempts):
            return f"publickey ({path})"
    password = options.password_lookup(endpoint) if options.password_lookup else None
    if password is not None and transport.is_active() and "password" in (attempts.methods_allowed or ["password"]):
        attempts.tried.append("password from keyring")
        try:
            transport.auth_password(user, password, fallback=True)
            if transport.is_authenticated():
                return "password (keyring)"
        except paramiko.BadAuthenticationType as exc:
            attempts.methods_allowed = list(exc.allowed_types)
        except paramiko.AuthenticationException:
            pass
    tried = ", ".join(attempts.tried) or "nothing (no ssh-agent keys, no key files, no keyring password)"
    allowed = f"; server allows: {', '.join(attempts.methods_allowed)}" if attempts.methods_allowed else ""
    raise AuthFailed(f"{endpoint.label}: authentication failed for user {user!r}; tried {tried}{allowed}")
