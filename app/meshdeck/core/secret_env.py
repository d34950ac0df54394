"""Which environment variables hold secrets, and how their values are shown: the one predicate.

A profile's env may carry an HF_TOKEN or a WANDB_API_KEY. The servers need the value; nothing meshdeck
shows, logs or keeps in its database does (DESIGN.md §7). Their values are shown as MASK.

A key looks secret when one of its name parts (split at `_`, digits and camelCase humps: `WANDB_API_KEY`
-> WANDB, API, KEY) is KEY, TOKEN, SECRET or PASSWORD (KEYS, SECRETS, PASSWORDS, PASSWD and PASSPHRASE
too), or ends with one of those words (`PGPASSWORD`, `APIKEY`, `AUTHTOKEN`). A word buried inside a part
does not count, and a key whose last part names a file, a path or a folder holds a path, not a secret:
`SSLKEYLOGFILE`, `HF_TOKEN_PATH`, `VLLM_SSL_KEYFILE` are shown as they are, since a reviewer needs to see
where they point. `TOKENIZERS_PARALLELISM`, `MAX_TOKENS` and other counts or switches are not secrets.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from meshdeck.core.errors import InputError

SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE")
_PLURALS = frozenset({"KEYS", "SECRETS", "PASSWORDS"})  # not TOKENS: MAX_NUM_BATCHED_TOKENS is a count
_PATH_WORDS = ("FILE", "PATH", "DIR", "FOLDER", "FILENAME")  # a last part ending so names where a thing is
NOT_SECRETS = frozenset({"TOKENIZERS_PARALLELISM", "HF_HUB_DISABLE_IMPLICIT_TOKEN"})
MASK = "<masked>"
_HUMP = re.compile(r"([a-z0-9])([A-Z])")
_SEPARATORS = re.compile(r"[^A-Z]+")


def name_parts(key: str) -> list[str]:
    """`WANDB_API_KEY` -> [WANDB, API, KEY]; `myApiKey2` -> [MY, API, KEY]."""
    return [part for part in _SEPARATORS.split(_HUMP.sub(r"\1_\2", key).upper()) if part]


def looks_secret(key: str) -> bool:
    """Whether the env variable `key` holds a secret (its value is masked wherever it is shown or kept)."""
    if key.upper() in NOT_SECRETS:
        return False
    parts = name_parts(key)
    if not parts or parts[-1].endswith(_PATH_WORDS):
        return False
    return any(part in _PLURALS or part.endswith(SECRET_WORDS) for part in parts)


def mentions_secret(text: str) -> bool:
    """Whether free text (a line of a profile that no longer parses) names any secret word anywhere: the
    broad rule, for text whose keys and values cannot be told apart."""
    upper = text.upper()
    return any(word in upper for word in SECRET_WORDS)


def masked_value(key: str, value: str) -> str:
    return MASK if looks_secret(key) else value


def masked_env(env: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """`(key, value)` pairs with the values of secret-looking keys replaced by MASK, in the same order."""
    return tuple((key, masked_value(key, value)) for key, value in env)


def refuse_secret_env(env: Iterable[tuple[str, str]], written_into: str, instead: str) -> None:
    """Refuse an env whose keys look secret when it is about to be written into `written_into` in the clear
    (a manifest, a batch script the scheduler keeps); `instead` says where the secret belongs."""
    for key, _ in env:
        if looks_secret(key):
            raise InputError(f"env.{key}", f"a secret would be written into {written_into}; {instead}")
