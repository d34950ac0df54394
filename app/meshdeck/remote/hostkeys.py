"""Host key checking as strict as OpenSSH's, never AutoAddPolicy.

Keys are looked up in the user's known_hosts files (read, never written) and in meshdeck's own
known_hosts file (where keys the user accepts are saved). Entries are filed under `host`, or
`[host]:port` when the port is not 22; hashed entries (`|1|...`) match too. For each server key:

- a key matching an entry, with no conflicting entry of the same type → accepted;
- an entry of the same type holding a different key → `HostKeyChanged`, naming both fingerprints
  and the file to fix; never overwritten;
- no entry of that type → the prompt callback sees the key type and SHA256 fingerprint (the form
  `ssh-keygen -lf` prints); True saves it to meshdeck's file, False or no callback raises
  `HostKeyUnknown`.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import stat
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko

from meshdeck.core.errors import InputError
from meshdeck.remote.errors import HostKeyChanged, HostKeyUnknown

log = logging.getLogger(__name__)

# The signature algorithms OpenSSH negotiates for an "ssh-rsa" host key today.
_RSA_SIGNATURES = ("rsa-sha2-512", "rsa-sha2-256")


@dataclass(frozen=True)
class HostKeyInfo:
    """A server's host key as shown to a person: `ssh-ed25519 SHA256:...` under a known_hosts name."""

    known_hosts_name: str
    key_type: str
    fingerprint: str
    key_base64: str
    other_known_types: tuple[str, ...] = ()

    @classmethod
    def of(cls, known_hosts_name: str, key: paramiko.PKey, other_known_types: tuple[str, ...] = ()) -> HostKeyInfo:
        return cls(known_hosts_name, key.get_name(), fingerprint(key), key.get_base64(), other_known_types)


HostKeyPrompt = Callable[[HostKeyInfo], bool]


def fingerprint(key: paramiko.PKey) -> str:
    """`SHA256:<base64 without padding>`, exactly as OpenSSH prints it."""
    return key.fingerprint


def _load(path: Path) -> paramiko.HostKeys:
    keys = paramiko.HostKeys()
    try:
        keys.load(str(path))
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("cannot read known_hosts file %s: %s", path, exc)
    return keys


def _keep_private(path: Path) -> None:
    """meshdeck's own known_hosts is written 0600; one found looser (written by hand, or by an old
    version) is tightened so that no other user can read which servers this user trusts."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode & 0o077:
            os.chmod(path, mode & 0o700)
            log.warning("tightened the permissions of %s from %04o to %04o", path, mode, mode & 0o700)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot tighten the permissions of %s: %s", path, exc)


class HostKeyStore:
    """The known_hosts files to consult and the one meshdeck writes accepted keys to. Thread-safe."""

    def __init__(self, own_file: str | os.PathLike[str], user_files: Sequence[str | os.PathLike[str]] = ()) -> None:
        self.own_file = Path(os.path.expanduser(os.fspath(own_file)))
        self.user_files = tuple(Path(os.path.expanduser(os.fspath(p))) for p in user_files)
        self._lock = threading.Lock()
        _keep_private(self.own_file)

    def _files(self, extra_user_files: Sequence[str] = ()) -> list[Path]:
        files = [*self.user_files, *(Path(p) for p in extra_user_files), self.own_file]
        return list(dict.fromkeys(files))  # keep order, drop repeats

    def known_keys(self, name: str, extra_user_files: Sequence[str] = ()) -> list[tuple[Path, str, paramiko.PKey]]:
        """(file, key type, key) for every entry filed under `name`, files in lookup order."""
        found: list[tuple[Path, str, paramiko.PKey]] = []
        with self._lock:
            for path in self._files(extra_user_files):
                entries = _load(path).lookup(name)
                if entries:
                    found.extend((path, key_type, key) for key_type, key in entries.items())
        return found

    def preferred_key_types(self, name: str, offered: Sequence[str], extra_user_files: Sequence[str] = ()) -> list[str]:
        """The host key algorithms to offer, types we already know for `name` first (as OpenSSH orders them)."""
        known: list[str] = []
        for _, key_type, _ in self.known_keys(name, extra_user_files):
            for algorithm in _RSA_SIGNATURES if key_type == "ssh-rsa" else (key_type,):
                if algorithm in offered and algorithm not in known:
                    known.append(algorithm)
        return known + [t for t in offered if t not in known]

    def verify(
        self,
        name: str,
        key: paramiko.PKey,
        prompt: HostKeyPrompt | None = None,
        extra_user_files: Sequence[str] = (),
    ) -> HostKeyInfo:
        """Accept a known key, refuse a changed one, ask about an unknown one (see module doc)."""
        entries = self.known_keys(name, extra_user_files)
        key_type = key.get_name()
        same_type = [(path, known) for path, known_type, known in entries if known_type == key_type]
        for path, known in same_type:
            if known != key:
                raise HostKeyChanged(name, key_type, fingerprint(known), fingerprint(key), str(path))
        if same_type:
            return HostKeyInfo.of(name, key)
        others = tuple(sorted({known_type for _, known_type, _ in entries}))
        info = HostKeyInfo.of(name, key, others)
        if prompt is None or not prompt(info):
            raise HostKeyUnknown(name, key_type, info.fingerprint, others, info.key_base64)
        self.add(name, key)
        log.info("saved host key %s %s for %s in %s", key_type, info.fingerprint, name, self.own_file)
        return info

    def accept(self, name: str, key_type: str, key_base64: str) -> HostKeyInfo:
        """Save a key the user accepted after seeing its fingerprint (e.g. from a HostKeyUnknown)."""
        try:
            key = paramiko.PKey.from_type_string(key_type, base64.b64decode(key_base64, validate=True))
        except (ValueError, binascii.Error, paramiko.SSHException) as exc:
            raise InputError("host_key", f"{key_type} key for {name} is not valid: {exc}") from None
        self.add(name, key)
        return HostKeyInfo.of(name, key)

    def add(self, name: str, key: paramiko.PKey) -> None:
        """Append `name keytype base64` to meshdeck's known_hosts file atomically (temp + rename)."""
        line = f"{name} {key.get_name()} {key.get_base64()}\n"
        with self._lock:
            if not self.own_file.parent.is_dir():  # meshdeck's data dir: owner only, as the database's
                self.own_file.parent.mkdir(parents=True, exist_ok=True)
                os.chmod(self.own_file.parent, 0o700)
            try:
                existing = self.own_file.read_text(encoding="utf-8")
            except FileNotFoundError:
                existing = ""
            if existing and not existing.endswith("\n"):
                existing += "\n"
            fd, tmp = tempfile.mkstemp(prefix=".known_hosts.", dir=self.own_file.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    out.write(existing + line)
                    out.flush()
                    os.fsync(out.fileno())
                os.chmod(tmp, 0o600)
                os.replace(tmp, self.own_file)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
