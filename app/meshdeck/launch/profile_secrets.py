"""Secret env values in profiles: keyring references in their place, and profile text with values swapped.

Secrets never go in meshdeck's database (DESIGN.md §7). A stored profile carries, for each env key that
looks secret (`core.secret_env.looks_secret`), a reference instead of the value:

    env:
      HF_TOKEN: keyring:meshdeck-profile-env/ds32-h200-2n/HF_TOKEN

naming the OS keyring service and the account `<profile name>/<KEY>` that hold it (services read and
write the keyring; this module is pure). A reference is only ever honoured for its own profile and key,
so a profile cannot name another profile's secret and have it sent to its own hosts, and a reference is
never accepted from a file (`refuse_references`): only meshdeck writes them, when it stores a profile.

`replace_env_values` swaps env values inside the profile's own text, keeping every other character
(comments, layout, quoting): the stored text stays what the user wrote, and `export` gives the file
back. Each swap is checked by parsing the result; where the text cannot be kept exactly, the
canonical form (`dump_profile`) is used instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import yaml

from meshdeck.core.errors import InputError
from meshdeck.core.secret_env import MASK, looks_secret, mentions_secret
from meshdeck.launch.profile import NAME_PATTERN, Profile, dump_profile, profile_from_mapping, profile_to_mapping
from meshdeck.launch.profile_yaml import load_yaml

KEYRING_SERVICE = "meshdeck-profile-env"
_REFERENCE = re.compile(rf"^keyring:{re.escape(KEYRING_SERVICE)}/({NAME_PATTERN[1:-1]})/([A-Za-z_][A-Za-z0-9_]*)$")


def keyring_account(profile_name: str, key: str) -> str:
    return f"{profile_name}/{key}"


def reference_for(profile_name: str, key: str) -> str:
    """What a stored profile carries in place of the secret value of `key`."""
    return f"keyring:{KEYRING_SERVICE}/{keyring_account(profile_name, key)}"


def parse_reference(value: str) -> tuple[str, str] | None:
    """(profile name, key) of a keyring reference; None when `value` is not one."""
    found = _REFERENCE.match(value)
    return (found.group(1), found.group(2)) if found else None


def literal_secrets(profile: Profile) -> dict[str, str]:
    """The secret-looking env entries that hold a value (not a keyring reference)."""
    return {k: v for k, v in profile.env.items() if looks_secret(k) and parse_reference(v) is None}


def secret_references(profile: Profile, source: str) -> dict[str, str]:
    """The env keys that hold a keyring reference, each to its keyring account. A reference to any account
    but this profile's own for that key is refused, naming the field. Whether the key looks secret does not
    matter here: a reference stored under an older rule of `looks_secret` still resolves."""
    accounts: dict[str, str] = {}
    for key, value in profile.env.items():
        target = parse_reference(value)
        if target is None:
            continue
        if target != (profile.name, key):
            raise InputError(
                f"{source}: env.{key}",
                f"refers to the keyring entry of profile {target[0]} ({target[1]}); a profile may only use its own "
                "secrets: put the value itself here",
            )
        accounts[key] = keyring_account(profile.name, key)
    return accounts


def refuse_references(profile: Profile, source: str) -> None:
    """A profile file (imported, or launched as it is) must hold its secrets' values, never a keyring
    reference: meshdeck only ever writes references itself. From a file, a reference would have meshdeck
    fetch whatever secret is kept under that name (a colleague's file imported with --replace over p1 naming
    p1's own HF_TOKEN) and send it wherever the file says (its HF_ENDPOINT)."""
    for key, value in profile.env.items():
        target = parse_reference(value)
        if target is None:
            continue
        whose = "this profile's own" if target == (profile.name, key) else f"profile {target[0]}'s ({target[1]})"
        raise InputError(
            f"{source}: env.{key}",
            f"is a keyring reference (to {whose} secret), which meshdeck never accepts from a file: it would "
            "send the secret kept under that name wherever the file says; put the value itself in the file "
            "(`meshdeck profiles export NAME` writes it), or leave the key out and set it on the servers",
        )


def with_env(profile: Profile, values: Mapping[str, str], source: str = "profile") -> Profile:
    """`profile` with the env values in `values` replaced (validated again)."""
    data = profile_to_mapping(profile)
    data["env"] = {**profile.env, **values}
    return profile_from_mapping(data, source)


def _env_value_nodes(node: yaml.Node | None) -> dict[str, yaml.Node]:
    if not isinstance(node, yaml.MappingNode):
        return {}
    env = next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == "env"), None)
    if not isinstance(env, yaml.MappingNode):
        return {}
    return {k.value: v for k, v in env.value if isinstance(k, yaml.ScalarNode) and isinstance(v, yaml.ScalarNode)}


def _spellings(value: str) -> tuple[str, ...]:
    """How a value may be written in place: plain first (the way most files write a token), then quoted."""
    return value, "'" + value.replace("'", "''") + "'", json.dumps(value, ensure_ascii=False)


def replace_env_values(text: str, values: Mapping[str, str], source: str = "profile") -> str | None:
    """`text` with the env values named in `values` replaced and every other character kept; None when
    that cannot be done exactly (the key is not written as a plain `KEY: value` pair, or no spelling of the
    value parses back to it)."""
    original = load_yaml(text, source)[1]
    if not isinstance(original, dict) or not isinstance(original.get("env"), dict):
        return None
    expected: dict[str, Any] = dict(original)
    for key, value in values.items():
        node = _env_value_nodes(load_yaml(text, source)[0]).get(key)
        if node is None:
            return None
        start, end = node.start_mark.index, node.end_mark.index
        written = text[start:end]
        tail = written[len(written.rstrip()) :]  # a block scalar's span ends with its line breaks: keep them
        expected["env"] = {**expected["env"], key: value}
        for spelling in _spellings(value):
            candidate = text[:start] + spelling + tail + text[end:]
            try:
                if load_yaml(candidate, source)[1] == expected:
                    text = candidate
                    break
            except InputError:
                continue
        else:
            return None
    return text


def profile_text_with_env(profile: Profile, text: str | None, values: Mapping[str, str], source: str) -> str:
    """The text of `profile` with its env values in `values` replaced: `text` kept where it can be,
    else the canonical form."""
    if not values:
        return text if text is not None else dump_profile(profile)
    swapped = replace_env_values(text, values, source) if text is not None else None
    return swapped if swapped is not None else dump_profile(with_env(profile, values, source))


def _masked_lines(text: str) -> str:
    """For text that does not parse: every line that names a secret-looking word keeps only its key."""
    return "\n".join(
        f"{line.partition(':')[0]}: {MASK}" if mentions_secret(line) else line for line in text.split("\n")
    )


def masked_profile_text(text: str, source: str = "profile") -> str:
    """`text` with the value of every secret-looking env key written as MASK (references stay: they are no
    secret), for showing and keeping a profile's text. Text that no longer parses (stored by an older
    meshdeck) is masked line by line."""
    try:
        data = load_yaml(text, source)[1]
    except InputError:
        return _masked_lines(text)
    if not isinstance(data, dict) or "env" not in data:
        return text
    env = data["env"]
    if not isinstance(env, dict):
        return _masked_lines(text)
    secrets = {
        str(k): MASK
        for k, v in env.items()
        if looks_secret(str(k)) and not (isinstance(v, str) and parse_reference(v) is not None)
    }
    if not secrets:
        return text
    swapped = replace_env_values(text, secrets, source)
    if swapped is not None:
        return swapped
    return yaml.safe_dump({**data, "env": {**env, **secrets}}, sort_keys=False, allow_unicode=True)
