"""An OS keyring that lives in memory, for tests that store profile secrets.

It is a real `keyring.backend.KeyringBackend` (the same calls the app makes reach it through
`keyring.set_keyring`), so the app's code path is the one a desktop keyring takes. `installed()`
puts one in place for a test and restores the previous backend afterwards; `installed(None)`
installs keyring's own "no keyring" backend (`keyring.backends.fail.Keyring`), which is what CI and
a server without a desktop session have.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import keyring
from jaraco.classes import properties
from keyring.backend import KeyringBackend
from keyring.backends import fail
from keyring.errors import PasswordDeleteError


class MemoryKeyring(KeyringBackend):
    """Passwords in a dict keyed by (service, account). Never chosen by keyring's own detection (that
    would hand every later test in the process this keyring): only `installed()` puts it in place."""

    @properties.classproperty
    def priority(cls) -> float:
        raise RuntimeError("a test keyring: installed explicitly, never detected")

    def __init__(self) -> None:
        super().__init__()
        self.passwords: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.passwords.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.passwords[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        if self.passwords.pop((service, username), None) is None:
            raise PasswordDeleteError(f"no password for {username} in {service}")


@contextlib.contextmanager
def installed(backend: KeyringBackend | None) -> Iterator[KeyringBackend]:
    """`backend` (None: the failing "no keyring" backend) as the process's keyring for a with-block."""
    previous = keyring.get_keyring()
    chosen = backend if backend is not None else fail.Keyring()
    keyring.set_keyring(chosen)
    try:
        yield chosen
    finally:
        keyring.set_keyring(previous)
