"""Which environment variables hold secrets, and how their values are shown: the one predicate.

A profile's env may carry an HF_TOKEN or a WANDB_API_KEY. The servers need the value; nothing meshdeck
shows, logs or keeps in its database does (DESIGN.md §7). A key looks secret when its name contains
TOKEN, KEY, SECRET or PASSWORD (any case); a few well-known switches whose names merely contain one of
those words (TOKENIZERS_PARALLELISM) are not secrets. Their values are shown as MASK.
"""

from __future__ import annotations

from collections.abc import Iterable

SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
NOT_SECRETS = frozenset({"TOKENIZERS_PARALLELISM"})
MASK = "<masked>"


def looks_secret(key: str) -> bool:
    """Whether the env variable `key` holds a secret (its value is masked wherever it is shown or kept)."""
    upper = key.upper()
    return upper not in NOT_SECRETS and any(word in upper for word in SECRET_WORDS)


def masked_value(key: str, value: str) -> str:
    return MASK if looks_secret(key) else value


def masked_env(env: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """`(key, value)` pairs with the values of secret-looking keys replaced by MASK, in the same order."""
    return tuple((key, masked_value(key, value)) for key, value in env)
