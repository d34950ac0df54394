"""Profiles and the deployments launched from them: validate with `meshdeck.launch.profile`, keep in
the store, and snapshot the stored profile with each deployment the console launches
(`StoreDeploymentRecorder`).

A profile file is untrusted: it is parsed and validated whole before anything is written, so a bad
file (wrong types, unknown keys, a layout that does not match its hosts, a YAML bomb) is refused with
the field named and leaves the database as it was. The text is stored exactly as written, so
`export` gives back the imported file byte for byte; `canonical=True` gives the normalised form
(every default of its engine spelled out) that `dump_profile` writes.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from meshdeck.core.errors import InputError
from meshdeck.launch.plan import LaunchPlan
from meshdeck.launch.profile import (
    MAX_PROFILE_BYTES,
    Profile,
    dump_profile,
    load_profile,
    profile_from_mapping,
    profile_to_mapping,
)
from meshdeck.services.deploy_model import DeploymentSnapshot
from meshdeck.services.deploy_records import StoreRecorder
from meshdeck.store import profiles as profile_store
from meshdeck.store.database import Database
from meshdeck.store.profiles import ProfileSummary, ProfileVersion


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


def parse_profile(text: str | bytes, source: str) -> Profile:
    """load_profile: refuses anything but a valid profile (deep nesting included) with an InputError naming
    the source and field."""
    return load_profile(text, source)


def import_profile(
    db: Database, text: str | bytes, source: str, *, replace: bool = False, note: str = ""
) -> StoredProfile:
    """Validate profile YAML and store it: a new profile, or (with `replace`) a new version of the one
    with its name. Raises InputError naming the file and field; on error nothing is stored."""
    profile = parse_profile(text, source)
    body = text.decode("utf-8") if isinstance(text, bytes) else text
    data = profile_to_mapping(profile)
    if profile_store.find_profile(db, profile.name) is None:
        version = profile_store.create_profile(db, profile.name, body, data, note or f"imported from {source}")
    elif replace:
        version = profile_store.update_profile(db, profile.name, body, data, note or f"imported from {source}")
    else:
        raise InputError(
            f"{source}: name",
            f"a profile named {profile.name!r} already exists; pass --replace to store this as its next version",
        )
    return StoredProfile(profile, version)


def save_profile(db: Database, profile: Profile, note: str = "") -> StoredProfile:
    """Store an edited profile (from the console's editor) as the next version, or create it."""
    checked = profile_from_mapping(profile_to_mapping(profile), f"profile {profile.name}")
    text = dump_profile(checked)
    data = profile_to_mapping(checked)
    if profile_store.find_profile(db, checked.name) is None:
        version = profile_store.create_profile(db, checked.name, text, data, note)
    else:
        version = profile_store.update_profile(db, checked.name, text, data, note)
    return StoredProfile(checked, version)


def get_profile(db: Database, name: str, version: int | None = None) -> StoredProfile:
    stored = profile_store.get_profile(db, name, version)
    return StoredProfile(parse_profile(stored.yaml, f"profile {name} v{stored.version}"), stored)


def export_profile(db: Database, name: str, version: int | None = None, *, canonical: bool = False) -> str:
    """The profile's YAML: as stored (byte for byte what was imported), or normalised."""
    stored = profile_store.get_profile(db, name, version)
    if not canonical:
        return stored.yaml
    return dump_profile(parse_profile(stored.yaml, f"profile {name} v{stored.version}"))


def duplicate_profile(db: Database, source_name: str, new_name: str, note: str = "") -> StoredProfile:
    """A copy of the current version under a new name (the `name:` inside the YAML is changed too)."""
    source = get_profile(db, source_name)
    data = dict(profile_to_mapping(source.profile))
    data["name"] = new_name
    copy = profile_from_mapping(data, "duplicate")
    text = dump_profile(copy)
    version = profile_store.create_profile(
        db, new_name, text, profile_to_mapping(copy), note or f"duplicated from {source_name} v{source.version.version}"
    )
    return StoredProfile(copy, version)


def delete_profile(db: Database, name: str) -> int:
    return profile_store.delete_profile(db, name)


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
    made from (a plan is named after its profile). Everything else is `deploy_records.StoreRecorder`."""

    def deployment_started(self, snapshot: DeploymentSnapshot, plan: LaunchPlan) -> None:
        stored = profile_store.find_profile(self.db, plan.name)
        if stored is None:
            super().deployment_started(snapshot, plan)
            return
        recorder = StoreRecorder(
            self.db, profile_name=stored.name, profile_version=stored.version, profile_yaml=stored.yaml
        )
        recorder.deployment_started(snapshot, plan)
