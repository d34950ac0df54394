"""Fixtures for the store tests: a fresh database file per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from meshdeck.store.database import Database, open_database


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "meshdeck.db"


@pytest.fixture
def db(db_path: Path) -> Iterator[Database]:
    database = open_database(db_path)
    try:
        yield database
    finally:
        database.close()
