"""Profile secrets in the OS keyring: import and save move them there, launch and export read them back.

A stored profile holds a keyring reference (`launch.profile_secrets`) where its file held an HF_TOKEN;
the value lives in the OS keyring under service "meshdeck-profile-env", account "<profile>/<KEY>" (as
`remote.auth` keeps SSH passwords). Where no usable keyring exists (a server, CI: keyring's fail
backend), a secret cannot be stored: the import is refused, naming the key and what to do instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from meshdeck.core.errors import InputError
from meshdeck.launch.profile import Profile
from meshdeck.launch.profile_secrets import (
    KEYRING_SERVICE,
    keyring_account,
    literal_secrets,
    profile_text_with_env,
    reference_for,
    secret_references,
    with_env,
)

log = logging.getLogger(__name__)
NO_KEYRING = (
    "looks secret, and secrets are not kept in meshdeck's database, but there is no usable OS keyring to hold "
    "it; set it on the servers instead (an HF_TOKEN in ~/.cache/huggingface/token, or the servers' environment) "
    "and leave it out of the profile, or install a keyring backend (GNOME Keyring, KWallet, or the keyrings.alt "
    "package) and import again"
)


# keyring is imported where it is used: it costs ~30 ms, and most commands never touch a secret


def _read(profile_name: str, key: str, source: str) -> str:
    import keyring
    from keyring.errors import KeyringError, NoKeyringError

    account = keyring_account(profile_name, key)
    try:
        value = keyring.get_password(KEYRING_SERVICE, account)
    except NoKeyringError:
        value, why = None, "there is no usable OS keyring to read it from"
    except KeyringError as exc:
        value, why = None, f"the OS keyring could not be read ({exc})"
    else:
        why = f"the OS keyring has no value for it (service {KEYRING_SERVICE}, account {account})"
    if value is None:
        raise InputError(f"{source}: env.{key}", f"{why}; import the profile again with the value in its file")
    return value


def _write(profile_name: str, key: str, value: str, source: str) -> None:
    import keyring
    from keyring.errors import KeyringError, NoKeyringError

    try:
        keyring.set_password(KEYRING_SERVICE, keyring_account(profile_name, key), value)
    except NoKeyringError:
        raise InputError(f"{source}: env.{key}", NO_KEYRING) from None
    except KeyringError as exc:
        raise InputError(
            f"{source}: env.{key}", f"looks secret, and the OS keyring refused to keep it ({exc})"
        ) from None


def read_secrets(profile: Profile, source: str) -> dict[str, str]:
    """The values of `profile`'s keyring references, by env key (its own references only)."""
    return {key: _read(profile.name, key, source) for key in secret_references(profile, source)}


def resolved(profile: Profile, source: str) -> Profile:
    """`profile` as it launches: every keyring reference replaced by its value."""
    values = read_secrets(profile, source)
    return with_env(profile, values, source) if values else profile


def move_to_keyring(profile: Profile, text: str | None, source: str) -> tuple[Profile, str]:
    """Store `profile`'s literal secret values in the keyring; the profile and its text (`text` kept where
    it can be, else the canonical form) with references in their place, ready for the database. Its
    existing references must be its own and present in the keyring."""
    read_secrets(profile, source)
    secrets = literal_secrets(profile)
    for key, value in secrets.items():
        _write(profile.name, key, value, source)
    references = {key: reference_for(profile.name, key) for key in secrets}
    stored = with_env(profile, references, source) if references else profile
    return stored, profile_text_with_env(profile, text, references, source)


def copy_secrets(values: dict[str, str], profile_name: str, source: str) -> None:
    """Keep `values` (env key -> secret) in the keyring for the profile named `profile_name`."""
    for key, value in values.items():
        _write(profile_name, key, value, source)


def forget_secrets(profile_name: str, keys: Iterable[str]) -> None:
    """Remove a deleted profile's secrets from the keyring (what is already gone, or no keyring, is fine)."""
    keys = list(keys)
    if not keys:
        return
    import keyring
    from keyring.errors import KeyringError

    for key in keys:
        try:
            keyring.delete_password(KEYRING_SERVICE, keyring_account(profile_name, key))
        except KeyringError as exc:
            log.debug("keyring entry %s/%s not removed: %s", profile_name, key, exc)
