"""Deployment profiles kept in the database, every edit as a new version.

The store does not parse or validate profiles (the YAML format belongs to `meshdeck.launch.profile`,
and store must not import launch): `services/profiles.py` validates first and hands over the text
exactly as the user wrote it plus the validated profile as a plain mapping. Each write is one
transaction, so a profile is either stored whole with its new version or not at all.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, delete, func, insert, select, update

from meshdeck.core.errors import InputError
from meshdeck.store import schema
from meshdeck.store.database import Database


@dataclass(frozen=True)
class ProfileVersion:
    name: str
    version: int
    yaml: str  # the text as imported or saved
    data: Mapping[str, Any]  # the validated profile
    note: str
    created_at: float


@dataclass(frozen=True)
class ProfileSummary:
    name: str
    current_version: int
    versions: int
    created_at: float
    updated_at: float
    data: Mapping[str, Any]  # of the current version


def _canonical(data: Mapping[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _missing(connection: Connection, name: str) -> InputError:
    known = [row[0] for row in connection.execute(select(schema.profiles.c.name).order_by(schema.profiles.c.name))]
    listed = ", ".join(known) if known else "none yet; add one with `meshdeck profiles import FILE`"
    return InputError("profile", f"no profile named {name!r} (known: {listed})")


def _add_version(
    connection: Connection, profile_id: int, version: int, text: str, data: Mapping[str, Any], note: str, now: float
) -> None:
    connection.execute(
        insert(schema.profile_versions).values(
            profile_id=profile_id, version=version, yaml=text, data=_canonical(data), note=note, created_at=now
        )
    )


def _check(name: str, text: str, data: Mapping[str, Any]) -> None:
    if not isinstance(text, str) or not isinstance(data, Mapping):
        raise InputError("profile", "needs its YAML text and its validated mapping")
    if data.get("name") != name:
        raise InputError("profile.name", f"the profile inside is named {data.get('name')!r}, not {name!r}")


def create_profile(db: Database, name: str, text: str, data: Mapping[str, Any], note: str = "") -> ProfileVersion:
    """Store a new profile as version 1. A name in use is refused (InputError on `profile.name`)."""
    _check(name, text, data)
    now = time.time()
    with db.write() as connection:
        if connection.execute(select(schema.profiles.c.id).where(schema.profiles.c.name == name)).first():
            raise InputError(
                "profile.name", f"a profile named {name!r} already exists; update it, or pick another name"
            )
        result = connection.execute(
            insert(schema.profiles).values(name=name, current_version=1, created_at=now, updated_at=now)
        )
        profile_id = result.lastrowid  # the new row's INTEGER PRIMARY KEY (SQLite's rowid)
        _add_version(connection, profile_id, 1, text, data, note, now)
    return ProfileVersion(name, 1, text, dict(data), note, now)


def update_profile(db: Database, name: str, text: str, data: Mapping[str, Any], note: str = "") -> ProfileVersion:
    """Store an edit as the next version. Saving text identical to the current version adds nothing."""
    _check(name, text, data)
    now = time.time()
    with db.write() as connection:
        row = connection.execute(
            select(schema.profiles.c.id, schema.profiles.c.current_version).where(schema.profiles.c.name == name)
        ).first()
        if row is None:
            raise _missing(connection, name)
        profile_id, current = row
        current_text = connection.execute(
            select(schema.profile_versions.c.yaml).where(
                schema.profile_versions.c.profile_id == profile_id, schema.profile_versions.c.version == current
            )
        ).scalar()
        if current_text == text:
            return _get(connection, name, current)
        version = current + 1
        _add_version(connection, profile_id, version, text, data, note, now)
        connection.execute(
            update(schema.profiles)
            .where(schema.profiles.c.id == profile_id)
            .values(current_version=version, updated_at=now)
        )
    return ProfileVersion(name, version, text, dict(data), note, now)


def delete_profile(db: Database, name: str) -> int:
    """Delete a profile and all its versions; returns how many versions went. Deployments keep their copy."""
    with db.write() as connection:
        profile_id = connection.execute(select(schema.profiles.c.id).where(schema.profiles.c.name == name)).scalar()
        if profile_id is None:
            raise _missing(connection, name)
        count = connection.execute(
            select(func.count()).where(schema.profile_versions.c.profile_id == profile_id)
        ).scalar_one()
        connection.execute(delete(schema.profiles).where(schema.profiles.c.id == profile_id))
    return int(count)


def _to_version(name: str, row: Row[Any]) -> ProfileVersion:
    return ProfileVersion(name, row.version, row.yaml, json.loads(row.data), row.note, row.created_at)


def _get(connection: Connection, name: str, version: int | None) -> ProfileVersion:
    profiles, versions = schema.profiles, schema.profile_versions
    row = connection.execute(select(profiles.c.id, profiles.c.current_version).where(profiles.c.name == name)).first()
    if row is None:
        raise _missing(connection, name)
    wanted = row.current_version if version is None else version
    found = connection.execute(
        select(versions).where(versions.c.profile_id == row.id, versions.c.version == wanted)
    ).first()
    if found is None:
        raise InputError("version", f"profile {name!r} has versions 1 to {row.current_version}, not {version!r}")
    return _to_version(name, found)


def get_profile(db: Database, name: str, version: int | None = None) -> ProfileVersion:
    """The current version of a profile, or the given one."""
    with db.read() as connection:
        return _get(connection, name, version)


def find_profile(db: Database, name: str) -> ProfileVersion | None:
    with db.read() as connection:
        exists = connection.execute(select(schema.profiles.c.id).where(schema.profiles.c.name == name)).first()
        return _get(connection, name, None) if exists else None


def profile_versions(db: Database, name: str) -> list[ProfileVersion]:
    """Every version of a profile, oldest first."""
    with db.read() as connection:
        profile_id = connection.execute(select(schema.profiles.c.id).where(schema.profiles.c.name == name)).scalar()
        if profile_id is None:
            raise _missing(connection, name)
        rows = connection.execute(
            select(schema.profile_versions)
            .where(schema.profile_versions.c.profile_id == profile_id)
            .order_by(schema.profile_versions.c.version)
        )
        return [_to_version(name, row) for row in rows]


def list_profiles(db: Database) -> list[ProfileSummary]:
    """Every profile with its current version, by name."""
    profiles, versions = schema.profiles, schema.profile_versions
    counts = select(versions.c.profile_id, func.count().label("versions")).group_by(versions.c.profile_id).subquery()
    query = (
        select(
            profiles.c.name,
            profiles.c.current_version,
            counts.c.versions,
            profiles.c.created_at,
            profiles.c.updated_at,
            versions.c.data,
        )
        .join(counts, counts.c.profile_id == profiles.c.id)
        .join(
            versions,
            (versions.c.profile_id == profiles.c.id) & (versions.c.version == profiles.c.current_version),
        )
        .order_by(profiles.c.name)
    )
    with db.read() as connection:
        return [
            ProfileSummary(
                row.name, row.current_version, row.versions, row.created_at, row.updated_at, json.loads(row.data)
            )
            for row in connection.execute(query)
        ]
