"""Profiles and the deployments launched from them: validate with `meshdeck.launch.profile`, keep in
the store, and snapshot the stored profile with each deployment the console launches
(`StoreDeploymentRecorder`).

A profile file is untrusted: it is parsed and validated whole before anything is written, so a bad
file (wrong types, unknown keys, a layout that does not match its hosts, a YAML bomb) is refused with
the field named and leaves the database as it was. The text is stored exactly as written, so
`export` gives back the imported file byte for byte; `canonical=True` gives the normalised form
(every default of its engine spelled out) that `dump_profile` writes. Secrets are the exception: the
value of an env key that looks secret goes to the OS keyring and a reference takes its place in the
stored text (services/profile_secrets.py); a launch and an export read it back.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from meshdeck.core.errors import InputError
from meshdeck.launch.plan import LaunchPlan
from meshdeck.launch.profile import (
    MAX_PROFILE_BYTES,
    Layout,
    Profile,
    dump_profile,
    load_profile,
    profile_from_mapping,
    profile_to_mapping,
)
from meshdeck.launch.profile_secrets import (
    literal_secrets,
    parse_reference,
    profile_text_with_env,
    reference_for,
    refuse_references,
    with_env,
)
from meshdeck.launch.profile_yaml import profile_text
from meshdeck.services import profile_secrets
from meshdeck.services.deployments.model import DeploymentSnapshot
from meshdeck.services.deployments.records import StoreRecorder
from meshdeck.store import profiles as profile_store
from meshdeck.store.database import Database
from meshdeck.store.profiles import ProfileSummary as ProfileSummary  # the views list them, typed
from meshdeck.store.profiles import ProfileVersion as ProfileVersion


def layout_label(data: Mapping[str, Any]) -> str:
    """A stored profile's layout in the planner's notation ("TP1·DP16·EP", as `plan` and the console's planner
    write it); "?" when the stored mapping holds none that validates."""
    try:
        return Layout.model_validate(data.get("layout") or {}).label()
    except ValidationError:
        return "?"


@dataclass(frozen=True)
class StoredProfile:
    """A validated profile as stored: the model plus its version record."""

    profile: Profile
    version: ProfileVersion


_NOT_A_FILE = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_a_file(mode: int) -> str | None:
    return next((kind for test, kind in _NOT_A_FILE if test(mode)), None)


def read_profile_file(path: str) -> bytes:
    """The bytes of a profile file, read once and never more than MAX_PROFILE_BYTES + 1 of them (so
    `/dev/zero` or an endless pipe cannot fill memory). Directories, devices and sockets are refused
    before they are read; a named pipe is read like a file (`<(generate-profile)` works)."""
    try:
        kind = _not_a_file(os.stat(path).st_mode)
        if kind is None:
            with open(path, "rb") as handle:
                kind = _not_a_file(os.fstat(handle.fileno()).st_mode)  # the file opened is the file checked
                data = b"" if kind else handle.read(MAX_PROFILE_BYTES + 1)
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})") from None
    if kind is not None:
        raise InputError(path, f"is {kind}, not a profile file")
    if len(data) > MAX_PROFILE_BYTES:
        raise InputError(path, f"is larger than the {MAX_PROFILE_BYTES}-byte limit for a profile")
    return data


def _source(stored: ProfileVersion) -> str:
    return f"profile {stored.name} v{stored.version}"


def parse_profile(text: str | bytes, source: str) -> Profile:
    """load_profile: refuses anything but a valid profile (deep nesting included) with an InputError naming
    the source and field."""
    return load_profile(text, source)


def import_profile(
    db: Database, text: str | bytes, source: str, *, replace: bool = False, note: str = ""
) -> StoredProfile:
    """Validate profile YAML and store it: a new profile, or (with `replace`) a new version of the one
    with its name. Its secret env values go to the OS keyring and the stored text carries references
    in their place (profile_secrets); a keyring reference in the file is refused. Raises InputError naming
    the file and field; on error nothing is stored."""
    profile = parse_profile(text, source)
    refuse_references(profile, source)  # a file holds values: a reference would fetch someone's secret
    body = profile_text(text, source)
    exists = profile_store.find_profile(db, profile.name) is not None
    if exists and not replace:
        raise InputError(
            f"{source}: name",
            f"a profile named {profile.name!r} already exists; pass --replace to store this as its next version",
        )
    stored, body = profile_secrets.move_to_keyring(profile, body, source)
    note = note or f"imported from {source}"
    write = profile_store.update_profile if exists else profile_store.create_profile
    return StoredProfile(stored, write(db, stored.name, body, profile_to_mapping(stored), note))


def save_profile(db: Database, profile: Profile, note: str = "") -> StoredProfile:
    """Store an edited profile (from the console's editor) as the next version, or create it; its secret
    env values go to the OS keyring, as on import. Keyring references are kept only as the current
    version holds them."""
    source = f"profile {profile.name}"
    checked = profile_from_mapping(profile_to_mapping(profile), source)
    current = profile_store.find_profile(db, checked.name)
    _refuse_new_references(checked, current, source)
    stored, text = profile_secrets.move_to_keyring(checked, None, source)
    data = profile_to_mapping(stored)
    if current is None:
        version = profile_store.create_profile(db, stored.name, text, data, note)
    else:
        version = profile_store.update_profile(db, stored.name, text, data, note)
    return StoredProfile(stored, version)


def _refuse_new_references(profile: Profile, current: ProfileVersion | None, source: str) -> None:
    """The editor shows a stored profile's references and saves them back as they are; a reference the
    current version does not hold (pasted from someone's file) is refused as an import refuses it."""
    kept = dict((current.data.get("env") or {}) if current is not None else {})
    for key, value in profile.env.items():
        if parse_reference(value) is not None and kept.get(key) != value:
            raise InputError(
                f"{source}: env.{key}",
                "is a keyring reference the stored profile does not hold; meshdeck writes references itself: "
                "type the value (it goes to the OS keyring), or leave the key out",
            )


def get_profile(db: Database, name: str, version: int | None = None) -> StoredProfile:
    """A stored profile as stored: its secrets are keyring references (what the console shows and edits)."""
    stored = profile_store.get_profile(db, name, version)
    return StoredProfile(parse_profile(stored.yaml, _source(stored)), stored)


def profile_for_launch(db: Database, name: str, version: int | None = None) -> Profile:
    """A stored profile as it launches: its keyring references replaced by the values in the OS keyring."""
    stored = get_profile(db, name, version)
    return profile_secrets.resolved(stored.profile, _source(stored.version))


@dataclass(frozen=True)
class ExportedProfile:
    text: str
    from_keyring: tuple[str, ...]  # env keys whose values were read from the OS keyring into `text`
    holds_secret: bool = False  # `text` carries a secret value (from the keyring, or as an older meshdeck kept it)


def exported_profile(
    db: Database, name: str, version: int | None = None, *, canonical: bool = False
) -> ExportedProfile:
    """The profile's YAML with its secret values back in place: as stored (byte for byte what was
    imported, where it held no secret), or normalised (`canonical`)."""
    stored = profile_store.get_profile(db, name, version)
    source = _source(stored)
    try:
        profile = parse_profile(stored.yaml, source)
    except InputError:
        if canonical:
            raise
        # stored by an older meshdeck under looser rules: as it is, and kept private
        return ExportedProfile(stored.yaml, (), holds_secret=True)
    values = profile_secrets.read_secrets(profile, source)
    if canonical:
        text = dump_profile(with_env(profile, values, source))
    else:
        text = profile_text_with_env(profile, stored.yaml, values, source)
    return ExportedProfile(text, tuple(values), holds_secret=bool(values or literal_secrets(profile)))


def export_profile(db: Database, name: str, version: int | None = None, *, canonical: bool = False) -> str:
    return exported_profile(db, name, version, canonical=canonical).text


def duplicate_profile(db: Database, source_name: str, new_name: str, note: str = "") -> StoredProfile:
    """A copy of the current version under a new name (the `name:` inside the YAML is changed too); its
    secrets are copied in the keyring to the new name."""
    source = get_profile(db, source_name)
    values = {
        **literal_secrets(source.profile),
        **profile_secrets.read_secrets(source.profile, _source(source.version)),
    }
    data = dict(profile_to_mapping(source.profile))
    data["name"] = new_name
    data["env"] = {**source.profile.env, **{key: reference_for(new_name, key) for key in values}}
    copy = profile_from_mapping(data, "duplicate")
    note = note or f"duplicated from {source_name} v{source.version.version}"
    version = profile_store.create_profile(db, new_name, dump_profile(copy), profile_to_mapping(copy), note)
    try:
        profile_secrets.copy_secrets(values, new_name, "duplicate")
    except InputError:
        profile_store.delete_profile(db, new_name)  # a copy whose secrets are missing would not launch
        raise
    return StoredProfile(copy, version)


def delete_profile(db: Database, name: str) -> int:
    """Delete a profile, its versions and the secrets any of them kept in the keyring."""
    keys = {
        key
        for version in profile_store.profile_versions(db, name)
        for key, value in dict(version.data.get("env") or {}).items()
        if isinstance(value, str) and parse_reference(value) == (name, key)
    }
    count = profile_store.delete_profile(db, name)
    profile_secrets.forget_secrets(name, sorted(keys))
    return count


def list_profiles(db: Database) -> list[ProfileSummary]:
    return profile_store.list_profiles(db)


def profile_version(db: Database, name: str, version: int | None = None) -> ProfileVersion:
    """One version's record as stored, not parsed again (`profiles show` prints what is there)."""
    return profile_store.get_profile(db, name, version)


def profile_versions(db: Database, name: str) -> list[ProfileVersion]:
    return profile_store.profile_versions(db, name)


# -- deployments ------------------------------------------------------------------------------------


class StoreDeploymentRecorder(StoreRecorder):
    """The console's recorder: one for every launch, each snapshotting the stored profile the plan was
    made from (a plan is named after its profile). Everything else is `deployments.records.StoreRecorder`."""

    def deployment_started(self, snapshot: DeploymentSnapshot, plan: LaunchPlan) -> None:
        stored = profile_store.find_profile(self.db, plan.name)
        if stored is None:
            super().deployment_started(snapshot, plan)
            return
        recorder = StoreRecorder(
            self.db, profile_name=stored.name, profile_version=stored.version, profile_yaml=stored.yaml
        )
        recorder.deployment_started(snapshot, plan)
